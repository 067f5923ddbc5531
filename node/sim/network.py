"""The simulated network: per directed link loss, delay, jitter, duplication and reordering, one-way cuts and
jammed links.

Faults are data: a `LinkSpec` per directed link (a default for the others), a set of cut links (a -> b cut
while b -> a works) and jammed links, whose datagrams are held (`node.sim.jam.JamQueue`) until the link is healed
and then sent on. `Network.fates` decides what becomes of one datagram with the simulator's single seeded
`random.Random`, drawing in a fixed order so a seed reproduces a run.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, fields

from node.errors import UsageError
from node.sim.jam import JamQueue


@dataclass(frozen=True)
class LinkSpec:
    """How one directed link treats datagrams. Percentages are 0..100; times in milliseconds."""

    loss_pct: float = 0.0
    delay_ms: float = 1.0
    jitter_ms: float = 0.0     # delay varies uniformly in [delay - jitter, delay + jitter] (never below 0)
    dup_pct: float = 0.0       # a datagram arrives twice, each copy with its own delay
    reorder_pct: float = 0.0   # a datagram is held back by up to reorder_ms more, so later ones overtake it
    reorder_ms: float = 10.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise UsageError(f"link setting {f.name} must be a number >= 0, got {value!r}")
        for name in ("loss_pct", "dup_pct", "reorder_pct"):
            if getattr(self, name) > 100:
                raise UsageError(f"link setting {name} must be at most 100, got {getattr(self, name)!r}")


class Network:
    """Links between members and one-way cuts; decides each datagram's fate."""

    def __init__(self, rng: random.Random, default: LinkSpec | None = None) -> None:
        self.rng = rng
        self.default = default if default is not None else LinkSpec()
        self.links: dict[tuple[str, str], LinkSpec] = {}
        self.cuts: set[tuple[str, str]] = set()
        self.jams: dict[tuple[str, str], JamQueue[bytes]] = {}

    def spec(self, src: str, dst: str) -> LinkSpec:
        return self.links.get((src, dst), self.default)

    def set_link(self, src: str, dst: str, spec: LinkSpec) -> None:
        self.links[(src, dst)] = spec

    def reset_links(self) -> None:
        """Every link back to the default spec."""
        self.links.clear()

    def cut(self, src: str, dst: str) -> None:
        """Drop everything from `src` to `dst` (one way)."""
        self.cuts.add((src, dst))

    def jam(self, src: str, dst: str, release: str = "fifo", cap: int | None = None) -> None:
        """Hold everything from `src` to `dst` (one way) until the link is healed; `release` and `cap` as
        `node.sim.jam.JamQueue` takes them. Raises `UsageError` for a bad release or cap."""
        self.cuts.discard((src, dst))
        self.jams[(src, dst)] = JamQueue(release, cap)

    def heal(self, src: str | None = None, dst: str | None = None) -> list[tuple[str, str, bytes]]:
        """Remove the cut or jam src -> dst, or every one when both are None. Returns what the healed jams held,
        as (src, dst, datagram) in release order, for the caller to send on."""
        links = list(self.jams) if src is None and dst is None else [(src, dst)]
        if src is None and dst is None:
            self.cuts.clear()
        else:
            self.cuts.discard((src, dst))
        released = []
        for link in sorted(link for link in links if link in self.jams):
            for data in self.jams.pop(link).release(self.rng):
                released.append((*link, data))
        return released

    def is_cut(self, src: str, dst: str) -> bool:
        return (src, dst) in self.cuts

    def held_by_jam(self, src: str, dst: str, data: bytes) -> bool:
        """Hold `data` if src -> dst is jammed (True), else leave it to the caller (False)."""
        queue = self.jams.get((src, dst))
        if queue is None:
            return False
        queue.hold(data)
        return True

    def fates(self, src: str, dst: str) -> list[float]:
        """Delays in seconds of the copies of one datagram that arrive (empty: lost). Cuts are checked by the
        caller, so a cut link draws no random numbers."""
        spec = self.links.get((src, dst), self.default)
        rng = self.rng
        if spec.loss_pct and rng.random() * 100 < spec.loss_pct:
            return []
        copies = 2 if spec.dup_pct and rng.random() * 100 < spec.dup_pct else 1
        out: list[float] = []
        for _ in range(copies):
            delay_ms = spec.delay_ms
            if spec.jitter_ms:
                delay_ms += rng.uniform(-spec.jitter_ms, spec.jitter_ms)
            if spec.reorder_pct and rng.random() * 100 < spec.reorder_pct:
                delay_ms += rng.uniform(0, spec.reorder_ms)
            out.append(max(0.0, delay_ms) / 1000)
        return out
