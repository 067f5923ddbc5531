"""The JGroups node's runtime: a JVM (JPype) with one JChannel on the configured stack, the trace protocol's
listener, the channel's receiver, liveness from every message heard, and the workloads of `node.workload`.

It is a `node.control.ControlTarget` (the control API is the node's own, `node.control`) and a
`node.workload.WorkloadHost` (the workloads are splitlab's own). JGroups calls in from its own threads: the
history is written under a lock, and an exception inside a callback stops the node visibly (`failure`), never
logged by JGroups and forgotten.
"""
from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from typing import Any, Callable

import jpype

from jgnode import bridge, stack
from jgnode.config import JgConfig
from jgnode.liveness import Liveness
from jgnode.trace import Trace
from node import workload
from node.core import payload_msg_id
from node.errors import SplitlabError, UsageError
from node.history import HistoryWriter
from node.workload import MessageIds, Workload, WorkloadSpec

JGROUPS_JAR = os.environ.get("SPLITLAB_JGROUPS_JAR", "/usr/share/java/jgroups.jar")
TRACE_JAR = os.environ.get("SPLITLAB_TRACE_JAR", "/opt/splitlab/splitlab-jgroups.jar")
MAX_PAYLOAD_BYTES = 60_000  # one UDP datagram with bundling off, headers aside


class SharedHistory(HistoryWriter):
    """The history writer behind a lock: JGroups' threads and the event loop write to it. Reentrant: `record`
    flushes a full buffer and `close` flushes, each through `flush`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.RLock()

    def record(self, type_: str, fields: dict[str, Any]) -> None:
        with self._lock:
            super().record(type_, fields)

    def flush(self, sync: bool = False) -> None:
        with self._lock:
            super().flush(sync)

    def close(self) -> None:
        with self._lock:
            super().close()

    def end(self, type_: str, fields: dict[str, Any]) -> None:
        with self._lock:  # no event of another thread between the last one and the close
            super().end(type_, fields)


class JgRuntime:
    """One JGroups member. `start()` starts the JVM and connects the channel (blocking: run it in a thread);
    `stop()` closes it. `failure` holds the first exception a JGroups callback raised."""

    def __init__(self, config: JgConfig, history: SharedHistory, on_failure: Callable[[BaseException], None]) -> None:
        self.config = config
        self.history = history
        self.name = config.node.name
        self.run_id = config.node.run_id
        self.members = config.node.members
        self.boot = int(time.time() * 1000)
        self.msg_ids = MessageIds(self.name, self.boot)  # WorkloadHost
        self.window_open = asyncio.Event()  # WorkloadHost: JGroups' UNICAST/UNICAST2 never refuse a send
        self.workloads: list[Workload] = []
        self.counters: dict[str, int] = {"app_delivered": 0}
        self.data_ip = resolve(config.node.data_address(self.name)[0])
        self.liveness = Liveness(self.name, self.members, config.node.silence_ms, history.record)
        self.trace = Trace(self.name, history.record, self.liveness.heard)
        self.failure: BaseException | None = None
        self._on_failure = on_failure
        self._channel: Any = None
        self._view: dict[str, Any] | None = None
        self._addresses: dict[str, Any] = {}  # member name -> its JGroups address, from the current view
        self._lock = threading.Lock()

    # --- the JVM and the channel ----------------------------------------------------------------------------------
    def stack_config(self) -> str:
        ips = [resolve(self.config.node.data_address(m)[0]) for m in self.members]
        return stack.config_string(self.data_ip, self.config.node.data_address(self.name)[1], ips,
                                   self.config.unicast, self.config.props)

    def start_jvm(self) -> None:
        """Start the JVM (`-Xrs`: it leaves SIGTERM alone; its start still resets the signal's handler, which the
        caller installs again)."""
        jpype.startJVM(jpype.getDefaultJVMPath(), f"-Xmx{self.config.heap_mb}m", "-XX:+UseSerialGC",
                       "-XX:-UsePerfData", "-Xrs", "-Djava.net.preferIPv4Stack=true",
                       f"-Djgroups.bind_addr={self.data_ip}", classpath=[JGROUPS_JAR, TRACE_JAR], convertStrings=True)

    def connect(self) -> None:
        """Build the channel with the trace protocol and connect it to the run's cluster (blocks until joined)."""
        channel = jpype.JClass("org.jgroups.JChannel")(self.stack_config())
        channel.setName(self.name)
        channel.getProtocolStack().findProtocol("SplitlabTrace").setListener(bridge.listener(self.trace, self.fail))
        channel.setReceiver(bridge.receiver(self, self.fail))
        self._channel = channel
        channel.connect(self.run_id)

    def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()

    def fail(self, exc: BaseException) -> None:
        """A JGroups callback raised: remember the first, stop the node."""
        if self.failure is None:
            self.failure = exc
            self._on_failure(exc)

    # --- the channel's receiver (called from JGroups' threads) -----------------------------------------------------
    def on_message(self, payload: bytes, src: str, multicast: bool) -> None:
        msg_id = payload_msg_id(payload)
        self.count("app_delivered" if msg_id is not None else "foreign_payloads")
        if msg_id is None:
            return
        self.trace.delivered(msg_id)
        self.history.record("app_deliver", {"msg_id": msg_id, "kind": "multicast" if multicast else "unicast",
                                            "from": src})

    def count(self, name: str) -> None:
        """One more of counter `name` (JGroups calls in on several threads)."""
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + 1

    def counter_values(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counters)

    def on_view(self, coord: str, number: int, members: list[str], addresses: dict[str, Any]) -> None:
        with self._lock:
            self._view = {"view_id": [coord, number], "members": members}
            self._addresses = addresses
        self.history.record("view", {"view_id": [coord, number], "members": members})

    def on_suspect(self, peer: str) -> None:
        self.history.record("suspect", {"peer": peer})

    # --- WorkloadHost and ControlTarget ---------------------------------------------------------------------------
    def max_payload_bytes(self, kind: str) -> int | None:
        return MAX_PAYLOAD_BYTES

    def request(self, layer: str, op: str, args: dict[str, Any]) -> None:
        if op != "send" or layer not in ("unicast", "multicast"):
            raise UsageError(f"a JGroups node offers no {layer} {op!r}",
                             hint="the admin verbs and the ping workload are splitlab's own node's")
        if self._channel is None or not self._channel.isConnected():
            raise UsageError("the JGroups channel is not connected yet")
        dest = None
        if layer == "unicast":
            with self._lock:
                dest = self._addresses.get(args["to"])
            if dest is None:
                raise UsageError(f"{args['to']} is not in this node's view")
        try:
            self._channel.send(bridge.message(dest, args["payload"]))
        except jpype.JException as exc:
            raise UsageError(f"JGroups refused the send: {exc}") from None

    def sender(self, layer: str, to: str) -> Callable[[bytes], None]:
        return lambda payload: self.request(layer, "send", {"to": to, "payload": payload})

    def start_workload(self, spec: WorkloadSpec) -> Workload:
        item = workload.start(self, spec)
        self.workloads.append(item)
        return item

    def stop_fields(self, reason: str) -> dict[str, Any]:
        """The fields of this node's `node_stop` event."""
        return {"reason": reason, "counters": self.counter_values(), "dropped": {}}

    def quiesce(self) -> None:
        """Write `node_stop` (reason "quiesce") and end the history: the member goes on, unrecorded, until it
        stops (its leave then changes the others' views unrecorded too)."""
        self.history.end("node_stop", self.stop_fields("quiesce"))

    def state(self) -> dict[str, Any]:
        now = asyncio.get_running_loop().time()
        with self._lock:
            view = self._view
        return {"node": self.name, "run": self.run_id, "boot": self.boot, "data_ip": self.data_ip,
                "members": list(self.members), "kind": "jgroups", "view": view,
                "layers": {"liveness": self.liveness.state(),
                           "jgroups": {"unicast": self.config.unicast,
                                       "connected": bool(self._channel is not None and self._channel.isConnected()),
                                       "undecodable": self.trace.undecodable}},
                "counters": self.counter_values(), "dropped": {},
                "workloads": [w.state(now) for w in self.workloads]}


def resolve(host: str) -> str:
    """An IPv4 address for `host` (a member's data alias). Raises SplitlabError when it does not resolve."""
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    except socket.gaierror as exc:
        raise SplitlabError(f"cannot resolve {host!r}: {exc}") from None
