"""Which member, and which life of it, a datagram comes from (sans-IO): the gate every decoded datagram passes
before any protocol sees it. The UDP runtime and the simulator both ask `Lives.see`.

Every datagram carries its sender's name and incarnation (its boot, unix ms). A receiver keeps, per member, the
life it currently talks to and when it last heard from it:

    same        the current life (also: 0, "not stated", as in forged or replayed datagrams of the chaos tools)
    restarted   a new life: the caller tells every layer (`Stack.peer_restarted`) before feeding its messages
    old         a lower incarnation while the current life is alive: a leftover (delayed, replayed): dropped
    pending     a higher incarnation while the current life is alive: not confirmed yet, dropped
    unknown     the sender is not a member of this cluster: dropped (nobody's state may grow for it)
    future      an incarnation further ahead of this node's clock than `max_clock_skew_ms`: dropped (a typo or a
                forged maximum must not retire the real life)

What makes a new life (DESIGN.md, "Lives"): another incarnation than the current one, once the current life has
been silent for `life_timeout_s` (heartbeats keep a live one talking several times a second; a restarted one is
dead). Until then datagrams of another incarnation are dropped: a lower one as a leftover of a replaced life
(`old`), a higher one as not yet confirmed (`pending`). So one forged datagram with a neighbouring incarnation
cannot reset a live member's state at its peers, a node whose clock stepped back across its restart is heard as
soon as its old life has been silent that long, and nothing a datagram says silences a member for good.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Container

SAME, RESTARTED, OLD, PENDING, UNKNOWN, FUTURE = "same", "restarted", "old", "pending", "unknown", "future"
# the drop reason each refused verdict is counted under (runtime `dropped`, history `datagram_dropped`)
DROP_REASONS = {OLD: "old-incarnation", PENDING: "unconfirmed-incarnation", UNKNOWN: "unknown-sender",
                FUTURE: "future-incarnation"}
LIFE_TIMEOUT_S = 1.0
MAX_CLOCK_SKEW_MS = 600_000


@dataclass
class _Life:
    incarnation: int
    heard_s: float


class Lives:
    """The current life of every member of `members` (a set or a live view such as a dict's keys; None: any sender
    is a member)."""

    def __init__(self, members: Container[str] | None = None, life_timeout_s: float = LIFE_TIMEOUT_S,
                 max_clock_skew_ms: int = MAX_CLOCK_SKEW_MS) -> None:
        self.members = members
        self.life_timeout_s = life_timeout_s
        self.max_clock_skew_ms = max_clock_skew_ms
        self._lives: dict[str, _Life] = {}

    def see(self, sender: str, incarnation: int, now_s: float, wall_ms: int) -> tuple[str, int]:
        """Classify a datagram of `sender` stating `incarnation`, received at `now_s` (monotonic) when this
        node's clock reads `wall_ms` (unix ms); remember a new life. Returns (verdict, the incarnation of the
        life current before this datagram, 0 if none)."""
        if self.members is not None and sender not in self.members:
            return UNKNOWN, 0
        life = self._lives.get(sender)
        known = 0 if life is None else life.incarnation
        if not incarnation:
            if life is not None:
                life.heard_s = now_s
            return SAME, known
        if incarnation > wall_ms + self.max_clock_skew_ms:
            return FUTURE, known
        if life is None:
            self._lives[sender] = _Life(incarnation, now_s)
            return SAME, 0
        if incarnation == known:
            life.heard_s = now_s
            return SAME, known
        if now_s - life.heard_s < self.life_timeout_s:
            return (OLD if incarnation < known else PENDING), known
        self._lives[sender] = _Life(incarnation, now_s)
        return RESTARTED, known
