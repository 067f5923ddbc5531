"""Heartbeats between all members and who hears whom (sans-IO).

Every `heartbeat_ms` the layer sends a `Heartbeat` to every other member it has heard; a member never heard (not
started yet, or cut off since this member started) gets only every `unheard_stride`-th beat, the first among them,
so that the longest gap between two of them stays within half of `quiet_ms` (by default `silence_ms`; the node passes
the shorter of that and the membership's suspicion timeout: a member this one reaches but never
hears, a one-way cut, still hears it at least twice before it could suspect it). A member that starts hears the
running ones at once all the same: its own first beat goes to everyone, and who hears it answers at the full rate
from then on. Why: a cluster of 100 starts over a minute, and until then every member heartbeated every address at
the full rate: datagrams to members not up yet, each a neighbour resolution on every bridge and VXLAN host of the
run (`splitlab up -n 100` across the 3-host bed: 4.5 s sooner on average, DESIGN.md). A peer is *heard* from its
first heartbeat on; it becomes *silent* when nothing came from it for `silence_ms` (then heard again on the next
one, and it keeps the full rate: silence is not the same as never heard). The membership layer builds failure
detection on top of this record.

A heartbeat from outside the member list is reported (`stranger_heard`) and counted, never tracked; one that
claims to come from this member is forged (ours never come back) and only counted. `counters` has both.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar, Hashable

from node.core import Effect, Emit, Protocol, Send, SetTimer
from node.wire import Heartbeat


@dataclass
class PeerLiveness:
    last_heard_s: float | None = None
    heard: bool = False
    heartbeats: int = 0


class Liveness(Protocol):
    """Sends heartbeats to `members` (except `local`) and tracks when each peer was last heard."""

    MESSAGES: ClassVar[tuple[type, ...]] = (Heartbeat,)

    def __init__(self, local: str, members: list[str], heartbeat_ms: int = 250, silence_ms: int = 1500,
                 quiet_ms: int | None = None) -> None:
        if heartbeat_ms <= 0 or silence_ms <= heartbeat_ms:
            raise ValueError(f"need 0 < heartbeat_ms ({heartbeat_ms}) < silence_ms ({silence_ms})")
        gap_ms = (silence_ms if quiet_ms is None else quiet_ms) // 2
        self.unheard_stride = max(1, gap_ms // heartbeat_ms)  # beats between two heartbeats to a member never heard
        self.local = local
        self.peers = {m: PeerLiveness() for m in members if m != local}
        self.heartbeat_s = heartbeat_ms / 1000
        self.silence_s = silence_ms / 1000
        self._counter = 0
        self.counters: Counter = Counter()  # dropped heartbeats by reason: from_stranger, from_self

    def start(self, now_s: float) -> list[Effect]:
        return self._beat(now_s)

    def _beat(self, now_s: float) -> list[Effect]:
        self._counter += 1
        beat = Heartbeat(self._counter)
        everyone = (self._counter - 1) % self.unheard_stride == 0
        out: list[Effect] = [Send(peer, beat) for peer, rec in self.peers.items()
                             if everyone or rec.last_heard_s is not None]
        for peer, rec in self.peers.items():
            if rec.heard and rec.last_heard_s is not None and now_s - rec.last_heard_s >= self.silence_s:
                rec.heard = False
                out.append(Emit("peer_silent", {"peer": peer,
                                                "silent_ms": round((now_s - rec.last_heard_s) * 1000)}))
        out.append(SetTimer("beat", now_s + self.heartbeat_s))
        return out

    def on_timer(self, now_s: float, key: Hashable) -> list[Effect]:
        return self._beat(now_s) if key == "beat" else []

    def on_received(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        rec = self.peers.get(src)
        if src == self.local:
            self.counters["from_self"] += 1
            return []
        if rec is None:  # a heartbeat from outside the member list: noted, not tracked
            self.counters["from_stranger"] += 1
            return [Emit("stranger_heard", {"peer": src})]
        rec.last_heard_s = now_s
        rec.heartbeats += 1
        if not rec.heard:
            rec.heard = True
            return [Emit("peer_heard", {"peer": src})]
        return []

    def hears(self) -> list[str]:
        """Peers currently heard."""
        return sorted(p for p, rec in self.peers.items() if rec.heard)

    def state(self, now_s: float) -> dict[str, Any]:
        return {peer: {"heard": rec.heard, "heartbeats": rec.heartbeats,
                       "last_heard_ago_ms": None if rec.last_heard_s is None
                       else round((now_s - rec.last_heard_s) * 1000)}
                for peer, rec in sorted(self.peers.items())}
