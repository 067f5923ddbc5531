"""The ping workload (sans-IO): probes a peer over the data network and measures round trips.

Request `ping` {to, count, interval_ms} sends `count` `Ping`s spaced by `interval_ms`; each peer answers a
`Ping` with a `Pong`. Results (sent, answered, rtt percentiles) are in `state()`.

Hostile input: a `Ping` from a non-member (or claiming to come from this member) is not answered (no reflection
toward strangers); a `Pong` counts only from the peer that was pinged with that id (a forged one from anyone
else leaves the real answer its measurement); at most `MAX_OUTSTANDING` pings await an answer (the oldest is
forgotten). Drops are counted by reason in `counters`.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, ClassVar, Hashable

from node.core import Effect, Emit, Protocol, Send, SetTimer
from node.errors import UsageError
from node.wire import Ping, Pong

MAX_OUTSTANDING = 1024  # pings awaiting a Pong; beyond, the oldest is forgotten (lost ones would pile up)


class PingWorkload(Protocol):
    MESSAGES: ClassVar[tuple[type, ...]] = (Ping, Pong)

    def __init__(self, local: str, members: list[str]) -> None:
        self.local = local
        self.members = set(members)
        self._next_id = 0
        self._outstanding: dict[int, tuple[str, float]] = {}
        self._queued: dict[int, tuple[str, int, float]] = {}  # timer ping_id -> (peer, remaining, interval_s)
        self.sent: dict[str, int] = {}
        self.answered: dict[str, int] = {}
        self.rtts_ms: dict[str, list[float]] = {}
        self.counters: Counter = Counter()  # drops by reason

    def on_request(self, now_s: float, op: str, args: dict[str, Any]) -> list[Effect]:
        if op != "ping":
            raise UsageError(f"ping workload has no operation {op!r}; use 'ping'")
        to = args.get("to")
        count = args.get("count", 1)
        interval_ms = args.get("interval_ms", 10)
        if to not in self.members or to == self.local:
            raise UsageError(f"ping: 'to' must be another member ({', '.join(sorted(self.members - {self.local}))}),"
                             f" got {to!r}")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1_000_000:
            raise UsageError(f"ping: 'count' must be an integer 1..1000000, got {count!r}")
        if (isinstance(interval_ms, bool) or not isinstance(interval_ms, (int, float)) or not math.isfinite(interval_ms)
                or interval_ms < 0):
            raise UsageError(f"ping: 'interval_ms' must be a finite number >= 0, got {interval_ms!r}")
        return self._send(now_s, to, count, interval_ms / 1000)

    def _send(self, now_s: float, to: str, remaining: int, interval_s: float) -> list[Effect]:
        self._next_id += 1
        ping_id = self._next_id
        self._outstanding[ping_id] = (to, now_s)
        if len(self._outstanding) > MAX_OUTSTANDING:
            del self._outstanding[next(iter(self._outstanding))]  # the oldest (dicts keep insertion order)
            self.counters["pings_unanswered_forgotten"] += 1
        self.sent[to] = self.sent.get(to, 0) + 1
        out: list[Effect] = [Send(to, Ping(ping_id)), Emit("ping_tx", {"peer": to, "ping_id": ping_id})]
        if remaining > 1:
            out.append(SetTimer(("next", ping_id), now_s + interval_s))
            self._queued[ping_id] = (to, remaining - 1, interval_s)
        return out

    def on_timer(self, now_s: float, key: Hashable) -> list[Effect]:
        if not (isinstance(key, tuple) and key[0] == "next" and key[1] in self._queued):
            return []
        to, remaining, interval_s = self._queued.pop(key[1])
        return self._send(now_s, to, remaining, interval_s)

    def on_received(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        if isinstance(msg, Ping):
            if src == self.local or src not in self.members:
                self.counters["ping_from_self" if src == self.local else "ping_from_stranger"] += 1
                return []
            return [Send(src, Pong(msg.ping_id))]
        sent = self._outstanding.get(msg.ping_id)
        if sent is None or sent[0] != src:
            self.counters["pong_unknown_id" if sent is None else "pong_wrong_peer"] += 1
            return []
        del self._outstanding[msg.ping_id]
        rtt_ms = round((now_s - sent[1]) * 1000, 3)
        self.answered[src] = self.answered.get(src, 0) + 1
        self.rtts_ms.setdefault(src, []).append(rtt_ms)
        return [Emit("pong_rx", {"peer": src, "ping_id": msg.ping_id, "rtt_ms": rtt_ms})]

    def state(self, now_s: float) -> dict[str, Any]:
        out = {}
        for peer in sorted(self.sent):
            rtts = sorted(self.rtts_ms.get(peer, []))
            out[peer] = {"sent": self.sent[peer], "answered": self.answered.get(peer, 0),
                         "rtt_ms_p50": rtts[len(rtts) // 2] if rtts else None,
                         "rtt_ms_max": rtts[-1] if rtts else None}
        return out
