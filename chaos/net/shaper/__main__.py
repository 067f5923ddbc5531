"""The NFQUEUE shaper process: `python -m chaos.net.shaper --spec FILE --marker ID`, run inside a node's network
namespace (the controller starts it with `nsenter -t PID -n`).

It binds the spec's queue (`nfq`), reads what waits at each wake-up (up to `MAX_BATCH_PACKETS`), lets `Engine`
decide each packet, and gives the verdicts of a batch together: a run of one verdict is one batch verdict.
Extra packets (duplicates, split-off messages) go out through `resend.ExtraSender`: the kernel fragments those
above the MTU, and they carry the bypass mark, so they skip the queue.

A delayed packet is copied onto a timer heap and dropped from the queue; when due, it goes out whole with its
own IP header (`send_whole`), as netem orphans what it delays. Held in the kernel instead, it would stay
charged to the sender's socket buffer: a sender could keep only a buffer's worth in flight (about 200 small
datagrams, 20k packets/s at 10 ms), and a node would stop sending to everyone once a few hundred were held.
Only an IPv6 packet without an IPv6 raw socket, or one beyond `MAX_COPIED_BYTES` of copies, stays in the
kernel for a verdict when due (and while one does, verdicts go one by one: a batch would decide it too). A
jammed peer's packets are copied and dropped from the queue too; they go out when the jam is lifted.

What it holds is bounded whatever comes in: the engine lets at most each destination's `limit_pkts` wait and drops
the rest (`queue_full`, netem's `limit`), so the heap holds at most the sum of the limits plus what fell due
during one batch; copies take at most `MAX_COPIED_BYTES` (beyond, the kernel holds the packet, within the same
limits and its queue's `MAX_QUEUE_LEN`); a jam holds at most its cap.

One thread, one selector: the queue socket, a signal wake-up pipe and the heap's next due time. SIGHUP reloads
the spec (held packets stay scheduled); SIGTERM/SIGINT releases every held and jammed packet at once and exits.
It prints `ready <pid>` on stdout once bound, writes `<spec>.gen` with the generation it runs and
`<spec>.stats` (counters, JSON; packets dropped at a full link queue in `queue_full`; packets of its own not
sent, by reason, in `extra_send_failed`; the queue's own counters in `queue`; `jam_lift`, what the jams lifted
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

from chaos.host import priority
from chaos.net.shaper import nfq, resend
from chaos.net.shaper.engine import Engine
from chaos.net.shaper.spec import ShaperSpec

MAX_QUEUE_LEN = 65536
MAX_BATCH_PACKETS = 256  # read per wake-up at most, so a flood still lets due packets go between batches
MAX_COPIED_BYTES = 256 << 20  # delayed copies held in this process; beyond it the kernel holds them (see above)
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
        # (due, arrival order, what: bytes to send, or (id, payload or None) of a packet the kernel holds, bytes of
        # it that are a delayed original's copy)
        self.heap: list[tuple[float, int, bytes | tuple[int, bytes | None], int]] = []
        self.copied_bytes = 0  # of the delayed originals' copies on the heap
        self.copied = 0  # delayed originals sent as copies
        self.kernel_held = 0  # delayed packets the kernel holds for their verdict (see the module docstring)
        self.batches = 0  # batch verdicts given
        self.order = itertools.count()
        mark = self.engine.spec.mark
        self.sender = resend.ExtraSender(resend.open_socket(mark), _socket6(mark), resend.open_whole_socket(mark))
        self.queue: nfq.Queue | None = None
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

    def on_packets(self, packets: list[tuple[int, bytes]]) -> None:
        """Decide a batch of queued packets (id, bytes), in the kernel's order, and give their verdicts."""
        now_s = time.monotonic()
        decided: list[tuple[int, int, bytes | None]] = []  # (id, verdict, rewritten payload)
        for packet_id, raw in packets:
            verdict = self.engine.process(now_s, raw)
            for at_s, data in verdict.extra:
                heapq.heappush(self.heap, (at_s, next(self.order), data, 0))
            if verdict.at_s is None:
                decided.append((packet_id, nfq.NF_DROP, None))
            elif verdict.at_s <= now_s:
                decided.append((packet_id, nfq.NF_ACCEPT, verdict.payload))
            else:
                data = verdict.payload if verdict.payload is not None else raw
                if self.copied_bytes + len(data) <= MAX_COPIED_BYTES and self.sender.can_send(data):
                    self.copied += 1
                    self.copied_bytes += len(data)
                    heapq.heappush(self.heap, (verdict.at_s, next(self.order), data, len(data)))
                    decided.append((packet_id, nfq.NF_DROP, None))
                else:
                    self.kernel_held += 1
                    heapq.heappush(self.heap, (verdict.at_s, next(self.order), (packet_id, verdict.payload), 0))
        self._give(decided)

    def _give(self, decided: list[tuple[int, int, bytes | None]]) -> None:
        """The verdicts of `decided` (in id order): each run of one verdict without a payload as one batch verdict
        on its last id, the others one by one. A batch decides every queued packet up to its id, so while the
        kernel holds delayed packets for us, every verdict goes one by one."""
        queue = self.queue
        if self.kernel_held:
            for packet_id, verdict, payload in decided:
                queue.verdict(packet_id, verdict, payload)
            return
        run_verdict, run_last = None, None
        for packet_id, verdict, payload in decided:
            if payload is not None or verdict != run_verdict:
                if run_last is not None:
                    queue.verdict_batch(run_last, run_verdict)
                    self.batches += 1
                run_verdict, run_last = verdict, None
                if payload is not None:
                    queue.verdict(packet_id, verdict, payload)
                    continue
            run_last = packet_id
        if run_last is not None:
            queue.verdict_batch(run_last, run_verdict)
            self.batches += 1

    def _release(self, item: bytes | tuple[int, bytes | None], copy_bytes: int) -> None:
        if isinstance(item, tuple):
            self.kernel_held -= 1
            self.queue.verdict(item[0], nfq.NF_ACCEPT, item[1])
        elif copy_bytes:
            self.copied_bytes -= copy_bytes
            self.sender.send_whole(item)
        else:
            self.sender.send(item)

    def release_due(self, now_s: float) -> None:
        while self.heap and self.heap[0][0] <= now_s + EARLY_S:
            self._release(*heapq.heappop(self.heap)[2:])

    def stats(self, now_s: float, force: bool = False) -> None:
        if force or now_s - self._stats_at_s >= STATS_EVERY_S:
            self._stats_at_s = now_s
            data = dict(self.engine.stats, **self.sender.stats(), held=len(self.heap), copied=self.copied,
                        kernel_held=self.kernel_held, batch_verdicts=self.batches,
                        queue=dict(sorted(self.queue.counters.items())) if self.queue else {},
                        jammed=self.engine.jammed,
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
        self.queue = queue = nfq.Queue(spec.queue_num, max_len=MAX_QUEUE_LEN)
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        for signum in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda n, _frame: self.signals.add(n))
        selector = selectors.DefaultSelector()
        selector.register(queue, selectors.EVENT_READ, "queue")
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
                        self.on_packets(queue.receive(MAX_BATCH_PACKETS))
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
                self._release(*heapq.heappop(self.heap)[2:])
            self.stats(time.monotonic(), force=True)
            queue.close()
        return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.net.shaper", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path, help="the ShaperSpec JSON file")
    parser.add_argument("--marker", required=True, help="unique id on the command line, for the ledger")
    args = parser.parse_args(argv)
    return Shaper(args.spec).run()


if __name__ == "__main__":
    sys.exit(main())
