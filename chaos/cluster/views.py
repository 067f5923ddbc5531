"""The views a running cluster's nodes hold, read through their control APIs (all nodes at once): whether some
nodes agree on one view of given members, and a wait until they do.

Used where a cluster's membership is watched from outside: the large-cluster test and `bench_cluster`'s
isolate/heal rows. A node whose control API does not answer counts as holding no view.
"""
from __future__ import annotations

import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor

from chaos.cluster.model import Cluster
from node.errors import EnvironmentProblem

View = tuple[tuple[str, int], tuple[str, ...]]
READERS = 16  # control API requests in flight at once
POLL_S = 0.1


def views(cluster: Cluster, nodes: Collection[str] | None = None) -> dict[str, View | None]:
    """Each node's current view (`(view_id, members)`), None for a node without one or not answering."""
    names = list(nodes if nodes is not None else cluster.names)

    def read(name: str) -> View | None:
        try:
            view = cluster.client(name).view()
        except EnvironmentProblem:
            return None
        return None if view is None else ((view["view_id"][0], int(view["view_id"][1])), tuple(view["members"]))

    with ThreadPoolExecutor(max_workers=min(READERS, max(1, len(names))), thread_name_prefix="views") as pool:
        return dict(zip(names, pool.map(read, names)))


def one_view_of(cluster: Cluster, members: Collection[str], nodes: Collection[str] | None = None) -> bool:
    """Whether `nodes` (default: all) hold one and the same view whose members are exactly `members`."""
    seen = set(views(cluster, nodes).values())
    return len(seen) == 1 and None not in seen and set(next(iter(seen))[1]) == set(members)


def wait_one_view(cluster: Cluster, members: Collection[str], nodes: Collection[str] | None, timeout_s: float,
                  what: str) -> float:
    """Wait until `one_view_of(cluster, members, nodes)`; the seconds it took. Raises `EnvironmentProblem` saying
    `what` and the views held when it does not happen within `timeout_s`."""
    started = time.monotonic()
    while not one_view_of(cluster, members, nodes):
        if time.monotonic() - started > timeout_s:
            held = {v for v in views(cluster, nodes).values()}
            raise EnvironmentProblem(f"run {cluster.run_id}: {what} not within {timeout_s:g} s; views held: "
                                     f"{sorted(map(str, held))[:5]}")
        time.sleep(POLL_S)
    return time.monotonic() - started
