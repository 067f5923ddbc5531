"""Property: under random loss (up to 30%), delay, jitter, duplication, reordering and one-way partitions (long
enough to change views) that finally heal, the members converge on one view holding all of them, and every
member of that view delivers every multicast of every sender of that view exactly once, in per-sender order,
within a bound after the heal; then the multicast layer has nothing left to do.

Seeded loops (TigerBeetle style): each seed draws links, workload and partition schedule from the simulator's
one `random.Random`; a failure names the seed that reproduces it. Runs with membership (views from suspicion,
merges after heals) and NAKACK4 with `bcast_sync: tipc`.
"""
from __future__ import annotations

import pytest

from node.core import make_payload
from node.membership.sim import converged
from node.multicast import WindowFull
from node.multicast.sim import multicast, multicast_sim, nak
from node.sim.harness import schedule_one_way_cuts

MEMBERS = ("a", "b", "c")
WORK_S = 6.0      # multicasts are sent during [0.5, WORK_S)
HEAL_S = 9.0      # every partition and link fault is gone from here on
BOUND_S = 6.0     # one view and everything delivered by HEAL_S + BOUND_S
SEEDS = range(150)


def run_schedule(seed: int, messages: int = 150):
    sim = multicast_sim(MEMBERS, seed)
    rng = sim.rng
    links = [(s, d) for s in MEMBERS for d in MEMBERS if s != d]
    for src, dst in links:
        sim.set_link(src, dst, loss_pct=rng.uniform(0, 30), delay_ms=rng.uniform(0.2, 30),
                     jitter_ms=rng.uniform(0, 15), dup_pct=rng.uniform(0, 10), reorder_pct=rng.uniform(0, 25),
                     reorder_ms=rng.uniform(1, 80))
    sent: dict[str, list[bytes]] = {m: [] for m in MEMBERS}

    def send(member: str) -> None:
        payload = make_payload(f"{member}.{seed}.{len(sent[member]) + 1}", 24)
        try:
            multicast(sim, member, payload)
        except WindowFull:  # an application thread waits and tries again
            sim.at(sim.now_s + 0.05, lambda: send(member))
            return
        sent[member].append(payload)

    for _ in range(messages):
        member = rng.choice(MEMBERS)
        sim.at(rng.uniform(0.5, WORK_S), lambda m=member: send(m))
    # one-way partitions, some longer than the suspicion timeout
    schedule_one_way_cuts(sim, rng, links, rng.randint(1, 4), (0.5, WORK_S), 4.0, HEAL_S)
    return sim, sent


def complete(sim, sent) -> bool:
    return converged(sim) and all(len(sim.delivered(r, s)) >= len(sent[s])
                                  for s in MEMBERS for r in MEMBERS if r != s)


def settled(sim) -> bool:
    """The multicast layer has nothing left to do: every send window fully acked, no gaps anywhere."""
    for member in MEMBERS:
        layer = nak(sim, member)
        if layer.send.low != layer.send.high or layer.blocked:
            return False
        if any(e.window.has_gaps() or e.window.buffered for e in layer.windows.values()):
            return False
    return True


@pytest.mark.parametrize("seed", SEEDS)
def test_nakack4_delivers_every_multicast_once_in_order_after_random_faults(seed: int) -> None:
    sim, sent = run_schedule(seed)
    sim.run_until(HEAL_S)
    done = sim.run_until_true(lambda: complete(sim, sent), BOUND_S)
    assert converged(sim), f"views did not merge by t={sim.now_s:.1f}s; {sim.repro()}"
    for src in MEMBERS:
        for dst in MEMBERS:
            if dst == src:
                continue
            got = sim.delivered(dst, src)
            assert got == sent[src], (f"{dst} from {src}: delivered {len(got)} of {len(sent[src])} "
                                      f"(duplicates: {len(got) != len(set(got))}, order or gaps broken: "
                                      f"{got != sent[src][:len(got)]}); {sim.repro()}")
    assert done, f"not complete by t={HEAL_S + BOUND_S}s; {sim.repro()}"
    assert sim.run_until_true(lambda: settled(sim), 3.0), f"nakack4 still busy after delivery; {sim.repro()}"
    assert sim.counters["lost"] and sim.counters["cut"], f"the schedule should have hurt; {sim.repro()}"


def test_some_schedules_changed_views_so_the_property_covers_merges() -> None:
    changed = 0
    for seed in range(10):
        sim, _ = run_schedule(seed)
        sim.run_until(HEAL_S + BOUND_S)
        changed += bool(sim.emitted("merge"))
    assert changed >= 3


def test_the_same_seed_replays_the_same_run() -> None:
    first, _ = run_schedule(11)
    second, _ = run_schedule(11)
    first.run_until(HEAL_S + 2)
    second.run_until(HEAL_S + 2)
    assert first.events == second.events
    assert first.counters == second.counters
