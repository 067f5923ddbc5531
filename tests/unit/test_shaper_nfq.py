"""The shaper's NFQUEUE client (chaos.net.shaper.nfq) against the real kernel, in a network namespace of its own
(skipped without root, unshare or iptables): whole packets far above 4 KB, verdicts one by one, rewritten and in
batches, a second binder refused, a refused verdict counted; and the message parser on hand-made bytes."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chaos.net.shaper import nfq

REPO = Path(__file__).resolve().parents[2]

KERNEL_CHECK = textwrap.dedent("""
    import select, socket, subprocess
    from chaos.net.shaper import ipudp, nfq
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["iptables", "-w", "-A", "OUTPUT", "-p", "udp", "--dport", "7100", "-j", "NFQUEUE",
                    "--queue-num", "5"], check=True)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 7100))
    rx.settimeout(0.5)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    queue = nfq.Queue(5)
    try:
        nfq.Queue(5)
    except nfq.QueueBusy as exc:
        print("second binder:", type(exc).__name__)

    def queued(count):
        got = []
        while len(got) < count:
            select.select([queue], [], [], 2)
            got += queue.receive()
        return got

    def arrived():
        out = []
        while True:
            try:
                out.append(rx.recv(65535))
            except TimeoutError:
                return out

    sizes = (10, 5000, 60000)
    for size in sizes:
        tx.sendto(bytes([size % 251]) * size, ("127.0.0.1", 7100))
    packets = queued(3)
    print("whole:", [len(ipudp.parse(raw).payload) for _, raw in packets] == list(sizes))
    (a, _), (b, _), (c, raw_c) = packets
    queue.verdict(a, nfq.NF_ACCEPT)
    queue.verdict(b, nfq.NF_DROP)
    queue.verdict(c, nfq.NF_ACCEPT, ipudp.with_payload(ipudp.parse(raw_c), b"rewritten"))
    print("one by one:", [len(d) if len(d) > 9 else d for d in arrived()])
    for i in range(5):
        tx.sendto(b"batch %d" % i, ("127.0.0.1", 7100))
    packets = queued(5)
    queue.verdict_batch(packets[2][0], nfq.NF_DROP)  # the first three
    queue.verdict_batch(packets[4][0], nfq.NF_ACCEPT)  # the other two
    print("batches:", arrived())
    queue.verdict(packets[4][0] + 1000, nfq.NF_ACCEPT)  # no such packet: the kernel says ENOENT
    queue.receive()
    print("refused:", dict(queue.counters))
    queue.close()
""")


@pytest.mark.skipif(os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "ip", "iptables")),
                    reason="needs root, unshare, ip and iptables: a network namespace of its own")
def test_the_real_kernel_queues_whole_packets_and_takes_every_kind_of_verdict():
    proc = subprocess.run(["unshare", "--net", sys.executable, "-c", KERNEL_CHECK], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "second binder: QueueBusy",
        "whole: True",
        "one by one: [10, b'rewritten']",
        "batches: [b'batch 3', b'batch 4']",
        "refused: {'verdict_ENOENT': 1}",
    ]


class ReplayQueue(nfq.Queue):
    """A Queue whose socket reads hand-made bytes (no kernel): `reads` in order, then nothing."""

    def __init__(self, reads: list[bytes]) -> None:  # not Queue.__init__: that binds a real queue
        self.num = 5
        self.counters = nfq.Counter()
        self._seq = 0
        self._buffer = bytearray(nfq.READ_BUFFER_BYTES)
        self._view = memoryview(self._buffer)
        self._prefix = nfq._NFGENMSG.pack(0, 0, 5)
        self.sent: list[bytes] = []
        reads = list(reads)
        outer = self

        class Sock:
            def recv_into(self, buffer):
                if not reads:
                    raise BlockingIOError
                data = reads.pop(0)
                buffer[:len(data)] = data
                return len(data)

            def sendto(self, data, _address):
                outer.sent.append(data)

        self.sock = Sock()


def packet_message(attrs: list[bytes], length: int | None = None) -> bytes:
    body = nfq._NFGENMSG.pack(0, 0, 5) + b"".join(attrs)
    kind = (nfq.NFNL_SUBSYS_QUEUE << 8) | nfq.NFQNL_MSG_PACKET
    return nfq._NLMSGHDR.pack(length or nfq._NLMSGHDR.size + len(body), kind, 0, 0, 0) + body


def test_malformed_messages_are_counted_and_a_packet_without_a_copy_goes_as_it_is():
    hdr = nfq._attr(nfq.NFQA_PACKET_HDR, (7).to_bytes(4, "big") + b"\x08\x00\x03")
    good = packet_message([hdr, nfq._attr(nfq.NFQA_PAYLOAD, b"\x45abc")])
    queue = ReplayQueue([
        packet_message([nfq._attr(nfq.NFQA_PAYLOAD, b"no id")]),  # no packet header
        packet_message([hdr]),  # no payload: accepted as it is
        good[:-3],  # cut short: its length says more than was read
        packet_message([hdr], length=3),  # a length below the header's
        good,
    ])
    assert queue.receive() == [(7, b"\x45abc")]
    assert queue.counters == {"malformed_message": 3, "no_payload": 1}
    assert len(queue.sent) == 1  # the verdict of the packet without a copy
