"""Live metrics: a node's `/metrics` (node/metrics.py) served by the real control API over loopback nodes and read
back with prometheus_client's own parser; the controller's fault matrix (chaos/live/faultmatrix.py) from a run's
files, also torn ones, served over HTTP; and `splitlab top`'s frames (chaos/live/top.py), also for nodes that do
not answer or answer garbage. No Docker."""
from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Awaitable

import pytest
import requests
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from chaos.cli.main import main as splitlab
from chaos.live import faultmatrix, nodes, top
from chaos.live.faultmatrix import FaultLink, Matrix
from node import metrics
from node.control import make_handler
from node.errors import EnvironmentProblem, UsageError
from node.httpserver import HttpServer
from node.wire import Heartbeat, cluster_id_of, encode_datagram
from test_runtime_receive import RUN, start_nodes, stop_nodes, until

AUTH = {"Authorization": "Bearer t"}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, through prometheus_client's parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


# --- the node ---------------------------------------------------------------------------------------------------

@pytest.mark.timeout(60)
async def test_node_metrics_count_a_workload_and_a_drop_through_the_control_api(tmp_path):
    runtimes = await start_nodes(tmp_path)
    n1, n2 = runtimes["n1"], runtimes["n2"]
    servers = [HttpServer(make_handler(n1, "t")), HttpServer(make_handler(n2, "t"))]
    try:
        for server in servers:
            await server.start("127.0.0.1", 0)
        url1, url2 = (f"http://127.0.0.1:{server.port}" for server in servers)

        def call(method: str, url: str, **kwargs) -> Awaitable[requests.Response]:  # off the serving loop
            return asyncio.to_thread(requests.request, method, url, timeout=5, **kwargs)
        assert (await call("GET", url1 + "/metrics")).status_code == 401  # the token guards it like every route
        resp = await call("POST", url1 + "/workload/unicast", headers=AUTH,
                          json={"to": "n2", "count": 40, "size": 64, "rate": 0})
        assert resp.status_code == 202
        stranger = encode_datagram(cluster_id_of(RUN), "mallory", [Heartbeat(1)], incarnation=n1.boot)
        n2.datagram_received(stranger, ("127.0.0.1", 1))
        await until(lambda: n2.counters["delivered"] >= 40)
        resp = await call("GET", url1 + "/metrics", headers=AUTH)
        assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/plain")
        m1 = samples(resp.text)
        m2 = samples((await call("GET", url2 + "/metrics", headers=AUTH)).text)
    finally:
        for server in servers:
            await server.close()
        await stop_nodes(runtimes)
    assert [dict(labels) for name, labels in m1 if name == "splitlab_node_info"] == [
        {"node": "n1", "run": RUN, "unicast": "unicast3", "membership": "none", "multicast": "none"}]
    assert m1[("splitlab_node_app_sent_messages_total", (("kind", "unicast"),))] == 40
    assert m1[("splitlab_unicast_sent_messages_total", (("peer", "n2"),))] == 40
    assert m1[("splitlab_node_incarnation", ())] == n1.boot
    assert m2[("splitlab_unicast_delivered_messages_total", (("peer", "n1"),))] == 40
    assert m2[("splitlab_node_app_delivered_messages_total", ())] == 40
    assert m2[("splitlab_node_dropped_datagrams_total", (("reason", "unknown-sender"),))] == 1
    assert m2[("splitlab_node_datagrams_received_total", ())] >= 1
    assert ("process_resident_memory_bytes", ()) in m2


def test_node_families_map_views_windows_drops_and_multicast_per_sender():
    state = {
        "node": "n2", "run": "r", "boot": 1700000000123,
        "view": {"view_id": ["n1", 4], "members": ["n1", "n2", "n3"]},
        "layers": {
            "liveness": {"n1": {"heard": True}, "n3": {"heard": False}},
            "unicast": {"proto": "unicast2", "counters": {"from_stranger": 2}, "peers": {
                "n1": {"send": {"unacked": 25, "capacity": 100, "blocked": False,
                                "counters": {"sent": 30, "resent": 4}},
                       "recv": {"buffered": 3, "missing": 2,
                                "counters": {"delivered": 7, "xmit_reqs": 5, "below_window": 6}}}}},
            "multicast": {"proto": "nakack4", "counters": {"sent": 9, "resent": 1},
                          "send": {"unacked": 9, "capacity": 16, "blocked": True},
                          "windows": {"n3": {"buffered": 1, "missing": 4,
                                             "counters": {"delivered": 11, "xmit_reqs": 2, "duplicate": 3}}}},
        },
        "counters": {"delivered": 18, "datagrams_sent": 50, "received_before_start": 2, "send_errors": 1},
        "dropped": {"old-incarnation": 5},
        "workloads": [{"kind": "unicast", "sent": 20}, {"kind": "unicast", "sent": 10},
                      {"kind": "multicast", "sent": 9}],
    }
    reg = metrics.registry(lambda: state)
    text, content_type = metrics.exposition(reg)
    got = samples(text.decode())
    assert content_type.startswith("text/plain")
    assert got[("splitlab_node_view_id", (("coordinator", "n1"),))] == 4
    assert got[("splitlab_node_view_members", ())] == 3
    assert got[("splitlab_node_peer_heard", (("peer", "n3"),))] == 0
    assert got[("splitlab_node_app_sent_messages_total", (("kind", "unicast"),))] == 30
    assert got[("splitlab_node_dropped_datagrams_total", (("reason", "before-start"),))] == 2
    assert got[("splitlab_node_dropped_datagrams_total", (("reason", "old-incarnation"),))] == 5
    assert got[("splitlab_node_counter_total", (("name", "send_errors"),))] == 1
    assert ("splitlab_node_counter_total", (("name", "delivered"),)) not in got  # it has a family of its own
    assert got[("splitlab_unicast_retransmitted_messages_total", (("peer", "n1"),))] == 4
    assert got[("splitlab_unicast_xmit_requests_sent_total", (("peer", "n1"),))] == 5
    assert got[("splitlab_unicast_dropped_messages_total", (("peer", "n1"), ("reason", "below_window")))] == 6
    assert got[("splitlab_unicast_send_window_unacked_messages", (("peer", "n1"),))] == 25
    assert got[("splitlab_multicast_send_window_blocked", ())] == 1
    assert got[("splitlab_multicast_delivered_messages_total", (("sender", "n3"),))] == 11
    assert got[("splitlab_multicast_dropped_messages_total", (("reason", "duplicate"), ("sender", "n3")))] == 3
    assert got[("splitlab_layer_counter_total", (("layer", "unicast"), ("name", "from_stranger")))] == 2
    assert got[("splitlab_layer_counter_total", (("layer", "multicast"), ("name", "sent")))] == 9


def test_a_node_without_a_view_or_layers_still_answers():
    text, _ = metrics.exposition(metrics.registry(lambda: {"node": "n1", "run": "r", "boot": 1}))
    got = samples(text.decode())
    assert got[("splitlab_node_incarnation", ())] == 1
    assert not any(name == "splitlab_node_view_id" for name, _ in got)


# --- the fault matrix -------------------------------------------------------------------------------------------

def write_run(run_dir: Path, active: dict | str, history: list[dict | str]) -> Path:
    (run_dir / "chaos").mkdir(parents=True)
    (run_dir / "events").mkdir()
    (run_dir / "chaos" / "state.json").write_text(active if isinstance(active, str) else json.dumps({"active": active}))
    (run_dir / "events" / "controller.jsonl").write_text(
        "".join((h if isinstance(h, str) else json.dumps(h)) + "\n" for h in history))
    return run_dir


ACTIVE = {
    "partition-1": {"kind": "partition", "detail": {"grudge": {"n2": ["n1", "n3"]}}, "applied_ts": 100.0},
    "slow-2": {"kind": "slow", "detail": {"links": {"n1->n3": {"delay_ms": 20, "jitter_ms": 5}},
                                          "backends": ["nfqueue"]}, "applied_ts": 101.0},
    "msg_fault-3": {"kind": "msg_fault", "detail": {"type": 2, "src": "n3", "dst": "n1", "action": "drop-first",
                                                    "n": 3}, "applied_ts": 102.0},
    "pause-4": {"kind": "pause", "detail": {"node": "n3", "method": "docker"}, "applied_ts": 103.0},
}
HISTORY = [{"type": "fault_start", "fault_id": "partition-1", "applied_ts": 100.0, "effective_ts": 100.25},
           {"type": "fault_start", "fault_id": "slow-2", "applied_ts": 101.0, "effective_ts": None}]


def test_the_matrix_has_each_link_of_each_active_fault_and_only_probed_ones_are_verified(tmp_path):
    matrix = faultmatrix.read_matrix(write_run(tmp_path, ACTIVE, HISTORY))
    assert matrix.problems == []
    assert [(l.fault_id, l.src, l.dst, l.verified) for l in matrix.links] == [
        ("partition-1", "n1", "n2", True), ("partition-1", "n3", "n2", True), ("slow-2", "n1", "n3", False),
        ("msg_fault-3", "n3", "n1", False), ("pause-4", "n3", "*", False)]
    details = {l.fault_id: l.detail for l in matrix.links}
    assert details["slow-2"] == "delay_ms=20 jitter_ms=5 (nfqueue)"
    assert details["msg_fault-3"].startswith("drop-first:3 ") and "type" not in details["msg_fault-3"]
    assert details["pause-4"] == "pause (docker)"


def test_no_state_file_means_no_fault(tmp_path):
    assert faultmatrix.read_matrix(tmp_path) == Matrix()


@pytest.mark.parametrize("state, history, fragment", [
    ('{"active": {"partition-1": ', HISTORY, "state.json"),
    ('["not", "a", "state"]', HISTORY, "state.json"),
    (ACTIVE, ["{torn", "[]", *HISTORY], "2 unreadable line(s)"),
    ({**ACTIVE, "slow-9": {"kind": "slow", "detail": {"links": {"n1n2": {}}}, "applied_ts": 5}}, HISTORY, "slow-9"),
    ({**ACTIVE, "kill-9": {"kind": "kill"}}, HISTORY, "kill-9"),
], ids=["torn state", "foreign state", "garbage history lines", "bad link", "no detail"])
def test_what_cannot_be_read_is_a_problem_of_the_matrix_never_an_exception(tmp_path, state, history, fragment):
    matrix = faultmatrix.read_matrix(write_run(tmp_path, state, history))
    assert any(fragment in p for p in matrix.problems), matrix.problems
    got = samples(generate_latest(faultmatrix.registry(tmp_path)).decode())
    assert got[("splitlab_fault_matrix_readable", ())] == 0
    if isinstance(state, dict):  # the readable faults are still there
        assert {l.fault_id for l in matrix.links} >= set(ACTIVE)


def test_the_fault_matrix_is_served_over_http_in_the_prometheus_format(tmp_path):
    server = faultmatrix.serve(write_run(tmp_path, ACTIVE, HISTORY), 0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as resp:
            got = samples(resp.read().decode())
    finally:
        server.shutdown()
    key = (("detail", "cut"), ("dst", "n2"), ("fault_id", "partition-1"), ("kind", "partition"), ("src", "n1"))
    assert got[("splitlab_fault_active", key)] == 1
    assert got[("splitlab_fault_verified", (("fault_id", "partition-1"), ("kind", "partition")))] == 1
    assert got[("splitlab_fault_verified", (("fault_id", "slow-2"), ("kind", "slow")))] == 0
    assert got[("splitlab_fault_since_timestamp_seconds", (("fault_id", "pause-4"), ("kind", "pause")))] == 103.0
    assert got[("splitlab_fault_effective_timestamp_seconds",
                (("fault_id", "partition-1"), ("kind", "partition")))] == 100.25
    assert got[("splitlab_fault_matrix_readable", ())] == 1


# --- splitlab top -----------------------------------------------------------------------------------------------

def node_text(name: str, sent: int, fill_unacked: int = 0) -> str:
    state = {"node": name, "run": "r", "boot": 42, "view": {"view_id": ["n1", 3], "members": ["n1", "n2"]},
             "layers": {"liveness": {"n2" if name == "n1" else "n1": {"heard": True}},
                        "unicast": {"proto": "unicast3", "peers": {"n9": {
                            "send": {"unacked": fill_unacked, "capacity": 200, "blocked": False,
                                     "counters": {"sent": sent, "resent": 7}}, "recv": None}}}},
             "counters": {"delivered": 12}, "dropped": {"unknown-sender": 3},
             "workloads": [{"kind": "unicast", "sent": sent}]}
    return metrics.exposition(metrics.registry(lambda: state))[0].decode()


def shown(renderable) -> str:
    console = Console(record=True, width=220, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_a_frame_shows_each_node_its_error_and_the_fault_matrix():
    frame = top.Frame("r", 110.0, [nodes.parse("n1", node_text("n1", 31, fill_unacked=50)),
                                   nodes.parse("n2", "<html>proxy error</html>"),
                                   nodes.NodeMetrics("n3", error="node n3: control API not reachable")],
                      faultmatrix.Matrix([FaultLink("partition-1", "partition", "n1", "n2", "cut", 100.0, 100.02),
                                          FaultLink("pause-4", "pause", "n3", "*", "pause (docker)", 103.0, None)]))
    text = shown(top.render(frame))
    row = next(line for line in text.splitlines() if line.startswith("│ n1 "))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells == ["n1", "42", "n1#3 (2)", "1/1", "31", "12", "-", "7", "3 (unknown-sender 3)", "25.0 %", "ok"]
    assert "unreadable metrics" in next(line for line in text.splitlines() if line.startswith("│ n2 "))
    assert "control API not reachable" in text
    assert "n1 -> n2" in text and "yes (+20 ms)" in text and "10 s ago" in text
    assert "n3 (node)" in text and "pause (docker)" in text


def test_metrics_without_splitlab_families_or_garbage_are_errors_not_exceptions():
    assert nodes.parse("n1", "# HELP x y\nx 1\n").error == "no splitlab metrics in the answer"
    assert nodes.parse("n1", 'a{b="c} 1').error.startswith("unreadable metrics")
    assert nodes.parse("n1", node_text("n1", 1)).error is None


def test_a_node_that_does_not_answer_is_a_row_with_its_error():
    class Down:
        name = "n4"

        def metrics(self) -> str:
            raise EnvironmentProblem("node n4: control API at http://x not reachable: timed out\nmore", hint="h")

    [got] = nodes.scrape([Down()])
    assert (got.node, got.error) == ("n4", "node n4: control API at http://x not reachable: timed out")


class FakeCluster:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir


def test_a_run_that_goes_away_is_shown_with_its_last_nodes_and_once_prints_one_frame(tmp_path):
    loads = iter([FakeCluster(write_run(tmp_path, ACTIVE, HISTORY))])

    def load(run_id: str):
        for cluster in loads:
            return cluster
        raise UsageError(f"no run {run_id!r}", hint="see 'splitlab ps'")

    watcher = top.Watcher("r1", load=load, scrape=lambda cluster: [nodes.parse("n1", node_text("n1", 5))],
                          reload_s=0)
    console = Console(record=True, width=220, color_system=None)
    assert top.watch(watcher, console, once=True) == 0
    text = console.export_text()
    assert text.count("splitlab top  run r1") == 1
    assert "! run r1: no run 'r1'" in text and "│ n1 " in text and "partition-1" in text


def test_top_of_a_missing_run_is_bad_input(monkeypatch, capsys):
    from chaos.cluster import lifecycle

    def no_run(run_id):
        raise UsageError("no splitlab run exists", hint="start one with 'splitlab up'")

    monkeypatch.setattr(lifecycle, "resolve_run_id", no_run)
    assert splitlab(["top", "--once"]) == 2
    assert "splitlab top: error: no splitlab run exists" in capsys.readouterr().err
