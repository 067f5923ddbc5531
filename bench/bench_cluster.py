"""Cluster lifecycle and membership at scale, each against a baseline measured in the same run:

- `up -n 5` until all hear all, and `down`, against `docker run` / `docker rm` of 5 bare containers;
- `up -n 50` (20 with BENCH_QUICK) until all hear all in one view, against the same number of bare containers
  started at once through the engine's API (`chaos.cluster.engine.at_once`, as `up` starts its nodes);
- on that cluster, one node isolated (`isolate:n7`) until every other node holds a view without it, and healed
  until one view holds all again, against the same on the 5-node cluster (the goals of 50 nodes: 3 s and 5 s).
"""
from __future__ import annotations

import statistics
import time

import docker

from chaos.cluster import engine, images, lifecycle as cluster
from chaos.cluster.model import Cluster
from chaos.cluster.views import wait_one_view
from chaos.net.docker import DockerNet

NODES = 5
LARGE, LARGE_QUICK = 50, 20
ISOLATED = "n2"  # the coordinator n1 stays; any other member is as good
TIMEOUT_S = 120


def _bare(client: docker.DockerClient, image: str, count: int, parallel: bool) -> tuple[float, float]:
    def one(_: int) -> docker.models.containers.Container:
        return client.containers.run(image, entrypoint=["python3", "-c", "import time; time.sleep(300)"],
                                     detach=True, labels={"splitlab.bench": "bare"})

    started = time.monotonic()
    ctrs: list = []
    if parallel:
        engine.at_once(list(range(count)), lambda i: ctrs.append(one(i)))
    else:
        ctrs = [one(i) for i in range(count)]
    up_s = time.monotonic() - started
    started = time.monotonic()
    if parallel:
        engine.at_once(ctrs, lambda c: c.remove(force=True))
    else:
        for ctr in ctrs:
            ctr.remove(force=True)
    return up_s, time.monotonic() - started


def _isolate_and_heal(run: Cluster) -> tuple[float, float]:
    """Seconds until every other node holds a view without `ISOLATED`, and after the heal until one view of all."""
    others = [n for n in run.names if n != ISOLATED]
    with DockerNet(run, verify=False) as net:
        net.partition(f"isolate:{ISOLATED}")
        out_s = wait_one_view(run, others, others, TIMEOUT_S, f"every other node without {ISOLATED}")
        net.heal()
    merged_s = wait_one_view(run, run.names, None, TIMEOUT_S, "one view of all after the heal")
    return out_s, merged_s


def _splitlab(count: int) -> tuple[float, float, float, float]:
    started = time.monotonic()
    run = cluster.up(count, wait_timeout_s=TIMEOUT_S)
    try:
        wait_one_view(run, run.names, None, TIMEOUT_S, "one view of all after up")
        up_s = time.monotonic() - started
        out_s, merged_s = _isolate_and_heal(run)
    finally:
        started = time.monotonic()
        cluster.down(run.run_id)
    return up_s, time.monotonic() - started, out_s, merged_s


def run(quick: bool) -> list[dict]:
    client = docker.from_env()
    image = images.node_image()
    rounds = 1 if quick else 3
    large = LARGE_QUICK if quick else LARGE
    bare = [_bare(client, image, NODES, parallel=False) for _ in range(rounds)]
    ours = [_splitlab(NODES) for _ in range(rounds)]
    rows = []
    for index, label in ((0, f"up -n {NODES} to all-hear-all"), (1, "down")):
        value = statistics.median(r[index] for r in ours)
        base = statistics.median(r[index] for r in bare)
        rows.append({"name": label, "value": value, "unit": "s", "baseline": base, "ratio": value / base,
                     "better": "lower",
                     "note": f"baseline: docker run/rm of {NODES} bare containers; median of {rounds}"})
    bare_up, _ = _bare(client, image, large, parallel=True)
    up_s, _, out_s, merged_s = _splitlab(large)
    small_out = statistics.median(r[2] for r in ours)
    small_merged = statistics.median(r[3] for r in ours)
    rows.append({"name": f"up -n {large}: all hear all, one view", "value": up_s, "unit": "s", "baseline": bare_up,
                 "ratio": up_s / bare_up, "better": "lower",
                 "note": f"baseline: {large} bare containers started at once through the engine (goal at 50: 30 s)"})
    for label, value, base, goal in (("isolate one: out of every view", out_s, small_out, 3),
                                     ("heal: merged back into one view", merged_s, small_merged, 5)):
        rows.append({"name": f"{large} nodes, {label}", "value": value, "unit": "s", "baseline": base,
                     "ratio": value / base, "better": "lower",
                     "note": f"baseline: the same at {NODES} nodes, median of {rounds} (goal at 50: {goal} s)"})
    return rows
