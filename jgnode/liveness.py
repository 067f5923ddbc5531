"""A JGroups node's liveness: which members it hears, from every message the trace protocol sees (the node
contract's `layers.liveness` in `/state`, and the `peer_heard` / `peer_silent` / `stranger_heard` events)."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable


class Liveness:
    """Which members this node hears: any message from a member within the silence threshold. Records
    `peer_heard`, `peer_silent` and (once per name) `stranger_heard`."""

    def __init__(self, local: str, members: tuple[str, ...], silence_ms: int, record: Callable[[str, dict], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.local = local
        self.members = set(members) - {local}
        self.silence_s = silence_ms / 1000
        self._record = record
        self._clock = clock
        self._last: dict[str, float] = {}
        self._heard: set[str] = set()
        self._strangers: set[str] = set()
        self._lock = threading.Lock()

    def heard(self, name: str) -> None:
        now = self._clock()
        with self._lock:
            if name in self.members:
                self._last[name] = now
                if name not in self._heard:
                    self._heard.add(name)
                    self._record("peer_heard", {"peer": name})
            elif name != self.local and name not in self._strangers and len(self._strangers) < 64:
                self._strangers.add(name)
                self._record("stranger_heard", {"peer": name})

    def tick(self) -> None:
        """Mark the members silent that were not heard for the threshold."""
        now = self._clock()
        with self._lock:
            for name in sorted(self._heard):
                silent_s = now - self._last[name]
                if silent_s > self.silence_s:
                    self._heard.discard(name)
                    self._record("peer_silent", {"peer": name, "silent_ms": round(silent_s * 1000, 3)})

    def state(self) -> dict[str, dict[str, Any]]:
        now = self._clock()
        with self._lock:
            return {m: {"heard": m in self._heard,
                        "last_heard_ms_ago": round((now - self._last[m]) * 1000, 3) if m in self._last else None}
                    for m in sorted(self.members)}
