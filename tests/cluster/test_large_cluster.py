"""Twenty nodes on one machine: all hear all and hold one view of all twenty with no view change while they start
(a member not heard yet has not joined: nobody suspects it), one isolated node leaves every other view and its
own view is itself alone, and after the heal one merge brings the twenty back into one view.

`bench/bench_cluster.py` times the same at fifty nodes (`up -n 50`, isolate, heal).
"""
from __future__ import annotations


import pytest
from cluster_wait import wait_for

from chaos.cluster import lifecycle as cluster
from chaos.cluster.views import views, wait_one_view
from chaos.net.docker import DockerNet
from node import history

pytestmark = pytest.mark.splitlab_cluster

COUNT = 20
ISOLATED = "n7"


def events(run, node: str, type_: str) -> list[dict]:
    return [e for e in history.read(run.run_dir / "events" / f"{node}.jsonl") if e["type"] == type_]


def test_twenty_nodes_start_without_churn_and_an_isolated_member_leaves_every_view_and_merges_back(splitlab_up):
    run = splitlab_up(COUNT)
    names = run.names
    others = [n for n in names if n != ISOLATED]
    wait_one_view(run, names, None, 30, "one view of all twenty after up")
    assert {v[0] for v in views(run).values()} == {("n1", 1)}, "the start should install no view but the first"
    with DockerNet(run, verify=False) as net:
        net.partition(f"isolate:{ISOLATED}")
        out_s = wait_one_view(run, others, others, 20, f"every other node installing a view without {ISOLATED}")
        wait_for(lambda: views(run, [ISOLATED])[ISOLATED][1] == (ISOLATED,), 20, f"{ISOLATED} alone in its view")
        net.heal()
    merged_s = wait_one_view(run, names, None, 30, "one view of all twenty after the heal")
    cluster.down(run.run_id)  # flushes every history
    merges = [e for n in names for e in events(run, n, "merge")]
    joined = sorted([sorted(others), [ISOLATED]])
    assert any(sorted(map(sorted, m["subgroups"])) == joined for m in merges), (
        f"one merge should join {ISOLATED} and the rest: {merges}")
    suspected = {(n, e["peer"]) for n in names for e in events(run, n, "suspect")}
    assert suspected and all(peer == ISOLATED or node == ISOLATED for node, peer in suspected), (
        f"only the cut suspects anyone: {sorted(suspected)}")
    print(f"20 nodes: out of every view {out_s:.1f} s after the cut, merged back {merged_s:.1f} s after the heal")
