"""Ready-made simulations of reliable multicast, and application senders for them.

`multicast_sim` builds a `node.sim.Simulator` whose members run `multicast` (NAKACK4), either on top of the
group layers (`liveness` + `membership`, which install views) or alone with views injected by the test
(`with_membership=False`). `AppSender` is an application thread of one member: it multicasts numbered payloads
(ids "<member>.<tag>.<n>", made by `node.core.make_payload`) and, when the window is full, waits until the
layer is no longer blocked (checking every `poll_s` of virtual time) and sends the same payload again.
"""
from __future__ import annotations

from typing import Iterable, Mapping, cast

from node.core import make_payload
from node.membership.config import MembershipConfig
from node.membership.sim import group_sim
from node.multicast.config import Nakack4Config
from node.multicast.errors import WindowFull
from node.multicast.nakack4 import Nakack4
from node.sim.network import LinkSpec
from node.sim.simulator import Simulator

LAYER = "multicast"


def multicast_sim(members: Iterable[str] = ("a", "b", "c"), seed: int = 0, config: Nakack4Config | None = None,
                  bcast_sync: str | Mapping[str, str] = "tipc", with_membership: bool = True,
                  membership: MembershipConfig | None = None, link: LinkSpec | None = None,
                  configs: Mapping[str, Nakack4Config] | None = None, start: Iterable[str] | None = None,
                  initial: Mapping[str, Iterable[str]] | None = None, record_events: bool = True) -> Simulator:
    """Members running NAKACK4. `bcast_sync` and `configs` may differ per member; `initial` overrides a member's
    initial view (default: every member); `start` limits who starts now (group members start later with
    `node.membership.sim.start_member`)."""
    members = tuple(members)
    configs = dict(configs or {})
    initial = {k: tuple(v) for k, v in (initial or {}).items()}

    def layer(name: str, universe: tuple[str, ...]) -> dict:
        mode = bcast_sync if isinstance(bcast_sync, str) else bcast_sync.get(name, "tipc")
        cfg = configs.get(name, config or Nakack4Config())
        return {LAYER: Nakack4(name, cfg, initial.get(name, universe), mode)}

    if with_membership:
        return group_sim(members, seed, membership, extra=layer, link=link, start=start,
                         record_events=record_events)
    sim = Simulator(seed, default_link=link, record_events=record_events)
    for name in (members if start is None else tuple(start)):
        sim.add_member(name, layer(name, members))
    return sim


def nak(sim: Simulator, member: str) -> Nakack4:
    return cast(Nakack4, sim.layer(member, LAYER))


def multicast(sim: Simulator, member: str, payload: bytes, **extra) -> None:
    """One multicast now (raises WindowFull when the window is full)."""
    sim.request(member, LAYER, "send", {"payload": payload, **extra})


class AppSender:
    """An application thread multicasting `count` payloads from `member`, `rate_per_s` a second (None: as fast
    as the window allows), waiting while the window is full. `sent` holds what the layer took, in order."""

    def __init__(self, sim: Simulator, member: str, count: int, tag: str = "m", size: int = 16,
                 rate_per_s: float | None = None, poll_s: float = 0.005) -> None:
        self.sim = sim
        self.member = member
        self.count = count
        self.tag = tag
        self.size = size
        self.interval_s = 0.0 if rate_per_s is None else 1.0 / rate_per_s
        self.poll_s = poll_s
        self.sent: list[bytes] = []
        self.refused = 0
        self.waiting_since_s: float | None = None
        self.waited_s = 0.0

    @property
    def done(self) -> bool:
        return len(self.sent) >= self.count

    def start(self, at_s: float | None = None) -> "AppSender":
        self.sim.at(self.sim.now_s if at_s is None else at_s, self._step)
        return self

    def _step(self) -> None:
        while not self.done:
            payload = make_payload(f"{self.member}.{self.tag}.{len(self.sent) + 1}", self.size)
            try:
                multicast(self.sim, self.member, payload)
            except WindowFull:
                self.refused += 1
                if self.waiting_since_s is None:
                    self.waiting_since_s = self.sim.now_s
                self.sim.at(self.sim.now_s + self.poll_s, self._step)
                return
            if self.waiting_since_s is not None:
                self.waited_s += self.sim.now_s - self.waiting_since_s
                self.waiting_since_s = None
            self.sent.append(payload)
            if self.interval_s and not self.done:
                self.sim.at(self.sim.now_s + self.interval_s, self._step)
                return


def all_delivered(sim: Simulator, senders: Iterable[AppSender], receivers: Iterable[str]) -> bool:
    """Whether every receiver (other than the sender) delivered at least what each sender sent."""
    receivers = tuple(receivers)
    return all(len(sim.deliveries.get(r, {}).get(s.member, ())) >= len(s.sent)
               for s in senders for r in receivers if r != s.member)
