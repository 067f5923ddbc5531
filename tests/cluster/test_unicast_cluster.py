"""Reliable unicast on real containers: 1,000 messages n1 -> n2 under a one-way cut and heal are all
delivered once and in order under `unicast3` (the history is the witness)."""
from __future__ import annotations

import time

import pytest

from chaos.cluster import lifecycle as cluster

from chaos.net.docker import DockerNet
from node import history

pytestmark = pytest.mark.splitlab_cluster


def events(run, node, type_):
    return [e for e in history.read(run.run_dir / "events" / f"{node}.jsonl") if e["type"] == type_]


def test_unicast3_delivers_1000_messages_once_in_order_across_a_one_way_cut(splitlab_up):
    run = splitlab_up(3, node_env={n: {"SPLITLAB_UNICAST": "unicast3"} for n in ("n1", "n2", "n3")})
    run.client("n1").unicast("n2", count=1000, size=100, rate=400)  # 2.5 s of traffic
    time.sleep(0.5)
    with DockerNet(run, verify=False) as net:  # the partition path production takes
        net.partition({"n2": {"n1"}})
        time.sleep(1.5)  # messages sent now are lost and must be retransmitted
        net.heal()
    deadline = time.monotonic() + 30
    while len([e for e in events(run, "n2", "app_deliver") if e["from"] == "n1"]) < 1000:
        assert time.monotonic() < deadline, "n2 did not deliver 1000 messages within 30 s of the heal"
        time.sleep(0.5)
    cluster.down(run.run_id)  # flushes every history
    sent = [e["msg_id"] for e in events(run, "n1", "app_send") if e["to"] == "n2"]
    delivered = [e["msg_id"] for e in events(run, "n2", "app_deliver") if e["from"] == "n1"]
    assert len(sent) == 1000
    assert delivered == sent  # exactly once, in order
    resent = [e for e in events(run, "n1", "data_tx") if e.get("resend")]
    assert resent, "the cut must have forced retransmissions, or the test did not cut anything"
