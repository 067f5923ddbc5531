"""Application workloads run by the node (the IO side): send `count` messages of `size` bytes to a peer at
`rate` messages/s through a protocol layer, recording `app_send` with a run-unique message id for each.

A workload is an asyncio task, so a slow or blocked workload never blocks the node. `rate` 0 sends as fast as
the loop allows (yielding to it every `BURST` messages so bundling and receiving go on).
"""
from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from node.core import make_payload
from node.errors import UsageError

if TYPE_CHECKING:
    from node.runtime import NodeRuntime

BURST = 64
MAX_COUNT = 10_000_000
_ids = itertools.count(1)


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
        """Validate `args` ({to, count, size, rate}). Raises `UsageError` naming the bad field."""
        unknown = set(args) - {"to", "count", "size", "rate"}
        if unknown:
            raise UsageError(f"{kind} workload: unknown field(s) {', '.join(sorted(unknown))}",
                             hint="fields: to, count, size (bytes), rate (messages/s, 0 = unpaced)")
        to = args.get("to")
        peers = [m for m in members if m != local]
        if to not in peers:
            raise UsageError(f"{kind} workload: 'to' must be one of {', '.join(peers)}, got {to!r}")
        count, size, rate = args.get("count", 1), args.get("size", 100), args.get("rate", 0)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
            raise UsageError(f"{kind} workload: 'count' must be an integer 1..{MAX_COUNT}, got {count!r}")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= max_size:
            raise UsageError(f"{kind} workload: 'size' must be an integer 0..{max_size} bytes, got {size!r}")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0:
            raise UsageError(f"{kind} workload: 'rate' must be a number >= 0 (messages/s), got {rate!r}")
        return cls(layer, kind, to, count, size, float(rate))


@dataclass
class Workload:
    spec: WorkloadSpec
    workload_id: int = field(default_factory=lambda: next(_ids))
    sent: int = 0
    done: bool = False
    error: str | None = None
    task: asyncio.Task | None = None

    def state(self) -> dict[str, Any]:
        return {"id": self.workload_id, "kind": self.spec.kind, "to": self.spec.to, "count": self.spec.count,
                "size": self.spec.size, "rate": self.spec.rate_per_s, "sent": self.sent, "done": self.done,
                "error": self.error}


async def run(runtime: "NodeRuntime", workload: Workload) -> None:
    """Send the workload's messages; a protocol refusal ends it with `error` set (visible in the node state)."""
    spec = workload.spec
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        for index in range(spec.count):
            msg_id = runtime.new_msg_id()
            payload = make_payload(msg_id, spec.size)
            runtime.history.emit("app_send", msg_id=msg_id, kind=spec.kind, to=spec.to, size=len(payload))
            runtime.request(spec.layer, "send", {"to": spec.to, "payload": payload})
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
