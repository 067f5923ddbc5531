"""Three real node processes on loopback running membership and NAKACK4: the multicast workload of the control
API delivers every message to every other node once and in order (checked in the histories), a small window
makes the workloads wait (blocked time in /state) without stopping the nodes, and the state shows the windows
and the view. No Docker, no root."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from node import history

REPO = Path(__file__).resolve().parents[2]
NODES = ("n1", "n2", "n3")
COUNT = 300


def _free_port(kind: int = socket.SOCK_DGRAM) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _events(run_dir: Path, node: str) -> list[dict]:
    return history.read(run_dir / "events" / f"{node}.jsonl")


def test_multicast_workloads_deliver_everything_once_in_order_and_block_on_a_small_window(tmp_path) -> None:
    ports = {n: _free_port() for n in NODES}
    control = {n: _free_port(socket.SOCK_STREAM) for n in NODES}
    procs = {}
    for name in NODES:
        env = {**os.environ, "PYTHONPATH": str(REPO), "SPLITLAB_NODE": name, "SPLITLAB_RUN": "r-mcast",
               "SPLITLAB_MEMBERS": ",".join(NODES), "SPLITLAB_TOKEN": "tok", "SPLITLAB_RUN_DIR": str(tmp_path),
               "SPLITLAB_ADDRESSES": ",".join(f"{n}=127.0.0.1:{p}" for n, p in ports.items()),
               "SPLITLAB_CONTROL_BIND": f"127.0.0.1:{control[name]}",
               "SPLITLAB_NAKACK4_CAPACITY": "16", "SPLITLAB_NAKACK4_ACK_THRESHOLD": "8"}
        procs[name] = subprocess.Popen([sys.executable, "-m", "node"], env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
    headers = {"Authorization": "Bearer tok"}
    urls = {n: f"http://127.0.0.1:{control[n]}" for n in NODES}

    def state(node: str) -> dict:
        return requests.get(urls[node] + "/state", headers=headers, timeout=2).json()

    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if all(all(rec["heard"] for rec in state(n)["layers"]["liveness"].values()) for n in NODES):
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "nodes did not hear each other"
            time.sleep(0.1)
        while len({json.dumps(state(n)["view"]) for n in NODES}) != 1:  # a late starter is merged in first
            assert time.monotonic() < deadline + 10, {n: state(n)["view"] for n in NODES}
            time.sleep(0.1)
        bad = requests.post(urls["n1"] + "/workload/multicast", headers=headers, json={"to": "n2"}, timeout=2)
        assert bad.status_code == 400 and "unknown field" in bad.json()["error"]
        for node in NODES:
            answer = requests.post(urls[node] + "/workload/multicast", headers=headers,
                                   json={"count": COUNT, "size": 64, "rate": 0}, timeout=2)
            assert answer.status_code == 202
        deadline = time.monotonic() + 30
        while not all(state(n)["layers"]["multicast"]["counters"].get("delivered", 0) >= 2 * COUNT for n in NODES):
            assert time.monotonic() < deadline, {n: state(n)["layers"]["multicast"]["counters"] for n in NODES}
            time.sleep(0.2)
        final = {n: state(n) for n in NODES}
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        outputs = {name: proc.communicate(timeout=15)[0] for name, proc in procs.items()}
    for name, proc in procs.items():
        assert proc.returncode == 0, outputs[name]
    for node in NODES:
        layer = final[node]["layers"]["multicast"]
        assert final[node]["view"] == final["n1"]["view"] and final[node]["view"]["members"] == list(NODES)
        assert set(layer["windows"]) == set(NODES) - {node}
        assert all(w["highest_delivered"] == COUNT for w in layer["windows"].values())
        workload = final[node]["workloads"][0]
        assert workload["done"] and workload["sent"] == COUNT and workload["error"] is None
        assert workload["blocked_count"] > 0 and layer["send"]["blocked_count"] > 0  # the window of 16 was full
    sent = {n: [e["msg_id"] for e in _events(tmp_path, n) if e["type"] == "app_send"] for n in NODES}
    for receiver in NODES:
        events = _events(tmp_path, receiver)
        assert events[0]["type"] == "node_start" and events[1]["type"] == "view"
        for sender in NODES:
            if sender == receiver:
                continue
            got = [e["msg_id"] for e in events if e["type"] == "app_deliver" and e["from"] == sender]
            assert len(sent[sender]) == COUNT and got == sent[sender], (receiver, sender)
            assert all(e["kind"] == "multicast" for e in events if e["type"] == "app_deliver")
    assert all(e["to"] == "*" for n in NODES for e in _events(tmp_path, n) if e["type"] == "app_send")
    full = [e for e in _events(tmp_path, "n1") if e["type"] in ("window_full", "window_unblocked")]
    assert full and full[0]["type"] == "window_full" and any("blocked_ms" in e for e in full)
