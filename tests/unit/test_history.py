"""The history writer: buffered, complete after close, and flushed by the node process on SIGTERM."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from node.errors import HistoryError
from node.history import HistoryWriter, expand, read

REPO = Path(__file__).resolve().parents[2]


def lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_buffered_until_threshold_then_written(tmp_path):
    path = tmp_path / "events" / "n1.jsonl"
    writer = HistoryWriter(path, "r1", "n1", buffer_lines=3, clock=lambda: 12.5)
    writer.emit("a", x=1)
    writer.emit("b")
    assert path.read_text() == ""  # still buffered
    writer.emit("c")
    assert [e["type"] for e in lines(path)] == ["a", "b", "c"]
    writer.emit("d")
    writer.close()
    events = lines(path)
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    assert events[0] == {"v": 1, "ts": 12.5, "seq": 1, "run": "r1", "node": "n1", "type": "a", "x": 1}


def _protocol_traffic():
    """What a receiver and a sender record: runs broken by a new connection, a resend without msg_id, a plain
    event in between, a field set that differs (nakack4's `resend`)."""
    events = []
    for seqno in range(1, 8):
        events.append(("data_rx", {"proto": "unicast3", "from": "n1", "seqno": seqno, "conn_id": 3,
                                   "first": seqno == 1, "action": "deliver" if seqno != 4 else "buffer"}))
        events.append(("app_deliver", {"msg_id": f"n1.5.{seqno}", "kind": "unicast", "from": "n1"}))
        if seqno == 5:
            events.append(("view", {"view_id": ["n1", "2"], "members": ["n1", "n2"]}))
            events.append(("data_tx", {"proto": "unicast3", "to": "n1", "seqno": 9, "conn_id": 1, "first": False,
                                       "resend": True, "size": 100}))
    events.append(("data_rx", {"proto": "unicast3", "from": "n3", "seqno": 1, "conn_id": 8, "first": True,
                               "action": "deliver"}))
    events.append(("data_rx", {"proto": "nakack4", "from": "n3", "seqno": 2, "conn_id": 0, "first": False,
                               "action": "deliver", "resend": False}))
    for seqno in range(10, 14):
        events.append(("app_send", {"msg_id": f"n2.6.{seqno}", "kind": "unicast", "to": "n1", "size": 100}))
        events.append(("data_tx", {"proto": "unicast3", "to": "n1", "seqno": seqno, "conn_id": 1, "first": False,
                                   "resend": False, "size": 100, "msg_id": f"n2.6.{seqno}"}))
    return events


@pytest.mark.parametrize("buffer_lines", [1, 5, 1000])
def test_runs_give_back_every_event_in_order(tmp_path, buffer_lines):
    """Events of one type that differ only in their varying fields share a line; reading gives back every event
    with its own ts and seq, in the order recorded, whatever the flushes cut."""
    path = tmp_path / "n2.jsonl"
    ticks = iter(range(1000))
    writer = HistoryWriter(path, "r1", "n2", buffer_lines=buffer_lines, clock=lambda: 100 + next(ticks) / 1000)
    recorded = _protocol_traffic()
    for type_, fields in recorded:
        writer.record(type_, dict(fields))
    writer.close()
    expected = [{"v": 1, "ts": 100 + i / 1000, "seq": i + 1, "run": "r1", "node": "n2", "type": type_, **fields}
                for i, (type_, fields) in enumerate(recorded)]
    assert read(path) == expected
    lines = path.read_text().splitlines()
    if buffer_lines == 1:  # a flush after every event: runs of one, plain lines
        assert len(lines) == len(recorded) and '"rows"' not in path.read_text()
    else:
        assert len(lines) < len(recorded) and sum('"rows"' in line for line in lines) >= 2
    if buffer_lines == 1000:
        # data_rx: the first (first=true) and a run of 6; app_deliver: a run of 7 (the view between does not cut
        # it); the view; the resend; n3's two (other fields, other names); the app_send and data_tx runs of 4
        assert len(lines) == 9


def test_without_runs_every_event_is_a_line_of_its_own(tmp_path):
    path = tmp_path / "n2.jsonl"
    with HistoryWriter(path, "r1", "n2", runs=False) as writer:
        for type_, fields in _protocol_traffic():
            writer.record(type_, dict(fields))
    assert len(path.read_text().splitlines()) == len(_protocol_traffic()) and '"rows"' not in path.read_text()
    assert [(e["type"], e["seq"]) for e in read(path)] == [(t, i) for i, (t, _) in enumerate(_protocol_traffic(), 1)]


def test_a_restarted_writer_appends_a_stretch_of_its_own(tmp_path):
    path = tmp_path / "n2.jsonl"
    for boot in (1, 2):
        with HistoryWriter(path, "r1", "n2", clock=lambda: 5.0) as writer:
            for n in range(3):
                writer.emit("app_deliver", msg_id=f"n1.{boot}.{n}", kind="unicast", **{"from": "n1"})
            writer.emit("node_stop", reason="signal")
    assert [(e["seq"], e.get("msg_id")) for e in read(path)] == [
        (1, "n1.1.0"), (2, "n1.1.1"), (3, "n1.1.2"), (4, None), (1, "n1.2.0"), (2, "n1.2.1"), (3, "n1.2.2"), (4, None)]


def test_a_line_still_being_written_is_left_for_the_next_read(tmp_path):
    path = tmp_path / "n1.jsonl"
    with HistoryWriter(path, "r1", "n1", clock=lambda: 5.0) as writer:
        writer.emit("app_send", msg_id="n1.1", kind="unicast", to="n2")
    whole = path.read_bytes()
    with path.open("ab") as half_flushed:
        half_flushed.write(whole[:len(whole) // 2])  # a writer's flush, seen half-way
    assert [e["msg_id"] for e in read(path)] == ["n1.1"]
    with path.open("ab") as rest:
        rest.write(whole[len(whole) // 2:])
    assert [e["msg_id"] for e in read(path)] == ["n1.1", "n1.1"]


@pytest.mark.parametrize("rows, why", [
    ({"ts": [1.0, 2.0], "seq": [1], "msg_id": ["a", "b"]}, "different lengths"),
    ({"ts": [1.0], "msg_id": ["a"]}, "lacks 'ts' or 'seq'"),
    ({"ts": [], "seq": [], "msg_id": []}, "empty"),
    ({"ts": [1.0], "seq": [1], "msg_id": ["a"], "from": ["n3"]}, "both in 'rows' and in its line"),
    ([1, 2], "not an object of lists"),
    ({"ts": 1.0, "seq": 1}, "not an object of lists"),
])
def test_a_bad_run_line_is_refused_with_its_reason(rows, why):
    line = {"v": 1, "ts": 1.0, "seq": 1, "run": "r", "node": "n2", "type": "app_deliver", "kind": "unicast",
            "msg_id": "b", "rows": rows}
    with pytest.raises(HistoryError, match=why):
        expand(line)


def test_a_run_lines_unknown_lists_are_ignored():
    line = {"v": 1, "ts": 1.0, "seq": 1, "run": "r", "node": "n2", "type": "app_deliver", "kind": "unicast",
            "rows": {"ts": [1.0, 2.0], "seq": [1, 2], "msg_id": ["a", "b"], "kind": ["x", "y"], "later": [1]}}
    assert [(e["seq"], e["msg_id"], e["kind"]) for e in expand(line)] == [(1, "a", "unicast"), (2, "b", "unicast")]


def test_reserved_fields_and_closed_writer(tmp_path):
    writer = HistoryWriter(tmp_path / "h.jsonl", "r1", "n1")
    with pytest.raises(ValueError):
        writer.emit("x", node="n2")
    with pytest.raises(ValueError):  # a run type's first event of a shape is checked too
        writer.emit("app_deliver", msg_id="a", kind="unicast", rows=[])
    writer.emit("app_deliver", msg_id="a", kind="unicast")
    writer.close()
    with pytest.raises(HistoryError):
        writer.emit("late")


def test_an_ended_history_drops_and_counts_what_comes_after_its_last_event(tmp_path):
    writer = HistoryWriter(tmp_path / "h.jsonl", "r1", "n1")
    writer.emit("app_deliver", msg_id="a", kind="unicast", **{"from": "n2"})
    writer.end("node_stop", {"reason": "quiesce"})
    assert writer.ended and writer.closed
    writer.emit("app_deliver", msg_id="b", kind="unicast", **{"from": "n2"})
    writer.end("node_stop", {"reason": "signal"})  # the node's own stop, later: not written either
    writer.close()
    assert writer.unrecorded == 2
    assert [(e["type"], e.get("reason")) for e in read(tmp_path / "h.jsonl")] == [("app_deliver", None),
                                                                                ("node_stop", "quiesce")]


def test_unwritable_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(HistoryError) as info:
        HistoryWriter(blocker / "events" / "n1.jsonl", "r1", "n1")
    assert "cannot open history file" in str(info.value)


def _free_port(kind=socket.SOCK_DGRAM):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_pair(run_dir: Path, run_id: str) -> tuple[dict[str, subprocess.Popen], dict[str, str]]:
    """Two real node processes n1, n2 on loopback, writing their histories under `run_dir`, once n1 hears n2:
    the processes and each one's control URL."""
    ports = {"n1": _free_port(), "n2": _free_port()}
    control = {"n1": _free_port(socket.SOCK_STREAM), "n2": _free_port(socket.SOCK_STREAM)}
    procs = {}
    for name in ("n1", "n2"):
        env = {**os.environ, "PYTHONPATH": str(REPO), "SPLITLAB_NODE": name, "SPLITLAB_RUN": run_id,
               "SPLITLAB_MEMBERS": "n1,n2", "SPLITLAB_TOKEN": "tok", "SPLITLAB_RUN_DIR": str(run_dir),
               "SPLITLAB_ADDRESSES": ",".join(f"{n}=127.0.0.1:{p}" for n, p in ports.items()),
               "SPLITLAB_CONTROL_BIND": f"127.0.0.1:{control[name]}",
               "SPLITLAB_FLUSH_MS": "60000"}  # no periodic flush: only SIGTERM can write the tail
        procs[name] = subprocess.Popen([sys.executable, "-m", "node"], env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
    urls = {name: f"http://127.0.0.1:{port}" for name, port in control.items()}
    deadline = time.monotonic() + 15
    try:
        while True:
            try:
                state = requests.get(urls["n1"] + "/state", headers=HEADERS, timeout=1).json()
                if state["layers"]["liveness"]["n2"]["heard"]:
                    return procs, urls
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "n1 never heard n2"
            time.sleep(0.1)
    except BaseException:
        _stop(procs)
        raise


def _stop(procs: dict[str, subprocess.Popen]) -> dict[str, str]:
    """SIGTERM every process at once; their outputs."""
    for proc in procs.values():
        proc.send_signal(signal.SIGTERM)
    return {name: proc.communicate(timeout=15)[0] for name, proc in procs.items()}


HEADERS = {"Authorization": "Bearer tok"}


def test_node_process_flushes_everything_on_sigterm(tmp_path):
    """Two real node processes on loopback; the ping workload fills n1's buffer; SIGTERM loses nothing."""
    procs, urls = _start_pair(tmp_path, "r-sigterm")
    try:
        url = urls["n1"]
        headers = HEADERS
        deadline = time.monotonic() + 15
        assert requests.get(url + "/state", timeout=1).status_code == 401
        assert requests.get(url + "/state", headers={"Authorization": "Bearer wrong"}, timeout=1).status_code == 401
        bad = requests.post(url + "/workload/ping", headers=headers, json={"to": "n9"}, timeout=1)
        assert bad.status_code == 400 and "'to' must be another member" in bad.json()["error"]
        count = 200
        assert requests.post(url + "/workload/ping", headers=headers,
                             json={"to": "n2", "count": count, "interval_ms": 0}, timeout=1).status_code == 202
        while requests.get(url + "/state", headers=headers, timeout=1).json()["layers"]["ping"]["n2"]["answered"] < count:
            assert time.monotonic() < deadline + 15, "pings not answered"
            time.sleep(0.1)
    finally:
        outputs = _stop(procs)
    assert procs["n1"].returncode == 0, outputs["n1"]
    text = (tmp_path / "events" / "n1.jsonl").read_text()
    assert text.endswith("\n")
    events = [json.loads(line) for line in text.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[0] == "node_start" and types[-1] == "node_stop"
    assert types.count("ping_tx") == count and types.count("pong_rx") == count
    assert "peer_heard" in types


def test_a_quiesced_node_records_nothing_of_a_peer_that_stops_after(tmp_path):
    """`POST /quiesce` on both nodes, then n2 stops and n1 goes on for longer than it takes to find n2 silent,
    then n1 stops: n1's history ends at its `node_stop` of the quiesce, with nothing of n2's stop (no
    `peer_silent`), and its SIGTERM writes no second `node_stop`."""
    procs, urls = _start_pair(tmp_path, "r-quiesce")
    try:
        for name in ("n1", "n2"):
            answer = requests.post(urls[name] + "/quiesce", headers=HEADERS, timeout=5)
            assert answer.status_code == 200 and answer.json() == {"quiesced": True, "node": name}
        out_n2 = _stop({"n2": procs["n2"]})["n2"]
        deadline = time.monotonic() + 15

        def n1_hears_n2() -> bool:  # until n1's liveness finds n2 silent (what it would record)
            return requests.get(urls["n1"] + "/state", headers=HEADERS, timeout=1).json()["layers"]["liveness"][
                "n2"]["heard"]
        while n1_hears_n2():
            assert time.monotonic() < deadline, "n1 still hears n2 15 s after n2 stopped"
            time.sleep(0.1)
    finally:
        outputs = _stop(procs)
    assert procs["n1"].returncode == 0 and procs["n2"].returncode == 0, (outputs, out_n2)
    for name in ("n1", "n2"):
        events = read(tmp_path / "events" / f"{name}.jsonl")
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        stops = [e for e in events if e["type"] == "node_stop"]
        assert stops == [events[-1]] and stops[0]["reason"] == "quiesce", (name, events[-3:])
    assert not [e for e in read(tmp_path / "events" / "n1.jsonl") if e["type"] == "peer_silent"]
