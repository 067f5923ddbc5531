package splitlab;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;

import org.jgroups.Address;
import org.jgroups.Event;
import org.jgroups.Message;
import org.jgroups.stack.Protocol;
import org.jgroups.util.UUID;

/**
 * The one Java class of splitlab's JGroups node: a protocol placed directly above the transport (UDP) that shows
 * every message to a {@link TraceListener}, in both directions, serialised exactly as it goes on the wire. It
 * exists because JGroups 2.12's stack can only be extended by a subclass of {@code Protocol}, which JPype cannot
 * write in Python; everything else (decoding, what became of a message, the history) is Python's.
 *
 * An incoming message's {@code arrived} and {@code settled} bracket the synchronous pass up the stack, on the
 * same thread: whatever the layers above did with it (delivered it, buffered it, asked for the first seqno) happens
 * between the two.
 */
public class SplitlabTrace extends Protocol {
    private volatile TraceListener listener;

    public void setListener(TraceListener listener) {
        this.listener = listener;
    }

    private static byte[] bytes(Message msg) {
        ByteArrayOutputStream buffer = new ByteArrayOutputStream(msg.getLength() + 128);
        try {
            msg.writeTo(new DataOutputStream(buffer));
        } catch (IOException e) {  // a ByteArrayOutputStream does not fail
            throw new IllegalStateException(e);
        }
        return buffer.toByteArray();
    }

    /** The member's logical name (its splitlab node name), null while discovery has not told it yet. */
    private static String name(Address addr) {
        if (addr instanceof UUID) {
            return UUID.get(addr);
        }
        return addr == null ? null : addr.toString();
    }

    @Override
    public Object up(Event evt) {
        TraceListener l = listener;
        if (l == null || evt.getType() != Event.MSG) {
            return up_prot.up(evt);
        }
        Message msg = (Message) evt.getArg();
        l.arrived(bytes(msg), name(msg.getSrc()));
        try {
            return up_prot.up(evt);
        } finally {
            l.settled();
        }
    }

    @Override
    public Object down(Event evt) {
        TraceListener l = listener;
        if (l != null && evt.getType() == Event.MSG) {
            Message msg = (Message) evt.getArg();
            l.departing(bytes(msg), name(msg.getDest()));
        }
        return down_prot.down(evt);
    }
}
