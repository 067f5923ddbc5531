"""The asyncio UDP runtime: one `node.driver.Driver` (the node's protocol stack, driven) plus its IO.

The driver does everything that is not IO: the tag of the authenticated wire, decoding, the incarnation gate,
counted drops, routing to the layers, carrying out effects, bundling (and signing). This module adds what
touches the world: the data socket (bound to the node's data address only), the loop's clock and timers, name
resolution of members, the history file, the control API's view of the node (`state()`), and the application
workloads (`node.workload`).

Bundling: messages the layers send to the same peer during one loop turn are taken from the driver's outbox by
one flush (scheduled with `call_soon` when the outbox gets its first message) and leave together, packed into
as few datagrams as `bundle_max_bytes` allows (0 disables bundling: one message per datagram).
Receiving: asyncio's datagram transport reads one datagram per loop turn, so a burst cost one epoll round and one
outbox flush per datagram. When it hands us one, we read the others waiting on the same socket (ours, given to
the transport), up to `RECV_BATCH`, before the loop turns; the layers' answers to the whole batch (acks above all)
leave in one flush. The transport stays, for sending: it buffers a datagram the kernel cannot take yet (a shaper
holding packets fills the send buffer).
A malformed or foreign datagram is counted by reason and dropped; it never raises out of the receive loop.
"""
from __future__ import annotations

import asyncio
import errno
import socket
import time
from typing import Any, Callable, Hashable

from node import workload
from node.config import NodeConfig
from node.core import Effect
from node.driver import Driver
from node.history import HistoryWriter
from node.multicast import MAX_PAYLOAD_BYTES as MULTICAST_MAX_PAYLOAD_BYTES
from node.stack import Stack
from node.unicast import MAX_PAYLOAD_BYTES as UNICAST_MAX_PAYLOAD_BYTES
from node.workload import MessageIds, Workload, WorkloadSpec
from node.wire import cluster_id_of

RESOLVE_RETRY_S = 0.5
BIND_RETRY_S = 5.0  # a fresh IPv6 address may be tentative (duplicate address detection) for a moment
RECV_BATCH = 128  # datagrams read per wake-up at most; then timers and other callbacks get their turn
MAX_DATAGRAM_BYTES = 65535


def loop_clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """The clock of `loop` as the cheapest callable: `time.monotonic` itself when the loop's `time()` is asyncio's
    own (which returns it), else the loop's method. The node reads it for every datagram and every message a
    workload sends; `loop.time` is an interpreted frame each time."""
    return time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time


async def resolve_host(host: str, family: socket.AddressFamily = socket.AF_INET) -> str:
    """The address of `host` in `family`, retrying until it resolves (container DNS names appear as peers
    start)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            infos = await loop.getaddrinfo(host, None, family=family, type=socket.SOCK_DGRAM)
            return infos[0][4][0]
        except socket.gaierror:
            await asyncio.sleep(RESOLVE_RETRY_S)


async def _bind(sock: socket.socket, address: tuple[str, int]) -> None:
    """Bind `sock`, retrying for `BIND_RETRY_S` while the address is not (yet) usable (EADDRNOTAVAIL: an IPv6
    address still tentative); then the error goes up."""
    deadline_s = time.monotonic() + BIND_RETRY_S
    while True:
        try:
            sock.bind(address)
            return
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL or time.monotonic() > deadline_s:
                raise
            await asyncio.sleep(0.1)


class _Endpoint(asyncio.DatagramProtocol):
    def __init__(self, runtime: "NodeRuntime") -> None:
        self.runtime = runtime

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.runtime.read_batch(data, addr)

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable etc.: UDP is unreliable by design
        self.runtime.counters["send_errors"] += 1


class NodeRuntime:
    """Runs `stack` for the node described by `config`, writing events to `history`."""

    def __init__(self, config: NodeConfig, stack: Stack, history: HistoryWriter) -> None:
        self.config = config
        self.stack = stack
        self.history = history
        self.driver = Driver(config.name, stack, cluster_id_of(config.run_id), int(time.time() * 1000),
                             config.bundle_max_bytes, frozenset(config.members),
                             set_timer=self._set_timer, cancel_timer=self._cancel_timer, record=history.record,
                             outbox_ready=self._schedule_flush, auth_key=config.auth_key,
                             on_emit={"window_unblocked": self._window_unblocked})
        self.cluster_id = self.driver.cluster_id
        self.boot = self.driver.incarnation
        self.msg_ids = MessageIds(config.name, self.boot)
        self.counters = self.driver.counters  # the driver's, plus the IO's own (send_errors, unresolved_drops, ...)
        self.dropped = self.driver.dropped
        self._receive = self.driver.receive
        self._transport: asyncio.DatagramTransport | None = None
        self._sock: socket.socket | None = None  # the data socket: the transport's, drained by `read_batch`
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._addresses: dict[str, tuple[str, int]] = {}
        self._wall_offset_s = 0.0  # unix time minus loop time, set in bind() (the wall clock without a syscall)
        self._tasks: list[asyncio.Task] = []
        self.data_ip: str | None = None
        self.workloads: list[Workload] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # the running loop, from bind() on
        self._clock: Callable[[], float] = time.monotonic  # the loop's clock (bind(): `loop_clock`)
        # set whenever a layer emits `window_unblocked`: workloads refused with WindowFull wait on it
        self.window_open = asyncio.Event()
        self._protocols_started = False
        self.recv_buffer_bytes = 0  # the data socket's effective SO_RCVBUF, known after bind()

    @property
    def view(self) -> tuple[tuple[str, int], tuple[str, ...]] | None:
        """The last installed view: (view_id, members)."""
        return self.driver.view

    # --- clock ------------------------------------------------------------------------------------------------
    def now(self) -> float:
        return self._clock()

    # --- lifecycle --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Resolve the own data address, bind the socket and start the background tasks; then (unless the
        caller does it itself with `start_protocols`, e.g. after recording `node_start`) the protocols."""
        await self.bind()
        self.start_protocols()

    def start_protocols(self) -> None:
        """Let the layers start: first heartbeats and timers, the initial view (recorded as `view`). Datagrams
        that arrived before are counted (`received_before_start`) and dropped, so nothing is recorded before."""
        self._protocols_started = True
        self.driver.start(self.now())

    async def bind(self) -> None:
        """Resolve the own data address, bind the socket, start the background tasks (no protocol yet)."""
        loop = self._loop = asyncio.get_running_loop()
        self._clock = loop_clock(loop)
        self._wall_offset_s = time.time() - loop.time()
        host, port = self.config.data_address(self.config.name)
        family = self.config.data_family
        self.data_ip = await resolve_host(host, family)
        sock = self._sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.setblocking(False)
        # A burst of bundled datagrams overflows the default 208 KiB receive buffer; every drop costs a
        # retransmission. Unprivileged SO_RCVBUF is capped at net.core.rmem_max: the effective size is recorded.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.config.recv_buffer_bytes)
        self.recv_buffer_bytes = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        try:
            await _bind(sock, (self.data_ip, port))
        except OSError:
            sock.close()
            raise
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _Endpoint(self), sock=sock)
        self._tasks.append(asyncio.create_task(self._resolve_members(), name="resolve-members"))
        self._tasks.append(asyncio.create_task(self._flush_history(), name="flush-history"))

    async def stop(self) -> None:
        for task in self._tasks + [w.task for w in self.workloads if w.task is not None]:
            task.cancel()
        await asyncio.gather(*self._tasks, *(w.task for w in self.workloads if w.task is not None),
                             return_exceptions=True)
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._transport is not None:
            self._transport.close()

    async def _resolve_members(self) -> None:
        """Resolve member data addresses until all are known (peers may start after this node)."""
        loop = asyncio.get_running_loop()
        pending = [m for m in self.config.members if m != self.config.name]
        while pending:
            for member in list(pending):
                host, port = self.config.data_address(member)
                try:
                    infos = await loop.getaddrinfo(host, None, family=self.config.data_family,
                                                   type=socket.SOCK_DGRAM)
                except socket.gaierror:
                    continue
                self._addresses[member] = (infos[0][4][0], port)
                pending.remove(member)
            if pending:
                await asyncio.sleep(RESOLVE_RETRY_S)

    async def _flush_history(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_ms / 1000)
            self.history.flush()

    # --- receive ----------------------------------------------------------------------------------------------
    def read_batch(self, data: bytes, addr: tuple[str, int]) -> None:
        """Take the datagram the transport read, then the others waiting, up to `RECV_BATCH` in all (a batch is
        counted in `recv_batches`)."""
        self.counters["recv_batches"] += 1
        self.datagram_received(data, addr)
        recvfrom = self._sock.recvfrom
        for _ in range(RECV_BATCH - 1):
            try:
                data, addr = recvfrom(MAX_DATAGRAM_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # an ICMP error queued on the socket (a peer's port closed): UDP is unreliable
                self.counters["recv_errors"] += 1
                continue
            self.datagram_received(data, addr)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if not self._protocols_started:
            self.counters["datagrams_received"] += 1
            self.counters["received_before_start"] += 1
            return
        now_s = self._clock()
        self._receive(now_s, int((now_s + self._wall_offset_s) * 1000), data, addr[0])

    # --- the driver's callbacks ---------------------------------------------------------------------------------
    def _set_timer(self, key: Hashable, at_s: float) -> None:
        timers = self._timers
        old = timers.get(key)
        if old is not None:
            old.cancel()
        timers[key] = self._loop.call_at(at_s, self._fire, key)

    def _cancel_timer(self, key: Hashable) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.driver.timer(self._clock(), key)

    def _window_unblocked(self, fields: dict[str, Any]) -> None:
        self.window_open.set()

    def _schedule_flush(self) -> None:
        self._loop.call_soon(self._flush_outbox)

    def _flush_outbox(self) -> None:
        driver = self.driver
        encoded: dict[int, bytes] = {}  # a message sent to several peers (a multicast) is encoded once
        for dst, msgs in driver.take_outbox().items():
            addr = self._addresses.get(dst)
            if addr is None:
                self.counters["unresolved_drops"] += len(msgs)
                continue
            for datagram in driver.datagrams(msgs, encoded):
                self._transport.sendto(datagram, addr)

    def apply(self, effects: list[Effect]) -> None:
        """Carry out effects returned by the stack (the driver's `apply`)."""
        self.driver.apply(effects)

    # --- application (the control API's `node.control.ControlTarget`) -----------------------------------------
    @property
    def name(self) -> str:
        return self.config.name

    @property
    def run_id(self) -> str:
        return self.config.run_id

    @property
    def members(self) -> tuple[str, ...]:
        return self.config.members

    def max_payload_bytes(self, kind: str) -> int | None:
        """The largest payload of a `kind` workload; None when the stack has no layer for it."""
        if kind == "multicast":
            return MULTICAST_MAX_PAYLOAD_BYTES if "multicast" in self.stack.layers else None
        return UNICAST_MAX_PAYLOAD_BYTES

    def request(self, layer: str, op: str, args: dict[str, Any]) -> None:
        """Run an application request on a layer (raises UsageError for bad requests, WindowFull when full)."""
        self.driver.request(self._clock(), layer, op, args)

    def sender(self, layer: str, to: str) -> Callable[[bytes], None]:
        """A workload's send: one message through `layer` to `to` now (its arguments checked when the workload
        started; raises WindowFull when the window is full). The driver's own closure on the loop's clock: no
        interpreted frame per message."""
        return self.driver.sender(self._clock, layer, to)

    def start_workload(self, spec: WorkloadSpec) -> Workload:
        """Start an application workload as its own task (it never blocks the node)."""
        item = workload.start(self, spec)
        self.workloads.append(item)
        return item

    def stop_fields(self, reason: str) -> dict[str, Any]:
        """The fields of this node's `node_stop` event."""
        return {"reason": reason, "counters": dict(self.counters), "dropped": dict(self.dropped)}

    def quiesce(self) -> None:
        """Write `node_stop` (reason "quiesce") and end the history: the node goes on, unrecorded, until it stops."""
        self.history.end("node_stop", self.stop_fields("quiesce"))

    def state(self) -> dict[str, Any]:
        """The node's `/state`: who it is, its driver's state (view, layers, counters, dropped), its workloads."""
        now_s = self.now()
        return {"node": self.config.name, "run": self.config.run_id, "boot": self.boot, "data_ip": self.data_ip,
                "members": list(self.config.members), **self.driver.state(now_s),
                "workloads": [w.state(now_s) for w in self.workloads]}
