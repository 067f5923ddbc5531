"""Cluster lifecycle: `splitlab up -n 5` until all hear all, and `down`, next to `docker run` / `docker rm` of
5 bare containers from the same image, measured in the same run."""
from __future__ import annotations

import statistics
import time

import docker

from chaos.cluster import lifecycle as cluster, images

NODES = 5


def _bare(client: docker.DockerClient, image: str) -> tuple[float, float]:
    started = time.monotonic()
    ctrs = [client.containers.run(image, entrypoint=["python3", "-c", "import time; time.sleep(120)"], detach=True,
                                  labels={"splitlab.bench": "bare"}) for _ in range(NODES)]
    up_s = time.monotonic() - started
    started = time.monotonic()
    for ctr in ctrs:
        ctr.remove(force=True)
    return up_s, time.monotonic() - started


def _splitlab() -> tuple[float, float]:
    started = time.monotonic()
    run = cluster.up(NODES)
    up_s = time.monotonic() - started
    started = time.monotonic()
    cluster.down(run.run_id)
    return up_s, time.monotonic() - started


def run(quick: bool) -> list[dict]:
    client = docker.from_env()
    image = images.node_image()
    rounds = 1 if quick else 3
    bare = [_bare(client, image) for _ in range(rounds)]
    ours = [_splitlab() for _ in range(rounds)]
    rows = []
    for index, label in ((0, "up -n 5 to all-hear-all"), (1, "down")):
        value = statistics.median(r[index] for r in ours)
        base = statistics.median(r[index] for r in bare)
        rows.append({"name": label, "value": value, "unit": "s", "baseline": base, "ratio": value / base,
                     "better": "lower",
                     "note": f"baseline: docker run/rm of {NODES} bare containers; median of {rounds}"})
    return rows
