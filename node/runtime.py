"""The asyncio UDP runtime: drives a `Stack` of sans-IO protocols with a real socket, clock and timers.

It owns every side effect of the node: the data socket (bound to the node's data address only), timers on the
event loop, bundling of outgoing messages, name resolution of members, and recording of history events.

Bundling: messages a protocol sends to the same peer during one loop turn are queued and leave together,
packed into as few datagrams as `bundle_max_bytes` allows (0 disables bundling: one message per datagram).
A malformed or foreign datagram is counted by reason and dropped; it never raises out of the receive loop.
"""
from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from typing import Any, Hashable

from node.config import NodeConfig
from node.core import CancelTimer, Deliver, Effect, Emit, InstallView, Send, SetTimer, payload_msg_id
from node.errors import WireError
from node import workload
from node.history import HistoryWriter
from node.incarnation import DROP_REASONS, RESTARTED, SAME, Lives
from node.stack import Stack
from node.workload import Workload, WorkloadSpec
from node.wire import bundle, cluster_id_of, decode_datagram_from, encode_message

RESOLVE_RETRY_S = 0.5
MAX_DROP_EVENTS_PER_REASON = 100


async def resolve_host(host: str) -> str:
    """The IPv4 address of `host`, retrying until it resolves (container DNS names appear as peers start)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            infos = await loop.getaddrinfo(host, None, family=socket.AF_INET, type=socket.SOCK_DGRAM)
            return infos[0][4][0]
        except socket.gaierror:
            await asyncio.sleep(RESOLVE_RETRY_S)


class _Endpoint(asyncio.DatagramProtocol):
    def __init__(self, runtime: "NodeRuntime") -> None:
        self.runtime = runtime

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.runtime.datagram_received(data, addr)

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable etc.: UDP is unreliable by design
        self.runtime.counters["send_errors"] += 1


class NodeRuntime:
    """Runs `stack` for the node described by `config`, writing events to `history`."""

    def __init__(self, config: NodeConfig, stack: Stack, history: HistoryWriter) -> None:
        self.config = config
        self.stack = stack
        self.history = history
        self.cluster_id = cluster_id_of(config.run_id)
        self.boot = int(time.time() * 1000)
        self.counters: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self._transport: asyncio.DatagramTransport | None = None
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._outbox: dict[str, list[bytes]] = {}
        self._flush_scheduled = False
        self._addresses: dict[str, tuple[str, int]] = {}
        self._lives = Lives(frozenset(config.members))  # which member, and which life of it, a datagram comes from
        self._wall_offset_s = 0.0  # unix time minus loop time, set in bind() (the wall clock without a syscall)
        self._tasks: list[asyncio.Task] = []
        self._msg_counter = 0
        self.data_ip: str | None = None
        self.workloads: list[Workload] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # the running loop, from bind() on
        self.view: tuple[tuple[str, int], tuple[str, ...]] | None = None  # the last InstallView
        # set whenever a layer emits `window_unblocked`: workloads refused with WindowFull wait on it
        self.window_open = asyncio.Event()
        self._protocols_started = False
        self.recv_buffer_bytes = 0  # the data socket's effective SO_RCVBUF, known after bind()

    # --- clock ------------------------------------------------------------------------------------------------
    def now(self) -> float:
        return self._loop.time()

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
        self.apply(self.stack.start(self.now()))

    async def bind(self) -> None:
        """Resolve the own data address, bind the socket, start the background tasks (no protocol yet)."""
        loop = self._loop = asyncio.get_running_loop()
        self._wall_offset_s = time.time() - loop.time()
        host, port = self.config.data_address(self.config.name)
        self.data_ip = await resolve_host(host)
        self._transport, _ = await loop.create_datagram_endpoint(
            lambda: _Endpoint(self), local_addr=(self.data_ip, port), family=socket.AF_INET)
        # A burst of bundled datagrams overflows the default 208 KiB receive buffer; every drop costs a
        # retransmission. Unprivileged SO_RCVBUF is capped at net.core.rmem_max: the effective size is recorded.
        sock = self._transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.config.recv_buffer_bytes)
        self.recv_buffer_bytes = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
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
                    infos = await loop.getaddrinfo(host, None, family=socket.AF_INET, type=socket.SOCK_DGRAM)
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
    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.counters["datagrams_received"] += 1
        if not self._protocols_started:
            self.counters["received_before_start"] += 1
            return
        try:
            sender, incarnation, messages = decode_datagram_from(data, self.cluster_id)
        except WireError as exc:
            self._drop(exc.reason, addr, exc.message)
            return
        now_s = self.now()
        life, previous = self._lives.see(sender, incarnation, now_s, int((now_s + self._wall_offset_s) * 1000))
        if life != SAME:
            if life == RESTARTED:
                self.history.emit("peer_restarted", peer=sender, incarnation=incarnation, previous=previous)
                self.apply(self.stack.peer_restarted(now_s, sender))
            else:
                self._drop(DROP_REASONS[life], addr, f"{sender!r} incarnation {incarnation} (current life: "
                                                     f"{previous})")
                return
        for msg in messages:
            self.counters["messages_received"] += 1
            if not self.stack.handles(msg):
                self.dropped["unhandled-type"] += 1
                continue
            self.apply(self.stack.received(now_s, sender, msg))

    def _drop(self, reason: str, addr: tuple[str, int], detail: str) -> None:
        self.dropped[reason] += 1
        if self.dropped[reason] <= MAX_DROP_EVENTS_PER_REASON:
            self.history.emit("datagram_dropped", reason=reason, src_ip=addr[0], detail=detail)

    # --- effects ----------------------------------------------------------------------------------------------
    def apply(self, effects: list[Effect]) -> None:
        """Carry out effects returned by the stack."""
        loop = self._loop
        for eff in effects:
            if isinstance(eff, Send):
                self._outbox.setdefault(eff.dst, []).append(encode_message(eff.msg))
                if not self._flush_scheduled:
                    self._flush_scheduled = True
                    loop.call_soon(self._flush_outbox)
            elif isinstance(eff, SetTimer):
                old = self._timers.pop(eff.key, None)
                if old is not None:
                    old.cancel()
                self._timers[eff.key] = loop.call_at(eff.at_s, self._fire, eff.key)
            elif isinstance(eff, CancelTimer):
                old = self._timers.pop(eff.key, None)
                if old is not None:
                    old.cancel()
            elif isinstance(eff, Deliver):
                self.counters["delivered"] += 1
                self.history.emit("app_deliver", msg_id=payload_msg_id(eff.payload), kind=eff.kind,
                                  **{"from": eff.src})
            elif isinstance(eff, Emit):
                self.history.emit(eff.type, **eff.fields)
                if eff.type == "window_unblocked":
                    self.window_open.set()
            elif isinstance(eff, InstallView):  # the stack already gave it to every layer
                self.view = (eff.view_id, eff.members)
                self.history.emit("view", view_id=list(eff.view_id), members=list(eff.members))
            else:
                raise TypeError(f"unknown effect {eff!r}")

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.apply(self.stack.timer(self.now(), key))

    def _flush_outbox(self) -> None:
        self._flush_scheduled = False
        outbox, self._outbox = self._outbox, {}
        for dst, encoded in outbox.items():
            addr = self._addresses.get(dst)
            if addr is None:
                self.counters["unresolved_drops"] += len(encoded)
                continue
            for datagram in self._bundle(encoded):
                self._transport.sendto(datagram, addr)
                self.counters["datagrams_sent"] += 1
            self.counters["messages_sent"] += len(encoded)

    def _bundle(self, encoded: list[bytes]) -> list[bytes]:
        """Pack encoded messages into datagrams (`bundle_max_bytes`, and at most MAX_MESSAGES each)."""
        return bundle(self.cluster_id, self.config.name, encoded, self.boot, self.config.bundle_max_bytes)

    # --- application ------------------------------------------------------------------------------------------
    def new_msg_id(self) -> str:
        """A run-unique message id: <node>.<boot>.<n> (pipeline/SCHEMA.md)."""
        self._msg_counter += 1
        return f"{self.config.name}.{self.boot}.{self._msg_counter}"

    def request(self, layer: str, op: str, args: dict[str, Any]) -> None:
        """Run an application request on a layer (raises UsageError for bad requests)."""
        self.apply(self.stack.request(self.now(), layer, op, args))

    def start_workload(self, spec: WorkloadSpec) -> Workload:
        """Start an application workload as its own task (it never blocks the node)."""
        item = Workload(spec)
        item.task = asyncio.create_task(workload.run(self, item), name=f"workload-{item.workload_id}")
        self.workloads.append(item)
        return item

    def state(self) -> dict[str, Any]:
        now_s = self.now()
        layers = {}
        for name, layer in self.stack.layers.items():
            state = getattr(layer, "state", None)
            if state is not None:
                layers[name] = state(now_s)
        view = None if self.view is None else {"view_id": list(self.view[0]), "members": list(self.view[1])}
        return {"node": self.config.name, "run": self.config.run_id, "boot": self.boot, "data_ip": self.data_ip,
                "members": list(self.config.members), "view": view, "layers": layers,
                "counters": dict(self.counters), "dropped": dict(self.dropped),
                "workloads": [w.state(now_s) for w in self.workloads]}
