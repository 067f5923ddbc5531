"""Ready-made simulations of the unicast layer, and workload helpers for tests and experiments.

`unicast_sim` builds a `Simulator` whose members each run one layer named "unicast" made by
`node.unicast.make_unicast`; `send_many` sends numbered payloads (made by `node.core.make_payload`, so
deliveries can be named) and returns them.
"""
from __future__ import annotations

from typing import Iterable

from node.auth import WireKey
from node.core import make_payload
from node.sim.network import LinkSpec
from node.sim.simulator import Simulator
from node.unicast import UnicastConfig, make_unicast

LAYER = "unicast"


def unicast_sim(variant: str, members: Iterable[str] = ("a", "b"), seed: int = 0,
                config: UnicastConfig | None = None, link: LinkSpec | None = None,
                bundle_max_bytes: int = 8192, record_events: bool = True,
                auth_key: WireKey | None = None) -> Simulator:
    """A simulator with one unicast layer per member, all knowing the initial membership `members` (`auth_key`:
    on the authenticated wire)."""
    members = tuple(members)
    sim = Simulator(seed, default_link=link, bundle_max_bytes=bundle_max_bytes, record_events=record_events,
                    auth_key=auth_key)
    for name in members:
        sim.add_member(name, {LAYER: make_unicast(variant, name, config or UnicastConfig(), members)})
    return sim


def send_many(sim: Simulator, src: str, dst: str, count: int, tag: str = "m", size: int = 16) -> list[bytes]:
    """Send `count` payloads src -> dst now; ids are "<src>.<tag>.<n>" from 1. Returns the payloads."""
    payloads = []
    for n in range(1, count + 1):
        payload = make_payload(f"{src}.{tag}.{n}", size)
        sim.request(src, LAYER, "send", {"to": dst, "payload": payload})
        payloads.append(payload)
    return payloads


def schedule_one_way_cuts(sim: Simulator, rng, links: list[tuple[str, str]], count: int, start_s: tuple[float, float],
                          max_cut_s: float, heal_s: float) -> None:
    """Schedule `count` one-way cuts on links drawn from `links` (each starting within `start_s` and lasting
    0.2..`max_cut_s` seconds, healed by `heal_s` at the latest), then heal everything and reset every link at
    `heal_s`: the safety phase of a property test, followed by its liveness phase."""
    for _ in range(count):
        src, dst = rng.choice(links)
        start = rng.uniform(*start_s)
        end = min(heal_s, start + rng.uniform(0.2, max_cut_s))
        sim.at(start, lambda s=src, d=dst: sim.partition(s, d))
        sim.at(end, lambda s=src, d=dst: sim.heal(s, d))

    def heal_everything() -> None:
        sim.heal()
        sim.reset_links()
    sim.at(heal_s, heal_everything)
