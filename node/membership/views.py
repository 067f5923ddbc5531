"""Views and the pure decisions about them: who coordinates, and what a merge installs.

A view is a view id `(coord, n)` and its members in join order; the coordinator is the first member. splitlab's
join order is the order of the configured members (the universe), so every member sorts a member set the same
way, and the oldest member of any subgroup is also its lowest-ranked one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping


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
