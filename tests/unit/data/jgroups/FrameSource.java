/*
 * FrameSource: makes the real JGroups 2.12.2 jar (Debian's libjgroups-java) produce UDP datagrams on 127.0.0.1 and
 * logs, for every datagram a member receives, its bytes and what JGroups' own code reads from them. A tool for
 * regenerating the fixtures of tests/unit/test_jgroups_wire.py (see README.md beside it); not part of splitlab.
 *
 *   javac -cp /usr/share/java/jgroups.jar -d /tmp/fs FrameSource.java
 *   java -Djava.net.preferIPv4Stack=true -cp /tmp/fs:/usr/share/java/jgroups.jar FrameSource MODE OUT.jsonl
 *
 * MODE: unicast2 | unicast | bundled (unicast2 with enable_bundling), or `parse` (no network: reads hex datagrams, one per line, from stdin and
 * prints JGroups' reading of each as one JSON line; the unit tests feed it forged datagrams).
 *
 * unicast2, unicast, bundled: Three channels A, B, C (UDP ports 7800, 7801, 7802) in this JVM, stack:
 * UDP(ip_mcast=false) TCPPING MERGE2 (FD_SOCK in unicast) FD_ALL VERIFY_SUSPECT pbcast.NAKACK(use_mcast_xmit=false) UNICAST2|UNICAST
 * pbcast.STABLE pbcast.GMS UFC MFC FRAG2. The transport is UDP itself with one method overridden
 * (CapturingUDP.receive, the entry point of every received datagram, TP.receive): it parses the datagram with
 * JGroups' own TP.readMessage / TP.readMessageList, writes one JSON line (hex of the datagram, and per message
 * dest, src, flags, buffer length, and per header its protocol id, magic number, class, toString() and the
 * header's fields read by reflection), then either passes it up unchanged or drops it (the scenario's faults:
 * dropped datagrams make NAKACK and UNICAST/UNICAST2 retransmit). CapturingUDP keeps UDP's protocol id (21), so
 * what goes on the wire is exactly what UDP sends.
 */

import org.jgroups.Address;
import org.jgroups.Header;
import org.jgroups.JChannel;
import org.jgroups.Message;
import org.jgroups.ReceiverAdapter;
import org.jgroups.View;
import org.jgroups.conf.ClassConfigurator;
import org.jgroups.protocols.UDP;
import org.jgroups.protocols.UNICAST;
import org.jgroups.protocols.UNICAST2;
import org.jgroups.stack.IpAddress;
import org.jgroups.stack.Protocol;
import org.jgroups.util.UUID;

import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.FileWriter;
import java.io.PrintWriter;
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

public class FrameSource {
    static final String CLUSTER = "splitlab-frames";
    static final int BASE_PORT = 7800;
    static final String[] NAMES = {"A", "B", "C"};

    static PrintWriter out;
    /** "RECEIVER|payload" keys: the first datagram RECEIVER gets that carries a message with this payload is dropped. */
    static final Set<String> dropOnce = Collections.synchronizedSet(new HashSet<String>());
    /** "RECEIVER|sender port": RECEIVER drops datagrams from that port that carry nothing but FD_ALL heartbeats. */
    static final Set<String> deafToHeartbeats = Collections.synchronizedSet(new HashSet<String>());
    /** "RECEIVER|sender port": RECEIVER drops every datagram from that port (a one-way cut). */
    static final Set<String> cut = Collections.synchronizedSet(new HashSet<String>());

    /** UDP with its receive entry point logging every datagram; keeps UDP's protocol id so the wire is UDP's. */
    public static class CapturingUDP extends UDP {
        public CapturingUDP() {
            super();
            this.id = ClassConfigurator.getProtocolId(UDP.class);
        }

        protected void receive(Address sender, byte[] data, int offset, int length) {
            byte[] frame = Arrays.copyOfRange(data, offset, offset + length);
            String me = NAMES[getBindPort() - BASE_PORT];
            int from_port = sender instanceof IpAddress ? ((IpAddress) sender).getPort() : -1;
            String line;
            boolean drop = false;
            try {
                List<Message> msgs = new ArrayList<Message>();
                String view = read(frame, msgs);
                drop = decideDrop(me, from_port, msgs);
                line = "{\"node\":" + q(me) + ",\"recv_port\":" + getBindPort() + ",\"from_port\":" + from_port
                        + ",\"dropped\":" + drop + "," + view + ",\"hex\":" + q(hex(frame)) + "}";
            } catch (Throwable t) {
                line = "{\"node\":" + q(me) + ",\"error\":" + q(t.toString()) + ",\"hex\":" + q(hex(frame)) + "}";
            }
            synchronized (out) {
                out.println(line);
            }
            if (!drop)
                super.receive(sender, data, offset, length);
        }

        /** Reads a datagram as TP.IncomingPacket.run does (into `msgs`); returns what JGroups read, as JSON members. */
        static String read(byte[] frame, List<Message> msgs) throws Exception {
            DataInputStream in = new DataInputStream(new ByteArrayInputStream(frame));
            short version = in.readShort();
            byte flags = in.readByte();
            boolean is_list = (flags & 1) == 1;
            if (is_list)
                msgs.addAll(readMessageList(in));
            else
                msgs.add(readMessage(in));
            StringBuilder sb = new StringBuilder();
            sb.append("\"version\":").append(version).append(",\"flags\":").append(flags);
            sb.append(",\"list\":").append(is_list).append(",\"multicast\":").append((flags & 2) == 2);
            sb.append(",\"messages\":[");
            for (int i = 0; i < msgs.size(); i++) {
                if (i > 0) sb.append(',');
                sb.append(describe(msgs.get(i)));
            }
            return sb.append(']').toString();
        }
    }

    /** `parse` mode: one hex datagram per line on stdin, one JSON line per datagram on stdout (or its error). */
    static void parseStdin() throws Exception {
        java.io.BufferedReader lines = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        PrintWriter stdout = new PrintWriter(System.out, true);
        for (String line; (line = lines.readLine()) != null; ) {
            line = line.trim();
            byte[] frame = new byte[line.length() / 2];
            for (int i = 0; i < frame.length; i++)
                frame[i] = (byte) Integer.parseInt(line.substring(2 * i, 2 * i + 2), 16);
            try {
                stdout.println("{" + CapturingUDP.read(frame, new ArrayList<Message>()) + "}");
            } catch (Throwable t) {
                stdout.println("{\"error\":" + q(t.toString()) + "}");
            }
        }
    }

    static boolean decideDrop(String me, int from_port, List<Message> msgs) {
        if (cut.contains(me + "|" + from_port))
            return true;
        for (Message m : msgs) {
            byte[] buf = m.getRawBuffer();
            if (buf != null) {
                String payload = new String(buf, m.getOffset(), Math.min(m.getLength(), 40), StandardCharsets.ISO_8859_1);
                int nl = payload.indexOf('\n');
                if (nl >= 0) payload = payload.substring(0, nl);
                if (dropOnce.remove(me + "|" + payload))
                    return true;
            }
        }
        if (deafToHeartbeats.contains(me + "|" + from_port)) {
            for (Message m : msgs) {
                for (Header h : rawHeaders(m))
                    if (!(h.getClass().getName().endsWith("HeartbeatHeader") || h.getClass().getName().endsWith("TpHeader")))
                        return false;
            }
            return true;
        }
        return false;
    }

    static List<Header> rawHeaders(Message m) {
        List<Header> hs = new ArrayList<Header>();
        for (Object[] pair : rawIdsAndHeaders(m))
            hs.add((Header) pair[1]);
        return hs;
    }

    /** The message's (protocol id, header) pairs in the order Message.writeTo writes them. */
    static List<Object[]> rawIdsAndHeaders(Message m) {
        List<Object[]> result = new ArrayList<Object[]>();
        try {
            Field f = Message.class.getDeclaredField("headers");
            f.setAccessible(true);
            org.jgroups.util.Headers headers = (org.jgroups.util.Headers) f.get(m);
            short[] ids = headers.getRawIDs();
            Header[] hdrs = headers.getRawHeaders();
            for (int i = 0; i < ids.length; i++)
                if (ids[i] > 0)
                    result.add(new Object[]{ids[i], hdrs[i]});
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
        return result;
    }

    static String describe(Message m) {
        StringBuilder sb = new StringBuilder();
        sb.append("{\"dest\":").append(value(m.getDest(), 0));
        sb.append(",\"src\":").append(value(m.getSrc(), 0));
        sb.append(",\"flags\":").append(m.getFlags());
        sb.append(",\"length\":").append(m.getRawBuffer() == null ? -1 : m.getLength());
        sb.append(",\"headers\":[");
        boolean first = true;
        for (Object[] pair : rawIdsAndHeaders(m)) {
            short id = (Short) pair[0];
            Header h = (Header) pair[1];
            Class prot = ClassConfigurator.getProtocol(id);
            if (!first) sb.append(',');
            first = false;
            sb.append("{\"id\":").append(id);
            sb.append(",\"protocol\":").append(q(prot == null ? null : prot.getSimpleName()));
            sb.append(",\"magic\":").append(ClassConfigurator.getMagicNumber(h.getClass()));
            sb.append(",\"class\":").append(q(h.getClass().getName()));
            sb.append(",\"str\":").append(q(String.valueOf(h)));
            sb.append(",\"fields\":").append(fields(h, 1)).append('}');
        }
        sb.append("]}");
        return sb.toString();
    }

    /** The object's instance fields (its class and its superclasses up to Header/Object) as a JSON object. */
    static String fields(Object o, int depth) {
        StringBuilder sb = new StringBuilder("{");
        boolean first = true;
        for (Class c = o.getClass(); c != null && c != Object.class && c != Header.class; c = c.getSuperclass()) {
            for (Field f : c.getDeclaredFields()) {
                if (Modifier.isStatic(f.getModifiers()))
                    continue;
                try {
                    f.setAccessible(true);
                    Object v = f.get(o);
                    if (!first) sb.append(',');
                    first = false;
                    sb.append(q(f.getName())).append(':').append(value(v, depth));
                } catch (Exception e) {
                    // a field we cannot read is left out
                }
            }
        }
        return sb.append('}').toString();
    }

    static String value(Object v, int depth) {
        if (v == null) return "null";
        if (v instanceof Boolean || v instanceof Number) return v.toString();
        if (v instanceof Character || v instanceof String) return q(v.toString());
        if (v instanceof UUID)
            return "{\"uuid\":" + q(((UUID) v).toStringLong()) + ",\"name\":" + q(UUID.get((UUID) v)) + "}";
        if (v instanceof IpAddress) return "{\"ip\":" + q(v.toString()) + "}";
        if (v instanceof byte[]) return "{\"bytes\":" + ((byte[]) v).length + "}";
        if (depth > 6) return q(v.toString());
        if (v instanceof Map) {
            StringBuilder sb = new StringBuilder("{\"map\":[");
            boolean first = true;
            for (Object e : ((Map) v).entrySet()) {
                Map.Entry en = (Map.Entry) e;
                if (!first) sb.append(',');
                first = false;
                sb.append('[').append(value(en.getKey(), depth + 1)).append(',').append(value(en.getValue(), depth + 1)).append(']');
            }
            return sb.append("]}").toString();
        }
        if (v instanceof Collection) {
            StringBuilder sb = new StringBuilder("[");
            boolean first = true;
            for (Object e : (Collection) v) {
                if (!first) sb.append(',');
                first = false;
                sb.append(value(e, depth + 1));
            }
            return sb.append(']').toString();
        }
        if (v.getClass().getName().startsWith("org.jgroups."))
            return fields(v, depth + 1);
        return q(v.toString());
    }

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') sb.append('\\').append(ch);
            else if (ch < 0x20 || ch > 0x7e) sb.append(String.format("\\u%04x", (int) ch));
            else sb.append(ch);
        }
        return sb.append('"').toString();
    }

    static String hex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x & 0xff));
        return sb.toString();
    }

    static String stack(String mode, int port) {
        boolean bundled = mode.equals("bundled");
        String hosts = "127.0.0.1[7800],127.0.0.1[7801],127.0.0.1[7802]";
        String unicast = mode.equals("unicast")
                ? "UNICAST(timeout=300,600,1200)"
                : "UNICAST2(timeout=300,600,1200;stable_interval=1000;max_bytes=20000)";
        return "FrameSource$CapturingUDP(bind_addr=127.0.0.1;bind_port=" + port + ";port_range=0;ip_mcast=false;"
                + "enable_bundling=" + bundled + ";enable_unicast_bundling=" + bundled + ";max_bundle_timeout=30;"
                + "thread_pool.min_threads=1;thread_pool.max_threads=4;oob_thread_pool.min_threads=1;"
                + "oob_thread_pool.max_threads=4):"
                + "TCPPING(initial_hosts=" + hosts + ";port_range=0;timeout=1000;num_initial_members=3):"
                + "MERGE2(min_interval=2000;max_interval=4000):"
                + (mode.equals("unicast") ? "FD_SOCK(bind_addr=127.0.0.1):" : "")
                + "FD_ALL(interval=1000;timeout=4000):"
                + "VERIFY_SUSPECT(timeout=1500):"
                + "pbcast.NAKACK(use_mcast_xmit=false;retransmit_timeout=300,600,1200;discard_delivered_msgs=true):"
                + unicast + ":"
                + "pbcast.STABLE(desired_avg_gossip=1000;stability_delay=200;max_bytes=40000):"
                + "pbcast.GMS(join_timeout=2000;print_local_addr=false):"
                + "UFC(max_credits=5000;min_threshold=0.4):"
                + "MFC(max_credits=5000;min_threshold=0.4):"
                + "FRAG2(frag_size=1200)";
    }

    static JChannel start(String mode, final int i) throws Exception {
        JChannel ch = new JChannel(stack(mode, BASE_PORT + i));
        ch.setName(NAMES[i]);
        ch.setReceiver(new ReceiverAdapter() {
            public void receive(Message msg) {}
            public void viewAccepted(View v) { System.err.println(NAMES[i] + ": view " + v); }
        });
        ch.connect(CLUSTER);
        return ch;
    }

    static void send(JChannel from, JChannel to, String payload) throws Exception {
        from.send(new Message(to == null ? null : to.getAddress(), null, payload.getBytes(StandardCharsets.ISO_8859_1)));
    }

    static void sendBig(JChannel from, JChannel to, String label, int size) throws Exception {
        byte[] buf = new byte[size];
        byte[] head = (label + "\n").getBytes(StandardCharsets.ISO_8859_1);
        System.arraycopy(head, 0, buf, 0, head.length);
        for (int i = head.length; i < size; i++) buf[i] = (byte) ('a' + i % 26);
        from.send(new Message(to == null ? null : to.getAddress(), null, buf));
    }

    static void removeConnections(JChannel ch) {
        Protocol p = ch.getProtocolStack().findProtocol("UNICAST2");
        if (p != null) ((UNICAST2) p).removeAllConnections();
        p = ch.getProtocolStack().findProtocol("UNICAST");
        if (p != null) ((UNICAST) p).removeAllConnections();
    }

    static void waitForViewSize(JChannel ch, int n) throws InterruptedException {
        for (int i = 0; i < 100 && (ch.getView() == null || ch.getView().size() < n); i++)
            Thread.sleep(100);
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        if (mode.equals("parse")) {
            parseStdin();
            return;
        }
        out = new PrintWriter(new FileWriter(args[1]), true);
        JChannel a = start(mode, 0);
        JChannel b = start(mode, 1);
        JChannel c = start(mode, 2);
        waitForViewSize(a, 3);
        Thread.sleep(1500);
        boolean bundled = mode.equals("bundled");
        int burst = bundled ? 12 : 5;

        // plain traffic: unicasts both ways, multicasts
        for (int i = 1; i <= burst; i++) {
            send(a, b, "uni A>B " + i);
            send(b, a, "uni B>A " + i);
            send(a, null, "mc A " + i);
        }
        Thread.sleep(1000);

        // losses: B loses A's unicast #8 (UNICAST2 XMIT_REQ, or UNICAST's sender-side resend),
        // C loses A's multicast #8 (NAKACK XMIT_REQ and XMIT_RSP)
        dropOnce.add("B|uni A>B " + (burst + 3));
        dropOnce.add("C|mc A " + (burst + 3));
        dropOnce.add("A|uni B>A " + (burst + 2));
        for (int i = burst + 1; i <= 2 * burst + 2; i++) {
            send(a, b, "uni A>B " + i);
            send(b, a, "uni B>A " + i);
            send(a, null, "mc A " + i);
        }
        Thread.sleep(3000);

        // B forgets its connections: A's next unicasts are not `first` -> SEND_FIRST_SEQNO
        removeConnections(b);
        for (int i = 2 * burst + 3; i <= 2 * burst + 5; i++)
            send(a, b, "uni A>B " + i);
        Thread.sleep(2500);

        // fragmentation and credits: FRAG2, UFC/MFC REPLENISH
        for (int i = 1; i <= 3; i++) {
            sendBig(a, b, "big A>B " + i, 3000);
            sendBig(c, null, "big mc C " + i, 3000);
        }
        Thread.sleep(2000);

        // A deaf to C's heartbeats: A suspects C, VERIFY_SUSPECT asks C, C answers
        deafToHeartbeats.add("A|7802");
        Thread.sleep(6500);
        deafToHeartbeats.clear();
        Thread.sleep(1500);

        if (mode.equals("unicast")) {
            // C cut off from A and B both ways until both sides installed a view without the other; after the
            // heal MERGE2 finds two coordinators and GMS merges (MERGE_REQ, MERGE_RSP, INSTALL_MERGE_VIEW)
            cut.addAll(Arrays.asList("A|7802", "B|7802", "C|7800", "C|7801"));
            for (int i = 0; i < 150 && (a.getView().size() > 2 || c.getView().size() > 1); i++)
                Thread.sleep(100);
            send(a, b, "uni A>B split");
            send(c, null, "mc C split");
            cut.clear();
            for (int i = 0; i < 200 && (a.getView().size() < 3 || c.getView().size() < 3); i++)
                Thread.sleep(100);
            Thread.sleep(1000);
            send(a, c, "uni A>C merged");
            send(c, a, "uni C>A merged");
            Thread.sleep(1500);
        }

        // C leaves, then B, then A
        c.close();
        Thread.sleep(1500);
        b.close();
        Thread.sleep(500);
        a.close();
        out.close();
        System.err.println("done; undropped keys: " + dropOnce);
    }
}
