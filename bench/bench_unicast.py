"""Reliable unicast throughput between two nodes (100 B payloads), bundled and unbundled, next to raw UDP
send/receive of the same payload between the same pair of network namespaces, in the same run.

Goal (printed, not asserted): bundled reliable unicast at least 1.5x the raw datagram rate, in messages/s.
"""
from __future__ import annotations

import subprocess
import sys
import time

from bench import flame_graph, wait_until
from chaos.cluster import lifecycle as cluster

PAYLOAD_BYTES = 100
RAW_PORT = 7299


def _raw_rate(run: cluster.Cluster, seconds: float) -> float:
    ns = cluster.namespaces(run)
    dst_ip = run.node("n2").data_ip
    base = [sys.executable, "-m", "bench.udp_blast"]
    receiver = subprocess.Popen(["nsenter", "-t", str(ns["n2"].pid), "-n", *base, "recv", dst_ip, str(RAW_PORT),
                                 str(seconds)], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout.readline().strip() == "ready"
    sender = subprocess.Popen(["nsenter", "-t", str(ns["n1"].pid), "-n", *base, "send", dst_ip, str(RAW_PORT),
                               str(PAYLOAD_BYTES), str(seconds + 1)])
    out, _ = receiver.communicate(timeout=seconds + 30)
    sender.wait(timeout=30)
    return float(out.strip().splitlines()[-1])


def _reliable_rate(run: cluster.Cluster, count: int) -> float:
    receiver = run.client("n2")
    before = receiver.state()["counters"].get("delivered", 0)
    started = time.monotonic()
    run.client("n1").unicast("n2", count=count, size=PAYLOAD_BYTES, rate=0)
    wait_until(lambda: receiver.state()["counters"].get("delivered", 0) - before >= count, 300,
               f"{count} messages not delivered")
    return count / (time.monotonic() - started)


def run(quick: bool) -> list[dict]:
    count = 20_000 if quick else 100_000
    seconds = 3 if quick else 8
    rows = []
    bundled = cluster.up(2)
    try:
        raw = _raw_rate(bundled, seconds)
        pids = cluster.namespaces(bundled)
        with flame_graph(pids["n1"].pid, "unicast-bundled-sender") as sender_svg, \
                flame_graph(pids["n2"].pid, "unicast-bundled-receiver") as receiver_svg:
            rate = _reliable_rate(bundled, count)
    finally:
        cluster.down(bundled.run_id)
    unbundled = cluster.up(2, node_env={n: {"SPLITLAB_BUNDLE_MAX_BYTES": "0"} for n in ("n1", "n2")})
    try:
        rate_unbundled = _reliable_rate(unbundled, count // 4)
    finally:
        cluster.down(unbundled.run_id)
    rows.append({"name": "reliable unicast, bundled", "value": rate, "unit": "msg/s", "baseline": raw,
                 "ratio": rate / raw, "better": "higher",
                 "note": f"goal >= 1.5x raw; {count} x {PAYLOAD_BYTES} B, unicast3; flame graphs "
                         f"{sender_svg}, {receiver_svg}"})
    rows.append({"name": "reliable unicast, unbundled", "value": rate_unbundled, "unit": "msg/s", "baseline": raw,
                 "ratio": rate_unbundled / raw, "better": "higher", "note": "one message per datagram"})
    return rows
