package splitlab;

/**
 * What the splitlab JGroups node (jgnode, Python through JPype) is told by {@link SplitlabTrace}: every message
 * that crosses the bottom of the stack, serialised as JGroups writes it ({@code Message.writeTo}), with the
 * logical names of its addresses. Implemented on the Python side; decoding and the history live there.
 */
public interface TraceListener {
    /** A message arrived from the transport; {@link #settled} follows on the same thread. */
    void arrived(byte[] message, String src);

    /** The stack above finished with the message this thread's last {@link #arrived} announced (delivered,
     * buffered or dropped). */
    void settled();

    /** A message leaves for the transport ({@code dest} null: to the group). */
    void departing(byte[] message, String dest);
}
