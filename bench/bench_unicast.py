"""Reliable unicast throughput between two nodes (100 B payloads), bundled and unbundled, next to raw UDP
send/receive of the same payload between the same pair of network namespaces, in the same run.

Goal (printed, not asserted): bundled reliable unicast at least 1.5x the raw datagram rate, in messages/s.
Also printed: the CPU per message of both nodes (user and system time of each process over the bundled run),
the receiver's per delivered message against the raw receiver's per datagram, the sender's per sent message against
the raw sender's per datagram, in the same run (goal: at most 2.5 us each). The nodes run the image's build (the
compiled node); the same run on the pure sources gives the compiled build's ratio and the flame graphs.
"""
from __future__ import annotations

import subprocess
import sys
import time

from bench import cpu_s, flame_graph, udp_blast, wait_until
from chaos.cluster import compiled, lifecycle as cluster

PAYLOAD_BYTES = 100
RAW_PORT = 7299


def _raw_rate(run: cluster.Cluster, seconds: float) -> tuple[float, float, float]:
    """(datagrams/s, receiver CPU us per datagram, sender CPU us per datagram) of raw UDP from n1 to n2."""
    ns = cluster.namespaces(run)
    dst_ip = run.node("n2").data_ip
    base = [sys.executable, "-m", "bench.udp_blast"]
    receiver = subprocess.Popen(["nsenter", "-t", str(ns["n2"].pid), "-n", *base, "recv", dst_ip, str(RAW_PORT),
                                 str(seconds)], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout.readline().strip() == "ready"
    sender = subprocess.Popen(["nsenter", "-t", str(ns["n1"].pid), "-n", *base, "send", dst_ip, str(RAW_PORT),
                               str(PAYLOAD_BYTES), str(seconds + 1)], stdout=subprocess.PIPE, text=True)
    out, _ = receiver.communicate(timeout=seconds + 30)
    sent, _ = sender.communicate(timeout=30)
    rate, cpu_us = udp_blast.result(out)
    return rate, cpu_us, udp_blast.result(sent)[1]


def _reliable_rate(run: cluster.Cluster, count: int) -> tuple[float, float, float]:
    """(messages/s, receiving and sending node's CPU us per message) of `count` reliable unicasts n1 -> n2."""
    receiver = run.client("n2")
    pids = cluster.namespaces(run)
    cpu_before_s = {n: cpu_s(pids[n].pid) for n in ("n1", "n2")}
    before = receiver.state()["counters"].get("delivered", 0)
    started = time.monotonic()
    run.client("n1").unicast("n2", count=count, size=PAYLOAD_BYTES, rate=0)
    wait_until(lambda: receiver.state()["counters"].get("delivered", 0) - before >= count, 300,
               f"{count} messages not delivered")
    elapsed_s = time.monotonic() - started
    used_us = {n: (cpu_s(pids[n].pid) - cpu_before_s[n]) / count * 1e6 for n in ("n1", "n2")}
    return count / elapsed_s, used_us["n2"], used_us["n1"]


def run(quick: bool) -> list[dict]:
    # long enough that the controller's polling (every 50 ms, a /state each) is a few percent of the run: 100k
    # messages took 0.3 s here, and both the rate and the CPU per message read 10-20 % worse than over 3 s
    count = 100_000 if quick else 1_000_000
    seconds = 3 if quick else 8
    rows = []
    bundled = cluster.up(2)  # the image's build: the compiled node (chaos.cluster.compiled)
    try:
        raw, raw_cpu_us, raw_send_cpu_us = _raw_rate(bundled, seconds)
        rate, cpu_us, send_cpu_us = _reliable_rate(bundled, count)
    finally:
        cluster.down(bundled.run_id)
    pure = cluster.up(2, node_env={n: dict(compiled.PURE_ENV) for n in ("n1", "n2")})
    try:  # the flame graphs: py-spy sees no frame inside a compiled function
        pids = cluster.namespaces(pure)
        with flame_graph(pids["n1"].pid, "unicast-bundled-sender") as sender_svg, \
                flame_graph(pids["n2"].pid, "unicast-bundled-receiver") as receiver_svg:
            _, pure_cpu_us, pure_send_cpu_us = _reliable_rate(pure, count)
    finally:
        cluster.down(pure.run_id)
    unbundled = cluster.up(2, node_env={n: {"SPLITLAB_BUNDLE_MAX_BYTES": "0"} for n in ("n1", "n2")})
    try:
        rate_unbundled = _reliable_rate(unbundled, count // 4)[0]
    finally:
        cluster.down(unbundled.run_id)
    rows.append({"name": "reliable unicast, bundled", "value": rate, "unit": "msg/s", "baseline": raw,
                 "ratio": rate / raw, "better": "higher",
                 "note": f"goal >= 1.5x raw; {count} x {PAYLOAD_BYTES} B, unicast3, the compiled node"})
    rows.append({"name": "reliable unicast, unbundled", "value": rate_unbundled, "unit": "msg/s", "baseline": raw,
                 "ratio": rate_unbundled / raw, "better": "higher", "note": "one message per datagram"})
    rows.append({"name": "CPU per delivered message, receiver, bundled", "value": cpu_us, "unit": "us",
                 "baseline": raw_cpu_us, "ratio": cpu_us / raw_cpu_us, "better": "lower",
                 "note": "goal <= 2.5 us; baseline: the raw receiver's CPU per datagram; the node process, user and "
                         "system"})
    rows.append({"name": "CPU per sent message, sender, bundled", "value": send_cpu_us, "unit": "us",
                 "baseline": raw_send_cpu_us, "ratio": send_cpu_us / raw_send_cpu_us, "better": "lower",
                 "note": "goal <= 2.5 us; baseline: the raw sender's CPU per datagram; the node process, as above"})
    for side, value, pure_value, svg in (("receiver", cpu_us, pure_cpu_us, receiver_svg),
                                         ("sender", send_cpu_us, pure_send_cpu_us, sender_svg)):
        rows.append({"name": f"CPU per message, {side}, compiled vs pure node", "value": value, "unit": "us",
                     "baseline": pure_value, "ratio": value / pure_value, "better": "lower",
                     "note": f"baseline: the same run on the pure sources (PURE_ENV), sampled by py-spy meanwhile "
                             f"(not paused): flame graph {svg}"})
    return rows
