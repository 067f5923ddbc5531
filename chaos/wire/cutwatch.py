"""When a rule change lands on each link, read from the traffic itself, not from the controller's clock.

`watch(streams, change)` keeps probes flowing on each stream (a sender node -> a receiver node, on the data
network) while `change()` runs, then reads what arrived. For each stream, the switch lies between the send times
of the last probe on the old side of the change and the first on the new side: a flowing stream that stops was
cut, a stopped stream that resumes was healed. The spread between the earliest and the latest switch is the skew
of the change across the nodes; the lag is how long after `change()` began the last link switched.

The probes leave from a forked child process, round after round (one probe per stream every `ROUND_S`), so the
sender neither holds this process's GIL while `change()` runs nor uses a whole core: `change()` is measured as
it would run without the watch. The sender runs at real-time priority where allowed (chaos/host/priority.py).
Send times are CLOCK_MONOTONIC, one clock for every process and namespace; the resolution of a switch is one
round, reported with the result.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import socket
import struct
import time
from array import array
from dataclasses import dataclass
from typing import Callable, Sequence

from chaos.host import priority
from chaos.wire.probe import Endpoint, udp_socket
from node.errors import EnvironmentProblem

ROUND_S = 0.0002  # one probe per stream per round
LEAD_S = 0.05  # probes flowing before the change starts
TAIL_S = 0.1  # and after it returns
RCVBUF_BYTES = 8 << 20  # holds every probe of a watch: nothing is read until the sender stops
_FORMAT = struct.Struct("!II")  # stream index, seqno
_PR_SET_TIMERSLACK = 29
SENDER_PRIORITY = 1  # SCHED_FIFO, as the shaper: it sleeps between rounds, so it never holds a core


@dataclass(frozen=True)
class Switch:
    """One stream's switch: between the send times of the last probe before it and the first after it."""

    sender: str
    receiver: str
    kind: str  # "cut" or "healed"
    before_s: float
    after_s: float
    misfits: int  # probes on the wrong side of the switch (loss before a cut, arrivals after it)

    @property
    def at_s(self) -> float:
        return (self.before_s + self.after_s) / 2


@dataclass(frozen=True)
class Watch:
    """What `watch` saw: the switches, the streams that did not switch, and when `change()` ran."""

    started_s: float
    finished_s: float
    switches: list[Switch]
    unswitched: list[tuple[str, str]]
    resolution_s: float  # the mean interval between two probes of one stream

    @property
    def skew_s(self) -> float:
        """From the earliest switch to the latest (0 with fewer than two)."""
        times = [s.at_s for s in self.switches]
        return max(times) - min(times) if times else 0.0

    @property
    def lag_s(self) -> float:
        """From the start of `change()` to the latest switch."""
        return max(s.at_s for s in self.switches) - self.started_s if self.switches else 0.0


def classify(sent_s: Sequence[float], arrived: Sequence[bool]) -> tuple[str, int, int] | None:
    """Where one stream switched: (kind, index of the first probe after the switch, misfits), or None when it
    did not (all its probes on one side). The index is the one that fits most probes to a single switch, so an
    odd loss before a cut or a late straggler after it does not move it."""
    n = len(arrived)
    if n < 2 or len(sent_s) != n:
        return None
    total = sum(arrived)
    best: tuple[str, int, int] | None = None
    before = 0  # arrivals among the first k probes
    for k in range(1, n):
        before += arrived[k - 1]
        after = total - before
        # cut: the first k arrived, the rest did not; healed: the reverse
        cut_misfits = (k - before) + after
        heal_misfits = before + ((n - k) - after)
        for kind, misfits in (("cut", cut_misfits), ("healed", heal_misfits)):
            if best is None or misfits < best[2]:
                best = (kind, k, misfits)
    assert best is not None
    kind, k, misfits = best
    flat = min(total, n - total)  # misfits of "no switch at all"
    return best if misfits < flat else None


def _send_rounds(senders: list[socket.socket], targets: list[tuple[str, int]], stop: mmap.mmap, out_fd: int) -> None:
    """The child: a round of probes every ROUND_S until `stop[0]` is set, then each stream's send times on
    `out_fd` (count, then the doubles)."""
    ctypes.CDLL(None).prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)  # sleep to the microsecond, not to 50 us
    # an instrument: a send time read and then held back by a busy machine would misplace the switch
    priority.realtime(SENDER_PRIORITY) or priority.raise_niceness(os.getpid(), -10)
    sent = [array("d") for _ in senders]
    due_s = time.monotonic()
    while not stop[0]:
        for i, (sock, target) in enumerate(zip(senders, targets)):
            now_s = time.monotonic()
            try:
                sock.sendto(_FORMAT.pack(i, len(sent[i])), target)
            except BlockingIOError:
                continue  # not sent, not numbered
            sent[i].append(now_s)
        due_s += ROUND_S
        pause_s = due_s - time.monotonic()
        if pause_s > 0:
            time.sleep(pause_s)
        else:
            due_s = time.monotonic()  # late: the next round now, no burst to catch up
    for times in sent:
        os.write(out_fd, struct.pack("!I", len(times)))
        data = times.tobytes()
        while data:
            data = data[os.write(out_fd, data):]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _drain(sock: socket.socket, index: int, count: int) -> list[bool]:
    arrived = [False] * count
    while True:
        try:
            data = sock.recv(64)
        except BlockingIOError:
            return arrived
        if len(data) == _FORMAT.size:
            stream, seq = _FORMAT.unpack(data)
            if stream == index and seq < count:
                arrived[seq] = True


def watch(streams: Sequence[tuple[Endpoint, Endpoint]], change: Callable[[], object]) -> Watch:
    """Probe every (sender, receiver) stream while `change()` runs; where and when each one switched. Raises
    `EnvironmentProblem` when the sockets cannot be opened or the sender dies, and whatever `change()` raises."""
    senders: list[socket.socket] = []
    receivers: list[socket.socket] = []
    try:
        for src, dst in streams:
            senders.append(udp_socket(src))
            receivers.append(udp_socket(dst, rcvbuf_bytes=RCVBUF_BYTES))
        targets = [(dst.ip, rx.getsockname()[1]) for (_, dst), rx in zip(streams, receivers)]
        stop = mmap.mmap(-1, 1)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: send, report, leave without running any of the parent's cleanup
            code = 1
            try:
                os.close(read_fd)
                _send_rounds(senders, targets, stop, write_fd)
                code = 0
            finally:
                os._exit(code)
        os.close(write_fd)
        try:
            time.sleep(LEAD_S)
            started_s = time.monotonic()
            change()
            finished_s = time.monotonic()
            time.sleep(TAIL_S)
        finally:
            stop[0] = 1
            report = _read_all(read_fd)
            os.close(read_fd)
            _, status = os.waitpid(pid, 0)
            stop.close()
        if os.waitstatus_to_exitcode(status) != 0:
            raise EnvironmentProblem(f"the watch's sender process failed (exit status {status})")
        sent_by_stream: list[array] = []
        offset = 0
        for _ in streams:
            (count,) = struct.unpack_from("!I", report, offset)
            offset += 4
            sent_by_stream.append(array("d", report[offset:offset + 8 * count]))
            offset += 8 * count
        switches, unswitched, intervals = [], [], []
        for i, ((src, dst), sent) in enumerate(zip(streams, sent_by_stream)):
            arrived = _drain(receivers[i], i, len(sent))
            if len(sent) > 1:
                intervals.append((sent[-1] - sent[0]) / (len(sent) - 1))
            found = classify(sent, arrived)
            if found is None:
                unswitched.append((src.node, dst.node))
                continue
            kind, k, misfits = found
            switches.append(Switch(src.node, dst.node, kind, sent[k - 1], sent[k], misfits))
        return Watch(started_s, finished_s, switches, unswitched,
                     sum(intervals) / len(intervals) if intervals else 0.0)
    finally:
        for sock in senders + receivers:
            sock.close()
