"""Which life of a peer a datagram comes from (sans-IO): every datagram carries its sender's incarnation (its
boot), and a receiver keeps the newest it saw per sender. The UDP runtime and the simulator both ask `see`.

    same      the current life (also: 0, "not stated", as in forged or replayed datagrams)
    restarted a newer life: the caller tells every layer (`Stack.peer_restarted`) before feeding its messages
    old       a leftover of a life before the restart (delayed, duplicated or replayed): dropped
"""
from __future__ import annotations

SAME, RESTARTED, OLD = "same", "restarted", "old"


class Incarnations:
    """The newest incarnation seen per sender."""

    def __init__(self) -> None:
        self.newest: dict[str, int] = {}

    def see(self, sender: str, incarnation: int) -> tuple[str, int]:
        """Classify a datagram of `sender` carrying `incarnation` (and remember a newer one): (SAME, OLD or
        RESTARTED, the newest incarnation known before this datagram)."""
        if not incarnation:
            return SAME, self.newest.get(sender, 0)
        known = self.newest.setdefault(sender, incarnation)
        if incarnation == known:
            return SAME, known
        if incarnation < known:
            return OLD, known
        self.newest[sender] = incarnation
        return RESTARTED, known
