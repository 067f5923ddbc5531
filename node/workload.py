"""Application workloads run by the node (the IO side): send `count` messages of `size` bytes to a peer
(unicast) or to the group (multicast, `to` "*") at `rate` messages/s through a protocol layer, recording
`app_send` with a run-unique message id for each.

A workload is an asyncio task, so a slow or blocked workload never blocks the node. `rate` 0 sends as fast as
the loop allows (yielding to it every `BURST` messages so bundling and receiving go on). When the layer refuses
a send with `WindowFull` (its send window to that peer, or to the group, is full), the workload waits on
`runtime.window_open` (set when a layer emits `window_unblocked`) and sends the same message again: the wait
blocks this workload only, not the node. A multicast message's `app_send` is recorded when the layer took it.

A workload needs only a `WorkloadHost` (what `node.runtime.NodeRuntime` is): this module does not import the
runtime, the runtime imports it.
"""
from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from node.core import make_payload
from node.errors import UsageError, WindowFull
from node.history import HistoryWriter

BURST = 64
MAX_COUNT = 10_000_000
_ids = itertools.count(1)


class MessageIds:
    """The run-unique message ids of one node's life, `<node>.<boot>.<n>` (pipeline/SCHEMA.md): a workload takes
    its `count` numbers at once."""

    def __init__(self, node: str, boot: int) -> None:
        self.prefix = f"{node}.{boot}."
        self._last = 0

    def reserve(self, count: int) -> int:
        """The first of `count` numbers no other caller gets: the ids are prefix + str(first + i), i < count."""
        first = self._last + 1
        self._last += count
        return first


class WorkloadHost(Protocol):
    """What a workload runs on: message ids, the history, sends through a layer, and the window-open signal."""

    history: HistoryWriter
    window_open: asyncio.Event  # set when a layer emits `window_unblocked`
    msg_ids: MessageIds

    def sender(self, layer: str, to: str) -> Callable[[bytes], None]:
        """What sends one message through `layer` to `to` ("*": the group), the arguments checked by
        `WorkloadSpec.parse`; it raises WindowFull when the layer's window is full."""


@dataclass
class WorkloadSpec:
    """A validated workload request."""

    layer: str
    kind: str
    to: str
    count: int
    size: int
    rate_per_s: float

    @classmethod
    def parse(cls, layer: str, kind: str, args: dict[str, Any], members: tuple[str, ...], local: str,
              max_size: int) -> "WorkloadSpec":
        """Validate `args` ({to, count, size, rate}; a multicast has no `to`: it goes to "*").
        Raises `UsageError` naming the bad field."""
        fields_ = {"count", "size", "rate"} if kind == "multicast" else {"to", "count", "size", "rate"}
        unknown = set(args) - fields_
        if unknown:
            raise UsageError(f"{kind} workload: unknown field(s) {', '.join(sorted(unknown))}",
                             hint=f"fields: {'' if kind == 'multicast' else 'to, '}count, size (bytes), "
                                  "rate (messages/s, 0 = unpaced)")
        to = args.get("to", "*" if kind == "multicast" else None)
        peers = [m for m in members if m != local]
        if kind != "multicast" and to not in peers:
            raise UsageError(f"{kind} workload: 'to' must be one of {', '.join(peers)}, got {to!r}")
        count, size, rate = args.get("count", 1), args.get("size", 100), args.get("rate", 0)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise UsageError(f"{kind} workload: 'count' must be an integer 1..{MAX_COUNT}, got {count!r}")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= max_size:
            raise UsageError(f"{kind} workload: 'size' must be an integer 0..{max_size} bytes, got {size!r}")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0:
            raise UsageError(f"{kind} workload: 'rate' must be a number >= 0 (messages/s), got {rate!r}")
        return cls(layer, kind, str(to), count, size, float(rate))  # a peer's name, or "*"


@dataclass
class Workload:
    spec: WorkloadSpec
    workload_id: int = field(default_factory=lambda: next(_ids))
    sent: int = 0
    done: bool = False
    error: str | None = None
    task: asyncio.Task | None = None
    blocked_since_s: float | None = None  # waiting for window_unblocked since (loop time)
    blocked_s: float = 0.0                # total time spent waiting
    blocked_count: int = 0

    def state(self, now_s: float | None = None) -> dict[str, Any]:
        blocked_s = self.blocked_s
        if self.blocked_since_s is not None and now_s is not None:
            blocked_s += now_s - self.blocked_since_s
        return {"id": self.workload_id, "kind": self.spec.kind, "to": self.spec.to, "count": self.spec.count,
                "size": self.spec.size, "rate": self.spec.rate_per_s, "sent": self.sent, "done": self.done,
                "error": self.error, "blocked": self.blocked_since_s is not None,
                "blocked_count": self.blocked_count, "blocked_ms": round(blocked_s * 1000, 3)}


def start(host: WorkloadHost, spec: WorkloadSpec) -> Workload:
    """Start the workload `spec` on `host` as its own task (it never blocks the node); returns it."""
    item = Workload(spec)
    item.task = asyncio.create_task(run(host, item), name=f"workload-{item.workload_id}")
    return item


async def run(runtime: WorkloadHost, workload: Workload) -> None:
    """Send the workload's messages; a protocol refusal ends it with `error` set (visible in the node state)."""
    spec = workload.spec
    loop = asyncio.get_running_loop()
    started = loop.time()
    multicast = spec.kind == "multicast"
    history = runtime.history  # `history.record`, not a kept bound method: compiled, a direct native call
    send = runtime.sender(spec.layer, spec.to)
    prefix, first = runtime.msg_ids.prefix, runtime.msg_ids.reserve(spec.count)
    try:
        for index in range(spec.count):
            msg_id = prefix + str(first + index)
            payload = make_payload(msg_id, spec.size)
            sent = {"msg_id": msg_id, "kind": spec.kind, "to": spec.to, "size": len(payload)}
            if not multicast:
                history.record("app_send", sent)
            while True:  # the send, and while the layer answers WindowFull, a wait for room and another try
                try:
                    send(payload)
                    break
                except WindowFull:  # no await between the refusal and the wait: an unblock cannot slip in between
                    await _room(runtime, workload)
            if multicast:
                history.record("app_send", sent)
            workload.sent += 1
            if spec.rate_per_s > 0:
                delay_s = started + (index + 1) / spec.rate_per_s - loop.time()
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
            elif (index + 1) % BURST == 0:
                await asyncio.sleep(0)
    except UsageError as exc:
        workload.error = str(exc)
    finally:
        workload.done = True


async def _room(runtime: WorkloadHost, workload: Workload) -> None:
    """Wait for the next `window_unblocked` after the workload's layer refused a send (WindowFull); counted as a
    block of the workload. A coroutine only then: a send the layer takes costs no await."""
    loop = asyncio.get_running_loop()
    runtime.window_open.clear()
    workload.blocked_since_s = loop.time()
    workload.blocked_count += 1
    try:
        await runtime.window_open.wait()
    finally:
        workload.blocked_s += loop.time() - workload.blocked_since_s
        workload.blocked_since_s = None
