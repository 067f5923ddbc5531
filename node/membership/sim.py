"""Ready-made simulations of the group side: every member runs `liveness` (heartbeats) and `membership` (views),
plus whatever layers `extra(name, members)` adds (the multicast layer, unicast, ...).

`group_sim` returns the `node.sim.Simulator`; `views(sim)` and `converged(sim)` read the members' views.
"""
from __future__ import annotations

from typing import Callable, Iterable

from node.core import Protocol
from node.liveness import Liveness
from node.membership.config import MembershipConfig
from node.membership.gms import Membership
from node.sim.network import LinkSpec
from node.sim.simulator import Simulator

Extra = Callable[[str, tuple[str, ...]], dict[str, Protocol]]


def group_layers(name: str, members: tuple[str, ...], config: MembershipConfig | None = None,
                 heartbeat_ms: int = 250) -> dict[str, Protocol]:
    """The liveness and membership layers of member `name`."""
    config = config or MembershipConfig()
    liveness = Liveness(name, list(members), heartbeat_ms, config.suspect_timeout_ms)
    return {"liveness": liveness, "membership": Membership(name, members, config, liveness)}


def group_sim(members: Iterable[str] = ("a", "b", "c"), seed: int = 0, config: MembershipConfig | None = None,
              extra: Extra | None = None, link: LinkSpec | None = None, start: Iterable[str] | None = None,
              record_events: bool = True) -> Simulator:
    """A simulator of group members (all configured with `members`); only those in `start` (default: all) are
    started now, the others can be started later with `start_member`."""
    members = tuple(members)
    sim = Simulator(seed, default_link=link, record_events=record_events)
    sim.group_members = members  # type: ignore[attr-defined]
    sim.group_config = config  # type: ignore[attr-defined]
    sim.group_extra = extra  # type: ignore[attr-defined]
    for name in (members if start is None else tuple(start)):
        start_member(sim, name)
    return sim


def start_member(sim: Simulator, name: str) -> None:
    """Start member `name` of a `group_sim` now."""
    members = sim.group_members  # type: ignore[attr-defined]
    layers = group_layers(name, members, sim.group_config)  # type: ignore[attr-defined]
    extra = sim.group_extra  # type: ignore[attr-defined]
    if extra is not None:
        layers.update(extra(name, members))
    sim.add_member(name, layers)


def views(sim: Simulator) -> dict[str, tuple[tuple[str, int], tuple[str, ...]]]:
    """Each member's current view: name -> (view_id, members)."""
    out = {}
    for name in sim.stacks:
        view = sim.layer(name, "membership").view
        out[name] = (view.view_id, view.members)
    return out


def converged(sim: Simulator, members: Iterable[str] | None = None) -> bool:
    """Whether `members` (default: every started member) all hold one view with exactly them in it."""
    names = tuple(sim.stacks if members is None else members)
    seen = {views(sim)[n] for n in names}
    return len(seen) == 1 and set(next(iter(seen))[1]) == set(names)
