"""Views and the pure decisions about them: who coordinates, and what a merge installs.

A view is a view id `(coord, n)` and its members in join order; the coordinator is the first member. splitlab's
join order is the order of the configured members (the universe), so every member sorts a member set the same
way, and the oldest member of any subgroup is also its lowest-ranked one.

What a view from the wire may be (`view_problem`): configured members only, each once, its coordinator first,
and a number at most `MAX_VIEW_STEP` above the receiver's own: every install adds one, so a real view is never
that far ahead, while a forged 2**64-1 would leave no number for the next view (it would not even encode).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

MAX_VIEW_STEP = 1 << 20  # how far above the receiver's own view number a view from the wire may be


@dataclass(frozen=True)
class View:
    """An installed view: `view_id = (coord, n)`, `members` in join order."""

    view_id: tuple[str, int]
    members: tuple[str, ...]

    @property
    def coord(self) -> str:
        return self.view_id[0]

    @property
    def n(self) -> int:
        return self.view_id[1]

    def to_state(self) -> dict:
        return {"view_id": list(self.view_id), "members": list(self.members)}


def view_problem(coord: str, n: int, members: tuple[str, ...], own_n: int, rank: Mapping[str, int]) -> str | None:
    """Why a view (`coord`, `n`, `members`) from the wire cannot be one of this group's, or None: a drop reason
    (`stranger_members`, `duplicate_members`, `coord_not_first`, `n_absurd`)."""
    if any(m not in rank for m in members):
        return "stranger_members"
    if len(set(members)) != len(members):
        return "duplicate_members"
    if not members or members[0] != coord:
        return "coord_not_first"
    if not 0 < n <= own_n + MAX_VIEW_STEP:
        return "n_absurd"
    return None


def acting_coordinator(view: View, local: str, suspected: set[str] | frozenset[str]) -> str:
    """The member that coordinates `view` as `local` sees it: the first member not suspected (local never is)."""
    for member in view.members:
        if member == local or member not in suspected:
            return member
    return local


def in_join_order(members: Iterable[str], rank: Mapping[str, int]) -> tuple[str, ...]:
    """`members` sorted by join order; names outside the universe are dropped."""
    return tuple(sorted((m for m in set(members) if m in rank), key=rank.__getitem__))


def merge_leader(local: str, actings: Iterable[str], rank: Mapping[str, int]) -> str:
    """MERGE3: the lowest-ranked of the subgroup coordinators (local being one) leads the merge."""
    return min({local, *(a for a in actings if a in rank)}, key=rank.__getitem__)


def merged_view(own: View, others: Iterable[View], local: str, suspected: set[str] | frozenset[str],
                rank: Mapping[str, int]) -> View:
    """The MergeView a leader installs: the union of the subgroups' members it does not suspect, in join order,
    with view id (first member, highest n of the subgroups + 1)."""
    others = list(others)
    union = set(own.members).union(*(v.members for v in others))
    members = in_join_order((m for m in union if m == local or m not in suspected), rank)
    n = max([own.n] + [v.n for v in others]) + 1
    return View((members[0], n), members)
