"""Reliable multicast on real containers: three nodes each multicast 500 messages while n2 stops hearing n1 (a
one-way cut long enough to change views) and after the heal; every node delivers every other node's messages
once and in order (the histories are the witness), and the views merge into one holding all three.

Runs NAKACK4 with `bcast_sync: tipc` and the membership layer (the node defaults).
"""
from __future__ import annotations

import time

import pytest
from cluster_wait import wait_for

from chaos.cluster import lifecycle as cluster
from chaos.cluster.views import one_view_of, views

from chaos.net.docker import DockerNet
from node import history

pytestmark = pytest.mark.splitlab_cluster

NODES = ("n1", "n2", "n3")
COUNT = 500


def events(run, node, type_):
    return [e for e in history.read(run.run_dir / "events" / f"{node}.jsonl") if e["type"] == type_]


def one_view_of_all(run) -> bool:
    return one_view_of(run, NODES)


def delivered(run, node: str) -> int:
    return run.client(node).state()["layers"]["multicast"]["counters"].get("delivered", 0)


def test_nakack4_delivers_every_multicast_once_in_order_across_a_one_way_cut_and_views_merge(splitlab_up):
    run = splitlab_up(3, node_env={n: {"SPLITLAB_MULTICAST": "nakack4", "SPLITLAB_BCAST_SYNC": "tipc"}
                                       for n in NODES})
    wait_for(lambda: one_view_of_all(run), 15, "the nodes did not agree on one view before the workload")
    for node in NODES:
        run.client(node).multicast(count=COUNT, size=100, rate=100)   # 5 s of traffic from each node
    time.sleep(0.5)
    with DockerNet(run, verify=False) as net:  # the partition path production takes
        net.partition({"n2": {"n1"}})  # n2 stops hearing n1; n1 still hears n2
        wait_for(lambda: "n1" not in views(run)["n2"][1], 10, "n2 did not install a view without n1")
        split = views(run)
        assert "n2" in split["n1"][1], f"n1 should keep n2 in its view (asymmetric views): {split}"
        time.sleep(1.0)
        net.heal()
    wait_for(lambda: all(delivered(run, n) >= 2 * COUNT for n in NODES), 60,
             "not every node delivered the 1000 multicasts of the two others")
    wait_for(lambda: one_view_of_all(run), 15, "views did not merge after the heal")
    states = {n: run.client(n).state() for n in NODES}
    cluster.down(run.run_id)  # flushes every history
    sent = {n: [e["msg_id"] for e in events(run, n, "app_send") if e["kind"] == "multicast"] for n in NODES}
    for sender in NODES:
        assert len(sent[sender]) == COUNT, f"{sender} sent {len(sent[sender])}"
        for receiver in NODES:
            if receiver == sender:
                continue
            got = [e["msg_id"] for e in events(run, receiver, "app_deliver") if e["from"] == sender]
            assert got == sent[sender], (f"{receiver} from {sender}: {len(got)} delivered, {len(set(got))} distinct, "
                                         f"in order: {got == sorted(got, key=sent[sender].index)}")
    n2_views = [tuple(e["members"]) for e in events(run, "n2", "view")]
    assert any("n1" not in members for members in n2_views), "the cut should have changed n2's view"
    assert any(e for n in NODES for e in events(run, n, "merge")), "a merge should have joined the views"
    resent = [e for n in NODES for e in events(run, n, "data_tx") if e.get("resend")]
    assert resent, "the cut must have forced retransmissions, or the test did not cut anything"
    stale = [e for n in NODES for e in events(run, n, "xmit_req_rx") if e.get("missing")]
    assert not stale, f"requests for released messages (a stale link): {stale[:3]}"
    for node, state in states.items():
        windows = state["layers"]["multicast"]["windows"]
        assert {p: w["highest_delivered"] for p, w in windows.items()} == {p: COUNT for p in NODES if p != node}


def answers(run, node: str) -> bool:
    """Whether `node`'s control API answers (a restarted node needs a moment)."""
    from node.errors import EnvironmentProblem

    try:
        run.client(node).state()
    except EnvironmentProblem:
        return False
    return True


def test_a_restarted_node_is_heard_again_and_hears_again(splitlab_up):
    """n3 restarts (SIGKILL, start): its new life's seqnos start at 1 again, and the others learn of the restart
    from its datagrams' incarnation (`peer_restarted`). On a loaded machine the restart may outlast the silence
    threshold: n3 is excluded and merged back, and what n1 sent meanwhile is not for n3 (it skips it at the
    merge), so n1 sends only once every node holds one view of all after hearing n3's new life."""
    run = splitlab_up(3)
    wait_for(lambda: one_view_of_all(run), 15, "the nodes did not agree on one view before the workload")
    run.client("n3").multicast(count=50, size=100, rate=0)
    wait_for(lambda: delivered(run, "n1") >= 50 and delivered(run, "n2") >= 50, 15, "n3's first 50 multicasts")
    with DockerNet(run, seed=3, verify=False) as net:
        net.restart("n3")
    run.nodes = cluster.load(run.run_id).nodes
    wait_for(lambda: answers(run, "n3"), 15, "n3 answers again")
    wait_for(lambda: events(run, "n1", "peer_restarted") and one_view_of_all(run), 20,
             "n1 heard n3's new life and every node holds one view of all")
    run.client("n3").multicast(count=50, size=100, rate=0)
    run.client("n1").multicast(count=20, size=100, rate=0)
    wait_for(lambda: delivered(run, "n1") >= 100 and delivered(run, "n2") >= 120 and delivered(run, "n3") >= 20,
             20, "n3's second 50 multicasts at n1 and n2, and n1's 20 at the new n3")

    def from_n3(node: str) -> int:
        return sum(e["kind"] == "multicast" and e["from"] == "n3" for e in events(run, node, "app_deliver"))

    wait_for(lambda: from_n3("n1") >= 100 and from_n3("n2") >= 100, 5, "the deliveries in the histories (flushed)")
    time.sleep(1)  # a duplicate delivery would be recorded by now
    for node in ("n1", "n2"):
        restarted = events(run, node, "peer_restarted")
        assert [e["peer"] for e in restarted] == ["n3"], restarted
        assert from_n3(node) == 100
