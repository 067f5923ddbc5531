"""FD_ALL-style failure detection over the liveness layer's heartbeat record (who was heard when).

Every member heartbeats to every configured member (`node.liveness.Liveness` sends them and notes when each
peer was last heard); a peer silent for `suspect_timeout_s` is suspected, and unsuspected as soon as it is heard
again. Because every member applies the same timeout to the same heartbeats, members suspect a dead peer at
about the same time (the point of FD_ALL over FD).

A peer never heard has not joined yet: it is suspected only after `join_timeout_s` from the detector's start
(then like a crashed member). A cluster of 50 containers on one machine starts over 20 s or more; suspecting the
late ones after `suspect_timeout_s` had the coordinator install a view per suspicion and merge them back a few at
a time, each view a sync episode for every member (a run of 50 churned through 13 views before it settled).
"""
from __future__ import annotations

from node.core import Effect, Emit
from node.liveness import Liveness


class FailureDetector:
    """Suspicion of `peers` from `liveness`'s record; `check(now_s)` returns `suspect` / `unsuspect` events."""

    def __init__(self, liveness: Liveness, peers: tuple[str, ...], suspect_timeout_s: float,
                 join_timeout_s: float) -> None:
        self.liveness = liveness
        self.peers = peers
        self.timeout_s = suspect_timeout_s
        self.join_timeout_s = join_timeout_s
        self.started_s = 0.0
        self.suspected: set[str] = set()

    def start(self, now_s: float) -> None:
        self.started_s = now_s

    def last_heard_s(self, peer: str) -> float | None:
        rec = self.liveness.peers.get(peer)
        return None if rec is None else rec.last_heard_s

    def silent(self, now_s: float, peer: str) -> bool:
        heard_s = self.last_heard_s(peer)
        if heard_s is None:
            return now_s - self.started_s >= self.join_timeout_s
        return now_s - heard_s >= self.timeout_s

    def check(self, now_s: float) -> list[Effect]:
        """Re-evaluate every peer; returns the `suspect` / `unsuspect` history events of the changes."""
        out: list[Effect] = []
        for peer in self.peers:
            silent = self.silent(now_s, peer)
            if silent and peer not in self.suspected:
                self.suspected.add(peer)
                heard_s = self.last_heard_s(peer)
                out.append(Emit("suspect", {"peer": peer, "silent_ms": round(
                    (now_s - (self.started_s if heard_s is None else heard_s)) * 1000)}))
            elif not silent and peer in self.suspected:
                self.suspected.discard(peer)
                out.append(Emit("unsuspect", {"peer": peer}))
        return out
