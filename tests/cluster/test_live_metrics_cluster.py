"""Live metrics on real containers: after a workload, each node's `/metrics` read over the control network parses
with prometheus_client's own parser and counts exactly what was sent and delivered; `splitlab top --once` then
shows both nodes and a one-way cut, verified by the probes. One 2-node run."""
from __future__ import annotations

import cluster_wait
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chaos.cli.main import main as splitlab

pytestmark = pytest.mark.splitlab_cluster
UNICASTS, MULTICASTS = 300, 100


def scrape(cluster, node: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = cluster.client(node).metrics()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_real_nodes_metrics_count_the_workload_and_top_shows_a_verified_cut(splitlab_net, capsys):
    cluster, net = splitlab_net(2, seed=5)
    n1 = cluster.client("n1")
    before = scrape(cluster, "n2")[("splitlab_node_app_delivered_messages_total", ())]
    n1.unicast("n2", count=UNICASTS, size=100)
    n1.multicast(count=MULTICASTS, size=100)
    cluster_wait.wait_for(
        lambda: scrape(cluster, "n2")[("splitlab_node_app_delivered_messages_total", ())] >= before + UNICASTS
        + MULTICASTS, timeout_s=15, what="n2 delivering the workload")
    m1, m2 = scrape(cluster, "n1"), scrape(cluster, "n2")
    assert m1[("splitlab_node_app_sent_messages_total", (("kind", "unicast"),))] == UNICASTS
    assert m1[("splitlab_node_app_sent_messages_total", (("kind", "multicast"),))] == MULTICASTS
    assert m1[("splitlab_unicast_sent_messages_total", (("peer", "n2"),))] == UNICASTS
    assert m1[("splitlab_multicast_sent_messages_total", ())] == MULTICASTS
    assert m2[("splitlab_unicast_delivered_messages_total", (("peer", "n1"),))] == UNICASTS
    assert m2[("splitlab_multicast_delivered_messages_total", (("sender", "n1"),))] == MULTICASTS
    assert m2[("splitlab_node_incarnation", ())] == cluster.client("n2").health()["boot"]
    assert m2[("splitlab_node_peer_heard", (("peer", "n1"),))] == 1
    assert any(name == "splitlab_node_view_id" for name, _ in m2)
    assert m2[("splitlab_node_datagrams_received_total", ())] > 0

    net.partition("n2<-n1")  # verified: the probes time when it took effect
    assert splitlab(["top", "--once", "--run-id", cluster.run_id]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.startswith("│ n")}
    assert set(rows) == {"n1", "n2"} and all(row.rstrip(" │").endswith("ok") for row in rows.values()), out
    cut = next(line for line in out.splitlines() if "n1 -> n2" in line)
    assert "partition" in cut and "yes (+" in cut, out
