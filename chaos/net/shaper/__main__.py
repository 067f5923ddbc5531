"""The NFQUEUE shaper process: `python -m chaos.net.shaper --spec FILE --marker ID`, run inside a node's network
namespace (the controller starts it with `nsenter -t PID -n`).

It binds the spec's queue (NetfilterQueue, over libnetfilter_queue), lets `Engine` decide per packet, keeps
delayed packets on a timer heap and gives their verdicts when due (the kernel holds the packets meanwhile), and
sends extra packets (duplicates, split-off messages) with `resend.ExtraSender`: the kernel fragments those above
the MTU, and they carry the bypass mark, so they skip the queue. A jammed peer's packets are copied and dropped
from the queue (a packet the kernel holds stays charged to the sender's socket buffer, and the node would stop
sending to everyone once a few hundred were held); they go out the same way when the jam is lifted. One thread,
one selector: the queue socket, a signal wake-up pipe and the heap's next due time. SIGHUP reloads the spec
(held packets stay scheduled); SIGTERM/SIGINT releases every held and jammed packet at once and exits. It
prints `ready <pid>` on stdout once bound, writes `<spec>.gen` with the generation it runs and `<spec>.stats`
(counters, JSON; extra packets not sent, by reason, in `extra_send_failed`; `jam_lift`, what the jams lifted
last did) at most once a second and when it ends.

It stands in for a kernel qdisc, which releases packets from softirq context ahead of every process, so it asks
for the lowest real-time priority (SCHED_FIFO 1): a busy machine then does not stretch its delays. Where that is
refused it asks for nice -10 (in its own session, so also its autogroup's), and where that is refused too it runs
as started; `scheduling` in its stats says which.
"""
from __future__ import annotations

import argparse
import errno
import heapq
import itertools
import json
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path

from netfilterqueue import NetfilterQueue, Packet

from chaos.host import priority
from chaos.net.shaper import resend
from chaos.net.shaper.engine import Engine
from chaos.net.shaper.spec import ShaperSpec

MAX_QUEUE_LEN = 65536
STATS_EVERY_S = 1.0
# epoll sleeps in whole milliseconds, rounded up, so a packet is released 0..1 ms after it is due; releasing
# what is due within the next half millisecond centres that error on zero.
EARLY_S = 0.0005
REALTIME_PRIORITY = 1  # SCHED_FIFO's lowest: ahead of every normal process, behind the kernel's own threads
FALLBACK_NICENESS = -10


def _socket6(mark: int) -> socket.socket | None:
    """The raw IPv6 UDP socket for extra packets of an IPv6 run; None where the kernel has no IPv6 (its extra
    packets are then counted as `no_ipv6_socket`, and an IPv4 run needs none)."""
    try:
        return resend.open_socket(mark, socket.AF_INET6)
    except OSError as exc:
        if exc.errno in (errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT):
            return None
        raise


class Shaper:
    def __init__(self, spec_path: Path) -> None:
        self.spec_path = spec_path
        self.engine = Engine(self._load())
        self.heap: list[tuple[float, int, Packet | bytes]] = []
        self.order = itertools.count()
        self.sender = resend.ExtraSender(resend.open_socket(self.engine.spec.mark), _socket6(self.engine.spec.mark))
        self.nfq = NetfilterQueue()
        self.signals: set[int] = set()
        self._stats_at_s = 0.0
        self.scheduling = "as started"

    def _load(self) -> ShaperSpec:
        return ShaperSpec.from_json(self.spec_path.read_text())

    def _write(self, suffix: str, text: str) -> None:
        path = self.spec_path.with_name(self.spec_path.name + suffix)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    def on_packet(self, pkt: Packet) -> None:
        now_s = time.monotonic()
        verdict = self.engine.process(now_s, pkt.get_payload())
        for at_s, data in verdict.extra:
            heapq.heappush(self.heap, (at_s, next(self.order), data))
        if verdict.at_s is None:
            pkt.drop()
            return
        if verdict.payload is not None:
            pkt.set_payload(verdict.payload)
        if verdict.at_s <= now_s:
            pkt.accept()
        else:
            heapq.heappush(self.heap, (verdict.at_s, next(self.order), pkt))

    def _release(self, item: Packet | bytes) -> None:
        if isinstance(item, Packet):
            item.accept()
        else:
            self.sender.send(item)

    def release_due(self, now_s: float) -> None:
        while self.heap and self.heap[0][0] <= now_s + EARLY_S:
            self._release(heapq.heappop(self.heap)[2])

    def stats(self, now_s: float, force: bool = False) -> None:
        if force or now_s - self._stats_at_s >= STATS_EVERY_S:
            self._stats_at_s = now_s
            data = dict(self.engine.stats, **self.sender.stats(), held=len(self.heap), jammed=self.engine.jammed,
                        jam_lift=self.engine.last_lift,
                        generation=self.engine.spec.generation, rule_matches=self.engine.book.counters(),
                        scheduling=self.scheduling)
            self._write(".stats", json.dumps(data, sort_keys=True))

    def reload(self) -> None:
        self.engine = Engine(self._load(), previous=self.engine)
        for packet in self.engine.lifted:
            self.sender.send(packet)
        self.engine.lifted = []
        self.stats(time.monotonic(), force=True)
        self._write(".gen", str(self.engine.spec.generation))

    def run(self) -> int:
        spec = self.engine.spec
        self.scheduling = priority.realtime(REALTIME_PRIORITY) or priority.raise_niceness(os.getpid(),
                                                                                            FALLBACK_NICENESS)
        self.nfq.bind(spec.queue_num, self.on_packet, max_len=MAX_QUEUE_LEN)
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda n, _frame: self.signals.add(n))
        queue_sock = socket.fromfd(self.nfq.get_fd(), socket.AF_UNIX, socket.SOCK_STREAM)
        selector = selectors.DefaultSelector()
        selector.register(queue_sock, selectors.EVENT_READ, "queue")
        selector.register(wake_r, selectors.EVENT_READ, "signal")
        self._write(".gen", str(spec.generation))
        print(f"ready {os.getpid()}", flush=True)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the controller may be gone: never write to its pipe again
        try:
            while True:
                now_s = time.monotonic()
                self.release_due(now_s)
                self.stats(now_s)
                timeout_s = min(STATS_EVERY_S, max(0.0, self.heap[0][0] - now_s)) if self.heap else STATS_EVERY_S
                for key, _ in selector.select(timeout_s):
                    if key.data == "queue":
                        self.nfq.run(block=False)
                    else:
                        wake_r.recv(4096)
                if signal.SIGTERM in self.signals or signal.SIGINT in self.signals:
                    break
                if signal.SIGHUP in self.signals:
                    self.signals.discard(signal.SIGHUP)
                    self.reload()
        finally:
            for packet in self.engine.release_all():  # ending must not lose what was held: release it all now
                self.sender.send(packet)
            while self.heap:
                self._release(heapq.heappop(self.heap)[2])
            self.stats(time.monotonic(), force=True)
            self.nfq.unbind()
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.net.shaper", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path, help="the ShaperSpec JSON file")
    parser.add_argument("--marker", required=True, help="unique id on the command line, for the ledger")
    args = parser.parse_args(argv)
    return Shaper(args.spec).run()


if __name__ == "__main__":
    sys.exit(main())
