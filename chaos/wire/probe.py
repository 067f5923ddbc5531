"""UDP probes between node namespaces on the data network: what a link really does, measured from outside the
node processes.

Sockets are opened inside the namespaces from this process (`chaos.host.netns.socket_in`), bound to the nodes'
data addresses on a port the kernel picks (never the node's port, so nodes never see probes; link faults and
partitions match addresses, so probes get them like node traffic). No probe needs a given port: two probes of
one namespace at once, or a socket some other process still holds there, never make a probe fail to bind (a fixed
port did once, with EADDRINUSE at a scenario's heal, 2026-11-30). An endpoint's address decides its family: IPv6
endpoints (`splitlab up --ipv6`) probe over AF_INET6 sockets. A probe carries a magic, a stream id, a sequence number
and its send time on CLOCK_REALTIME, which every namespace shares; its arrival time is the kernel's receive
timestamp (SO_TIMESTAMPNS), not the time this process got around to reading it, so a busy controller does not add
its own scheduling delay to the one-way delays it measures.

- `measure(src, dst, count, interval_ms)`: one stream; loss, duplicates, reordering, one-way delay statistics;
- `reachability(pairs)`: which directed pairs pass right now (a few probes each);
- `wait_for(expected)`: repeat `reachability` until it matches, returning when it did (the effective time).
"""
from __future__ import annotations

import os
import select
import socket
import statistics
import struct
import time
from dataclasses import dataclass, field

from chaos.host.netns import address_family, force_receive_buffer, socket_in
from node.errors import EnvironmentProblem

SEND_TIMEOUT_S = 5.0  # longest wait for room in the send buffer before a probe run gives up
_FORMAT = struct.Struct("!4sIId")  # magic, stream id, seqno, send time (unix s)
_MAGIC = b"SLPR"
_SO_TIMESTAMPNS = 35  # Linux (asm-generic and x86); Python's socket module does not export it
RCVBUF_BYTES = 4 << 20
_TIMESPEC = struct.Struct("@qq")
_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size)


@dataclass(frozen=True)
class Endpoint:
    """A node's data address (IPv4 or IPv6) inside its namespace (entered through `pid`; None: this process's
    own)."""

    node: str
    pid: int | None
    ip: str


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank `pct` percentile of `values` (nan when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(pct / 100 * (len(ordered) - 1))))]


@dataclass
class LinkStats:
    """One probe stream's result; delays in ms, one-way, for the first copy of each probe; `span_s`, from the first
    probe's send to the last first copy's arrival (0 when none arrived)."""

    sent: int
    received: int
    duplicates: int
    reordered: int
    delays_ms: list[float] = field(repr=False, default_factory=list)
    span_s: float = 0.0

    @property
    def delivered_pps(self) -> float:
        """First copies received per second of `span_s`: the rate the link delivered (0 when none arrived)."""
        return self.received / self.span_s if self.span_s > 0 else 0.0

    @property
    def loss_pct(self) -> float:
        return 100.0 * (self.sent - self.received) / self.sent if self.sent else 0.0

    @property
    def mean_delay_ms(self) -> float:
        return statistics.fmean(self.delays_ms) if self.delays_ms else float("nan")

    def percentile_ms(self, pct: float) -> float:
        return percentile(self.delays_ms, pct)

    def as_dict(self) -> dict[str, float]:
        return {"sent": self.sent, "received": self.received, "duplicates": self.duplicates,
                "reordered": self.reordered, "loss_pct": round(self.loss_pct, 3),
                "mean_delay_ms": round(self.mean_delay_ms, 3), "p50_ms": round(self.percentile_ms(50), 3),
                "p99_ms": round(self.percentile_ms(99), 3)}


def udp_socket(ep: Endpoint, rcvbuf_bytes: int = RCVBUF_BYTES) -> socket.socket:
    """A non-blocking UDP socket in `ep`'s namespace, bound to its data address on a port the kernel picks, with
    kernel receive timestamps and a receive buffer of `rcvbuf_bytes` (past net.core.rmem_max when root: SO_RCVBUFFORCE).
    Raises `EnvironmentProblem` when it cannot be bound."""
    sock = socket_in(ep.pid, address_family(ep.ip), socket.SOCK_DGRAM)
    try:
        sock.bind((ep.ip, 0))
    except OSError as exc:
        sock.close()
        raise EnvironmentProblem(f"cannot bind a probe socket to {ep.ip} in {ep.node}'s namespace: {exc}",
                                 hint="is the node still running, with that address?") from None
    force_receive_buffer(sock, rcvbuf_bytes)
    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    sock.setblocking(False)
    return sock


def _arrival_s(ancillary: list[tuple[int, int, bytes]]) -> float:
    """The kernel's receive time of a datagram (unix s) from its ancillary data; now if it carries none. (The
    kernel turns timestamps on a moment after the first socket of the machine asks: a datagram that arrives
    in between is stamped when it is read, as before.)"""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return sec + nsec / 1e9
    return time.time()


def _drain(sock: socket.socket, stream: int, seen: dict[int, int], arrivals: list[tuple[int, float, float]]) -> None:
    """Read every waiting probe of `stream`: count its copies in `seen`, and append (seqno, one-way delay in ms,
    arrival in unix s) of each first copy to `arrivals`."""
    while True:
        try:
            data, ancillary, _, _ = sock.recvmsg(2048, _ANCILLARY_BYTES)
        except BlockingIOError:
            return
        now_s = _arrival_s(ancillary)
        if len(data) < _FORMAT.size:
            continue
        magic, sid, seq, sent_s = _FORMAT.unpack_from(data)
        if magic != _MAGIC or sid != stream:
            continue
        seen[seq] = seen.get(seq, 0) + 1
        if seen[seq] == 1:
            arrivals.append((seq, (now_s - sent_s) * 1000, now_s))


def _send(tx: socket.socket, rx: socket.socket, dst: Endpoint, datagram, drain) -> None:
    """Send one probe, waiting while the send buffer is full (datagrams a shaper holds stay charged to it): a probe
    counted as sent is sent, so the loss measured is the link's. Its send time is taken when it leaves."""
    deadline_s = time.monotonic() + SEND_TIMEOUT_S
    while True:
        try:
            tx.sendto(datagram(), (dst.ip, rx.getsockname()[1]))
            return
        except BlockingIOError:
            if time.monotonic() > deadline_s:
                raise EnvironmentProblem(f"a probe to {dst.node} ({dst.ip}) could not be sent for "
                                         f"{SEND_TIMEOUT_S:g} s: the send buffer stayed full",
                                         hint="a shaper or a paused node may be holding the datagrams") from None
            readable, _, _ = select.select([rx], [tx], [], 0.05)
            if readable:
                drain()


def measure(src: Endpoint, dst: Endpoint, count: int = 1000, interval_ms: float = 0.2, settle_ms: float = 300,
            size: int = 64) -> LinkStats:
    """Send `count` probes src -> dst spaced by `interval_ms` and collect them for `settle_ms` after the last."""
    stream = int.from_bytes(os.urandom(4), "big")  # tells this stream from stale probes; not a fault choice
    rx = udp_socket(dst)
    tx = udp_socket(src)
    seen: dict[int, int] = {}
    arrivals: list[tuple[int, float, float]] = []
    pad = b"\0" * max(0, size - _FORMAT.size)
    try:
        first_send_s = time.time()
        start_s = time.monotonic()
        for seq in range(count):
            due_s = start_s + seq * interval_ms / 1000
            while (now_s := time.monotonic()) < due_s:
                if select.select([rx], [], [], due_s - now_s)[0]:
                    _drain(rx, stream, seen, arrivals)
            _send(tx, rx, dst, lambda: _FORMAT.pack(_MAGIC, stream, seq, time.time()) + pad,
                  lambda: _drain(rx, stream, seen, arrivals))
            _drain(rx, stream, seen, arrivals)
        deadline = time.monotonic() + settle_ms / 1000
        while (left := deadline - time.monotonic()) > 0:
            if select.select([rx], [], [], left)[0]:
                _drain(rx, stream, seen, arrivals)
    finally:
        rx.close()
        tx.close()
    reordered = 0
    highest = -1
    for seq, _, _ in arrivals:
        if seq < highest:
            reordered += 1
        highest = max(highest, seq)
    span_s = max(at_s for _, _, at_s in arrivals) - first_send_s if arrivals else 0.0
    return LinkStats(count, len(seen), sum(n - 1 for n in seen.values()), reordered, [d for _, d, _ in arrivals],
                     span_s)


def reachability(endpoints: dict[str, Endpoint], pairs: list[tuple[str, str]], probes: int = 3,
                 timeout_ms: float = 100) -> dict[tuple[str, str], bool]:
    """For each directed (src, dst) pair: did any of `probes` probes arrive within `timeout_ms`?"""
    stream = int.from_bytes(os.urandom(4), "big")
    nodes = sorted({n for pair in pairs for n in pair})
    socks = {}
    try:
        for node in nodes:
            socks[node] = udp_socket(endpoints[node])
        to = {node: (endpoints[node].ip, sock.getsockname()[1]) for node, sock in socks.items()}
        index = {pair: i for i, pair in enumerate(pairs)}
        got: set[int] = set()
        for _ in range(probes):
            for (src, dst), i in index.items():
                try:
                    socks[src].sendto(_FORMAT.pack(_MAGIC, stream, i, time.time()), to[dst])
                except BlockingIOError:
                    pass  # a full send buffer is a lost probe; the others decide
        deadline = time.monotonic() + timeout_ms / 1000
        while (left := deadline - time.monotonic()) > 0 and len(got) < len(pairs):
            for sock in select.select(list(socks.values()), [], [], left)[0]:
                seen: dict[int, int] = {}
                _drain(sock, stream, seen, [])
                got.update(seen)
        return {pair: i in got for pair, i in index.items()}
    finally:
        for sock in socks.values():
            sock.close()


def wait_for(endpoints: dict[str, Endpoint], expected: dict[tuple[str, str], bool], timeout_s: float = 5.0,
             timeout_ms: float = 100) -> float | None:
    """Probe until every pair passes or not as `expected`; the wall-clock time it first did, or None."""
    deadline = time.monotonic() + timeout_s
    pairs = list(expected)
    while True:
        seen = reachability(endpoints, pairs, timeout_ms=timeout_ms)
        if seen == expected:
            return time.time()
        if time.monotonic() >= deadline:
            return None
