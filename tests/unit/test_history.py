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
from node.history import HistoryWriter

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


def test_reserved_fields_and_closed_writer(tmp_path):
    writer = HistoryWriter(tmp_path / "h.jsonl", "r1", "n1")
    with pytest.raises(ValueError):
        writer.emit("x", node="n2")
    writer.close()
    with pytest.raises(HistoryError):
        writer.emit("late")


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


def test_node_process_flushes_everything_on_sigterm(tmp_path):
    """Two real node processes on loopback; the ping workload fills n1's buffer; SIGTERM loses nothing."""
    ports = {"n1": _free_port(), "n2": _free_port()}
    control = {"n1": _free_port(socket.SOCK_STREAM), "n2": _free_port(socket.SOCK_STREAM)}
    procs = {}
    for name in ("n1", "n2"):
        env = {**os.environ, "PYTHONPATH": str(REPO), "SPLITLAB_NODE": name, "SPLITLAB_RUN": "r-sigterm",
               "SPLITLAB_MEMBERS": "n1,n2", "SPLITLAB_TOKEN": "tok", "SPLITLAB_RUN_DIR": str(tmp_path),
               "SPLITLAB_ADDRESSES": ",".join(f"{n}=127.0.0.1:{p}" for n, p in ports.items()),
               "SPLITLAB_CONTROL_BIND": f"127.0.0.1:{control[name]}",
               "SPLITLAB_FLUSH_MS": "60000"}  # no periodic flush: only SIGTERM can write the tail
        procs[name] = subprocess.Popen([sys.executable, "-m", "node"], env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{control['n1']}"
        headers = {"Authorization": "Bearer tok"}
        deadline = time.monotonic() + 15
        while True:
            try:
                state = requests.get(url + "/state", headers=headers, timeout=1).json()
                if state["layers"]["liveness"]["n2"]["heard"]:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "n1 never heard n2"
            time.sleep(0.1)
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
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        outputs = {name: proc.communicate(timeout=15)[0] for name, proc in procs.items()}
    assert procs["n1"].returncode == 0, outputs["n1"]
    text = (tmp_path / "events" / "n1.jsonl").read_text()
    assert text.endswith("\n")
    events = [json.loads(line) for line in text.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[0] == "node_start" and types[-1] == "node_stop"
    assert types.count("ping_tx") == count and types.count("pong_rx") == count
    assert "peer_heard" in types
