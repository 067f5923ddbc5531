"""The real JGroups 2.12.2 (Debian's libjgroups-java) on real containers and real UDP: it keeps the node contract
as splitlab's own node does, a one-way cut shows in the real nodes' own traffic, and a message fault aimed at
UNICAST2's STABLE holds exactly those frames of JGroups' wire, counted by the shaper."""
from __future__ import annotations

import json
import time

import pytest
from cluster_wait import wait_for

from chaos.cluster import images, kinds
from chaos.contract import conformance
from chaos.faults.msgrules import MsgRule
from chaos.net.docker import DockerNet
from jgnode import wire as jgwire
from node import history

pytestmark = pytest.mark.splitlab_cluster
SETTLE_S = 2.5  # more than the nodes' 1.5 s silence threshold
FLUSH_S = 0.6  # more than the nodes' history flush interval (SPLITLAB_FLUSH_MS, 500 ms)
FAST_STABLE = {"SPLITLAB_JGROUPS_PROPS": "UNICAST2.stable_interval=300"}


def events(run, node: str) -> list[dict]:
    return history.read(run.run_dir / "events" / f"{node}.jsonl")


@pytest.mark.parametrize("kind", ["splitlab", "jgroups"])
def test_every_node_kind_keeps_the_node_contract(kind):
    items = conformance.check(kinds.kind(kind).built_image(), lambda _: None)
    failed = [(i.section, i.name, i.detail) for i in items if i.failed]
    assert failed == []
    assert len(items) >= 20  # every item was reached
    quiesce = next(i for i in items if i.name == conformance.QUIESCE_ITEM)  # optional, but both kinds offer it
    assert quiesce.status == "keeps", quiesce.detail


def test_an_image_that_is_no_node_lacks_the_contract_from_its_first_item():
    items = conformance.check(images.base_tag(), lambda _: None)  # Debian with python3: it exits at once
    assert [(i.section, i.status) for i in items] == [("environment", "lacks"), ("control API", "not reached")]


def test_a_one_way_cut_shows_in_the_real_nodes_own_traffic(splitlab_up):
    slow_suspicion = {"SPLITLAB_JGROUPS_PROPS": "FD_ALL.timeout=20000"}  # the cut, not a view change, is measured
    run = splitlab_up(3, kind="jgroups", node_env={n: slow_suspicion for n in ("n1", "n2", "n3")})
    with DockerNet(run) as net:
        net.partition({"n2": {"n1"}})  # n2 drops what n1 sends
        cut_ts = time.time()
        time.sleep(SETTLE_S)
        assert "n1" not in run.client("n2").hears()  # nothing of n1's reaches n2's JGroups ...
        assert "n2" in run.client("n1").hears() and "n3" in run.client("n2").hears()  # ... the rest flows
        n1 = run.client("n1")
        n1.unicast("n2", 20, rate=200)
        n1.unicast("n3", 20, rate=200)
        wait_for(lambda: sum(e["type"] == "app_deliver" and e["from"] == "n1" for e in events(run, "n3")) == 20,
                 what="n1's 20 unicasts at n3")

        def sent_to_n2() -> int:  # (the history reaches the disk every flush_ms: waited for, not read once)
            return sum(e["type"] == "data_tx" and e["to"] == "n2" and e["ts"] > cut_ts for e in events(run, "n1"))
        wait_for(lambda: sent_to_n2() >= 20, what="n1's 20 unicasts to n2 in n1's history")  # n1 did send them
        time.sleep(FLUSH_S)  # n2's lines of the same moments are on disk too
        late = [e for e in events(run, "n2") if e.get("from") == "n1" and e["ts"] > cut_ts + 0.2]
        assert late == []  # n2's history: no data, no delivery from n1 since the cut
        net.heal_all()
        wait_for(lambda: "n1" in run.client("n2").hears(), what="n2 hears n1 again")


def test_a_held_unicast2_stable_is_counted_by_the_shaper_on_jgroups_frames(splitlab_up):
    run = splitlab_up(2, kind="jgroups", node_env={"n1": FAST_STABLE, "n2": FAST_STABLE})
    code = jgwire.MESSAGE_TYPES["Unicast2Stable"]
    run.client("n1").unicast("n2", 30, rate=100)  # n2 then has something to declare stable to n1
    wait_for(lambda: any(e["type"] == "stable_rx" and e["from"] == "n2" for e in events(run, "n1")),
             what="a STABLE from n2 at n1")
    with DockerNet(run) as net:
        run.client("n1").unicast("n2", 400, rate=50)  # new seqnos at n2 all along: it keeps declaring them stable
        start_ts = time.time()
        net.msg_fault(MsgRule(type=code, src="n2", dst="n1", action="hold", ms=4000))
        stats = run.run_dir / "chaos" / "shaper-n2.json.stats"

        def held() -> int:
            return json.loads(stats.read_text()).get("msg_delayed", 0) if stats.exists() else 0
        wait_for(lambda: held() >= 1, what="a STABLE held by the shaper", poll_s=0.05)
        seen_ts = time.time()  # the hold began before this and lasts 4 s from its first STABLE (after start_ts)
        wait_for(lambda: held() >= 3, what="STABLEs held by the shaper")
        during = [e for e in events(run, "n1") if e["type"] == "stable_rx" and e["from"] == "n2"
                  and seen_ts + 0.2 < e["ts"] < start_ts + 3.8]
        assert during == []  # n1 saw none while they were held ...
        assert "n2" in run.client("n1").hears()  # ... while every other message of n2's passed
        count = held()
        wait_for(lambda: sum(e["type"] == "stable_rx" and e["from"] == "n2" and e["ts"] > start_ts + 3.8
                             for e in events(run, "n1")) >= count, what="the held STABLEs released at n1",
                 timeout_s=15)
