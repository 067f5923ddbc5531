"""Many hosts against one (issue 15): `splitlab up -n N` until all hear all, on this machine's engine and over the 3
hosts of a test bed (chaos.hosts.bed: containers with their own sshd and Docker engine, reached over SSH), for N = 3
and 9 (and 24 and 100 without quick: the goal of 100 is 60 s); and the apply time of a 9-node `ring` grudge (every
node cuts most of the others, so every namespace on every host changes), across the 3 hosts against the same on one
machine; median of several applies (then unpartition), no probes (`verify=False`: probes reach only this machine's
namespaces).

The bed's hosts share this machine's two cores with each other, so the ratios show what SSH, the shipped image, the
VXLAN network and three engines cost, not what real hosts would add or take away. The goal for the grudge across 3
hosts is 100 ms (Jepsen's takes about 500 ms). Each run is brought down after its figure. The images go onto the
fresh hosts first, as a row of their own (against `docker save` alone), so that the up times do not include them.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from chaos.cluster import images, lifecycle as cluster
from chaos.hosts import bed, ship
from chaos.hosts.inventory import Inventory
from chaos.hosts.remote import closing, connect_all
from chaos.net.docker import DockerNet

HOSTS = 3
GRUDGE_NODES = 9
GRUDGE = "ring"
APPLY_GOAL_MS = 100.0


def _up_s(nodes: int, inventory: Inventory | None) -> tuple[float, str]:
    started = time.monotonic()
    run = cluster.up(nodes, inventory=inventory, wait_timeout_s=180)
    elapsed = time.monotonic() - started
    return elapsed, run.run_id


def _apply_ms(run_id: str, rounds: int) -> float:
    times = []
    with DockerNet(cluster.load(run_id), verify=False) as net:
        net.namespaces  # noqa: B018 -- the namespaces (and SSH connections) once, before the clock
        for _ in range(rounds):
            started = time.perf_counter()
            net.partition(GRUDGE)
            times.append((time.perf_counter() - started) * 1000)
            net.heal()
    return statistics.median(times)


def _ship_row(inventory: Inventory) -> dict:
    """Both images onto the fresh hosts, against `docker save` of the same images to nowhere."""
    wanted = [images.node_image(), images.build_agent(lambda _: None)]
    started = time.monotonic()
    subprocess.run(["docker", "save", *wanted], stdout=subprocess.DEVNULL, check=True)
    save_s = time.monotonic() - started
    with closing(connect_all(inventory.hosts)) as hosts:
        started = time.monotonic()
        ship.ship(wanted, hosts)
        ship_s = time.monotonic() - started
    return {"name": f"node + agent images onto {HOSTS} fresh hosts", "value": ship_s, "unit": "s",
            "baseline": save_s, "ratio": ship_s / save_s, "better": "lower",
            "note": "baseline: docker save of the same images; the loads run in parallel over SSH"}


def run(quick: bool) -> list[dict]:
    sizes = (3, 9) if quick else (3, 9, 24, 100)
    rounds = 3 if quick else 7
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bed_dir = Path(tmp) / f"bench-{os.getpid()}"  # the bed's name: letters, digits and '-'
        bed_dir.mkdir()
        try:
            inventory = bed.up(bed_dir, HOSTS)
            rows.append(_ship_row(inventory))  # and the up times below do not pay for it
            for nodes in sizes:
                figures = {}
                for where, inv in (("one", None), ("hosts", inventory)):
                    elapsed, run_id = _up_s(nodes, inv)
                    try:
                        figures[where] = elapsed
                        if nodes == GRUDGE_NODES:
                            figures[f"apply-{where}"] = _apply_ms(run_id, rounds)
                    finally:
                        cluster.down(run_id)
                rows.append({"name": f"up -n {nodes} to all-hear-all, {HOSTS} hosts", "value": figures["hosts"],
                             "unit": "s", "baseline": figures["one"], "ratio": figures["hosts"] / figures["one"],
                             "better": "lower", "note": "baseline: the same on this machine's engine; the bed's "
                                                        "hosts share this machine's cores"})
                if nodes == GRUDGE_NODES:
                    value, base = figures["apply-hosts"], figures["apply-one"]
                    rows.append({"name": f"partition apply, {nodes}-node {GRUDGE} across {HOSTS} hosts",
                                 "value": value, "unit": "ms", "baseline": base, "ratio": value / base,
                                 "better": "lower",
                                 "note": f"goal <= {APPLY_GOAL_MS:g} ms "
                                         f"({'met' if value <= APPLY_GOAL_MS else 'not met'}); baseline: the same "
                                         f"grudge on one machine; median of {rounds}"})
        finally:
            bed.down(bed_dir)
    return rows
