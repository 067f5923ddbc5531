"""Torture schedules (`splitlab torture --seed N --duration-s S [--nodes N]`): random mixes of faults drawn from one seed, with a
workload running, and the invariants checked after a final heal.

The generated scenario (saved in the run's schedule.json, and as scenario.yaml next to it) runs unicast3 and
nakack4 with TIPC broadcast sync and the membership layer. Every node sends unicasts to the next node and
multicasts to its view for the whole timeline; one fault episode at a time starts and ends: one-way or
symmetric partitions, loss, delay with jitter, duplication and reordering on random links, and paused nodes.
Episodes are short enough that the protocols' retention covers them (no send connection is given up:
max_retransmit_time 0; windows of departed members kept 60 s), so after the heal the invariants must hold:
every expected message delivered once and in order, one view of all nodes, no endless or stale retransmission,
every workload finished.

On failure the run directory keeps the realised schedule: `splitlab replay RUN_DIR` runs it again, and the
same seed generates the same scenario. Exit codes 0 (invariants hold), 1 (they do not), 2 (bad input).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Sequence

import yaml

from node.config import MAX_NODES
from node.errors import UsageError

EPISODES = ("one_way", "split", "flaky", "slow", "shuffle", "pause")
SIM_EPISODES = tuple(e for e in EPISODES if e != "pause")
MIN_DURATION_S = 10.0
UNICAST_RATE = 20.0     # messages/s from each node to the next
MULTICAST_RATE = 10.0   # messages/s from each node to its view
INVARIANTS: dict[str, Any] = {
    "history": "ok", "delivery": "ok", "duplicates": "ok", "fifo": "ok",
    "views": {"status": "ok", "max_converge_s": 30.0},
    "heal_recovery": {"status": "ok", "max_recovery_s": 30.0},
    "endless_retransmission": "ok", "stale_link": "ok", "workloads": "ok",
}


def _links(rng: random.Random, nodes: list[str]) -> str:
    """A random non-empty set of directed links, e.g. `n1->n2;n3->n1`."""
    pairs = [(a, b) for a in nodes for b in nodes if a != b]
    chosen = rng.sample(pairs, rng.randint(1, len(pairs)))
    return ";".join(f"{a}->{b}" for a, b in sorted(chosen))


def _episode(kind: str, rng: random.Random, nodes: list[str], start_s: float, hold_s: float) -> list[dict[str, Any]]:
    """The steps of one fault episode: its start at `start_s` and its end `hold_s` later."""
    end_s = round(start_s + hold_s, 2)
    start_s = round(start_s, 2)
    if kind == "one_way":
        a, b = rng.sample(nodes, 2)
        return [{"at_s": start_s, "partition": f"{a}<-{b}"}, {"at_s": end_s, "heal": "partition"}]
    if kind == "split":
        shuffled = rng.sample(nodes, len(nodes))
        cut = rng.randint(1, len(nodes) - 1)
        grudge = f"{','.join(sorted(shuffled[:cut]))}|{','.join(sorted(shuffled[cut:]))}"
        return [{"at_s": start_s, "partition": grudge}, {"at_s": end_s, "heal": "partition"}]
    if kind == "flaky":
        return [{"at_s": start_s, "flaky": {"loss_pct": round(rng.uniform(5, 30), 1), "links": _links(rng, nodes)}},
                {"at_s": end_s, "fast": None}]
    if kind == "slow":
        return [{"at_s": start_s, "slow": {"delay_ms": round(rng.uniform(10, 120), 1),
                                           "jitter_ms": round(rng.uniform(0, 20), 1), "links": _links(rng, nodes)}},
                {"at_s": end_s, "fast": None}]
    if kind == "shuffle":
        return [{"at_s": start_s, "slow": {"delay_ms": round(rng.uniform(5, 40), 1),
                                           "duplicate_pct": round(rng.uniform(2, 15), 1),
                                           "reorder_pct": round(rng.uniform(5, 30), 1), "links": _links(rng, nodes)}},
                {"at_s": end_s, "fast": None}]
    node = rng.choice(nodes)
    return [{"at_s": start_s, "pause": node}, {"at_s": round(start_s + min(hold_s, 3.0), 2), "resume": node}]


def generate(seed: int, duration_s: float, nodes: int = 3, episodes: Sequence[str] = EPISODES) -> dict[str, Any]:
    """The torture scenario for `seed` as a scenario document (plain data). Raises `UsageError` for bad sizes."""
    if duration_s < MIN_DURATION_S:
        raise UsageError(f"--duration-s must be at least {MIN_DURATION_S:g} s, got {duration_s:g}")
    if not 2 <= nodes <= MAX_NODES:
        raise UsageError(f"--nodes must be within 2..{MAX_NODES}, got {nodes}")
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(1, nodes + 1)]
    steps: list[dict[str, Any]] = []
    for i, node in enumerate(names):
        to = names[(i + 1) % len(names)]
        steps.append({"at_s": 0.0, "workload": {"kind": "unicast", "from": node, "to": to,
                                                 "count": int(UNICAST_RATE * duration_s), "size": 100,
                                                 "rate": UNICAST_RATE}})
        steps.append({"at_s": 0.0, "workload": {"kind": "multicast", "from": node,
                                                 "count": int(MULTICAST_RATE * duration_s), "size": 100,
                                                 "rate": MULTICAST_RATE}})
    t = rng.uniform(1.0, 3.0)
    while t < duration_s - 3.0:
        hold = min(rng.uniform(1.0, 5.0), duration_s - 2.0 - t)
        steps += _episode(rng.choice(list(episodes)), rng, names, t, hold)
        t += hold + rng.uniform(0.5, 3.0)
    return {
        "name": f"torture-{seed}",
        "description": f"random faults from seed {seed} over {duration_s:g} s on {nodes} nodes",
        "seed": seed,
        "cluster": {"nodes": nodes, "defaults": {
            "unicast": "unicast3", "multicast": "nakack4", "bcast_sync": "tipc", "membership": "gms",
            "timeouts": {"max_retransmit_time_ms": 0, "conn_close_timeout_ms": 60_000, "retain_departed_ms": 60_000}}},
        "steps": sorted(steps, key=lambda s: s["at_s"]),
        "duration_s": round(duration_s, 2),
        "settle_s": 15.0,
        "expect": {"default": dict(INVARIANTS)},
    }


def load_generated(doc: dict[str, Any], seed: int) -> Any:
    """The generated document validated like a scenario file."""
    from chaos.harness.load import from_data

    return from_data(doc, f"torture(seed={seed})", None)


def run(seed: int, duration_s: float, nodes: int = 3, *, simulate: bool = False, out: Path | str | None = None,
        progress: Any = None, spark: Any = None, report: bool = True, hosts: Any = None) -> Any:
    """Generate and run one torture scenario (on the `hosts` (inventory, placement) given, else this machine);
    returns the `RunResult` (its run_dir holds scenario.yaml)."""
    doc = generate(seed, duration_s, nodes, SIM_EPISODES if simulate else EPISODES)
    loaded = load_generated(doc, seed)
    from chaos.harness import runner

    result = runner.run(loaded, backend="sim" if simulate else "docker", seed=seed, out=out, progress=progress,
                        spark=spark, report=report, hosts=hosts)
    (result.run_dir / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return result
