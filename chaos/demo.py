"""`make demo` for now: start 3 nodes, show that they hear each other, cut n1 -> n2 one way and show the
asymmetric result (who hears whom, and the asymmetric views of the seeds: n2's view without n1 while n1's still
holds n2), heal, show the merged views, and stop. (The seed-bug demo of the harness issue replaces it.)"""
from __future__ import annotations

import time
from typing import Callable

from rich.console import Console
from rich.table import Table

from chaos import cluster, partition

SETTLE_S = 3.0  # more than the silence threshold (1.5 s) plus a view change or a merge round (1 s)
console = Console(highlight=False)


def hearing_table(title: str, hearing: dict[str, set[str]]) -> Table:
    """A hears-matrix: row = listener, column = speaker."""
    names = sorted(hearing, key=lambda n: (len(n), n))
    table = Table(title=title)
    table.add_column("hears ->")
    for name in names:
        table.add_column(name, justify="center")
    for listener in names:
        table.add_row(listener, *["-" if s == listener else ("[green]yes[/]" if s in hearing[listener]
                                                              else "[red]NO[/]") for s in names])
    return table


def views_line(run: cluster.Cluster) -> str:
    """Every node's current group view, e.g. `n1: [n1 n2 n3]  n2: [n2 n3]`."""
    parts = []
    for name in run.names:
        view = run.client(name).view()
        parts.append(f"{name}: [{' '.join(view['members'])}]" if view else f"{name}: (no view)")
    return "views  " + "  ".join(parts)


def _settle_and_show(run: cluster.Cluster, title: str) -> dict[str, set[str]]:
    time.sleep(SETTLE_S)
    hearing = run.hearing()
    console.print(hearing_table(title, hearing))
    console.print(views_line(run), markup=False)
    return hearing


def main(log: Callable[[str], None]) -> int:
    run = cluster.up(3, log=log)
    try:
        console.print(hearing_table(f"run {run.run_id}: all nodes up", run.hearing()))
        namespaces = cluster.namespaces(run)
        data_ips = {n.name: n.data_ip for n in run.nodes}
        log("cutting n1 -> n2 one way: n2 drops what comes from n1 (iptables inside n2's namespace)")
        partition.apply(run.run_id, {"n2": {"n1"}}, namespaces, data_ips)
        hearing = _settle_and_show(run, "one-way cut n1 -> n2")
        asymmetric = "n1" not in hearing["n2"] and "n2" in hearing["n1"]
        log("asymmetric result: n2 no longer hears n1, n1 still hears n2" if asymmetric
            else "[red]unexpected: the cut did not show as asymmetric[/]")
        log("healing")
        partition.heal(run.run_id, namespaces)
        hearing = _settle_and_show(run, "healed")
        healed = all(h == set(run.names) - {n} for n, h in hearing.items())
        log(f"history of this run: {run.run_dir / 'events'}")
    finally:
        cluster.down(run.run_id, log=log)
    return 0 if asymmetric and healed else 1
