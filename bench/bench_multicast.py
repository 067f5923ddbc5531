"""Reliable multicast (NAKACK4, 100 B payloads) in a 3-node cluster: messages/s per sender, with one sender and
with all three sending at once, next to raw UDP fan-out of the same payload (one process in n1's namespace
sending each datagram to n2 and n3, received by one process in each) in the same run; and, with one receiver
paused (`docker pause`), how long the sender is blocked on its full window: a pause shorter than the suspicion
timeout (the window waits for the receiver) and a longer one (the view excludes the receiver, which releases
the sender). The nodes run the image's build (the compiled node); 3 senders at once also on the pure sources.

Run inside the bench (`python -m bench bench_multicast`); `python -m bench.bench_multicast fanout HOSTS PORT SIZE
SECONDS` is the raw fan-out sender it starts with nsenter.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import docker

from bench import udp_blast, wait_until
from chaos.cluster import compiled, lifecycle as cluster

PAYLOAD_BYTES = 100
RAW_PORT = 7298
NODES = ("n1", "n2", "n3")
SMALL_WINDOW = 1024  # capacity for the pause measurements, so a paused receiver fills it quickly


def fanout(hosts: list[str], port: int, size: int, seconds: float) -> None:
    """Send `size`-byte datagrams to every host in turn (one fan-out per message) for `seconds`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = b"x" * size
    targets = [(h, port) for h in hosts]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(100):
            for target in targets:
                try:
                    sock.sendto(payload, target)
                except OSError:  # ENOBUFS: the receivers, not the sender, set the rate
                    pass


def _raw_fanout_rate(run: cluster.Cluster, seconds: float) -> float:
    """Datagrams/s each receiver got from the fan-out sender (the slower receiver counts)."""
    ns = cluster.namespaces(run)
    receivers = {}
    for node in ("n2", "n3"):
        ip = run.node(node).data_ip
        proc = subprocess.Popen(["nsenter", "-t", str(ns[node].pid), "-n", sys.executable, "-m", "bench.udp_blast",
                                 "recv", ip, str(RAW_PORT), str(seconds)], stdout=subprocess.PIPE, text=True)
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"raw receiver in {node} did not start")
        receivers[node] = proc
    hosts = ",".join(run.node(n).data_ip for n in ("n2", "n3"))
    sender = subprocess.Popen(["nsenter", "-t", str(ns["n1"].pid), "-n", sys.executable, "-m",
                               "bench.bench_multicast", "fanout", hosts, str(RAW_PORT), str(PAYLOAD_BYTES),
                               str(seconds + 1)])
    rates = [udp_blast.result(p.communicate(timeout=seconds + 30)[0])[0] for p in receivers.values()]
    sender.wait(timeout=30)
    return min(rates)


def _counters(run: cluster.Cluster, node: str) -> dict[str, int]:
    """The multicast layer's counters of `node`."""
    return run.client(node).state()["layers"]["multicast"]["counters"]


def _delivered(run: cluster.Cluster, node: str) -> int:
    return _counters(run, node).get("delivered", 0)


def _xmit_counts(run: cluster.Cluster) -> int:
    """Every node's multicast counters that count retransmission traffic, summed."""
    return sum(v for n in NODES for k, v in _counters(run, n).items() if "xmit" in k)


def _multicast_rate(run: cluster.Cluster, senders: tuple[str, ...], count: int) -> tuple[float, str]:
    """(messages/s per sender, what slowed it): every sender multicasts `count`, until every node delivered all of
    the others'. What slowed it: how often and how long the senders waited on a full window, and the
    retransmission counters' growth (a run of three senders measured 35.8k and 77.7k per sender, 5 min apart)."""
    before = {n: _delivered(run, n) for n in NODES}
    xmit_before = _xmit_counts(run)
    want = {n: count * len([s for s in senders if s != n]) for n in NODES}
    started = time.monotonic()
    for sender in senders:
        run.client(sender).multicast(count=count, size=PAYLOAD_BYTES, rate=0)
    wait_until(lambda: all(_delivered(run, n) - before[n] >= want[n] for n in NODES), 300,
               f"{count} multicasts from {', '.join(senders)} not delivered")
    rate = count / (time.monotonic() - started)
    waits = [run.client(s).state()["workloads"][-1] for s in senders]
    why = (f"senders waited on a full window {sum(w['blocked_count'] for w in waits)} times, "
           f"{sum(w['blocked_ms'] for w in waits) / 1000:.2f} s in all; retransmission counters "
           f"+{_xmit_counts(run) - xmit_before}")
    return rate, why


def _blocked_ms(run: cluster.Cluster, pause_s: float, count: int) -> float:
    """n1 multicasts `count` messages unpaced while n3 is paused for `pause_s`: total blocked time of n1."""
    ctr = docker.from_env().containers.get(run.node("n3").container)
    n1 = run.client("n1")
    workload_id = n1.multicast(count=count, size=PAYLOAD_BYTES, rate=0)
    ctr.pause()
    try:
        time.sleep(pause_s)
    finally:
        ctr.unpause()

    def workload() -> dict:
        return next(w for w in n1.state()["workloads"] if w["id"] == workload_id)

    wait_until(lambda: workload()["done"], 60, "the multicast workload did not finish after the unpause", 0.1)
    return workload()["blocked_ms"]


def run(quick: bool) -> list[dict]:
    # per sender; long enough that the controller's polling is a few percent of the run (20k took 0.1-0.4 s and
    # read the 3-sender rate ~20 % low)
    count = 20_000 if quick else 200_000
    seconds = 3 if quick else 8
    rows = []
    run_ = cluster.up(3)  # the image's build: the compiled node (chaos.cluster.compiled)
    try:
        raw = _raw_fanout_rate(run_, seconds)
        one, one_why = _multicast_rate(run_, ("n1",), count)
        three, three_why = _multicast_rate(run_, NODES, count)
    finally:
        cluster.down(run_.run_id)
    pure = cluster.up(3, node_env={n: dict(compiled.PURE_ENV) for n in NODES})
    try:
        three_pure, pure_why = _multicast_rate(pure, NODES, count)
    finally:
        cluster.down(pure.run_id)
    note = f"{count} x {PAYLOAD_BYTES} B, nakack4 tipc; baseline: raw UDP fan-out to 2 receivers, per receiver"
    rows.append({"name": "multicast, one sender", "value": one, "unit": "msg/s", "baseline": raw,
                 "ratio": one / raw, "better": "higher", "note": f"{note}; {one_why}"})
    rows.append({"name": "multicast, 3 senders at once (per sender)", "value": three, "unit": "msg/s",
                 "baseline": raw, "ratio": three / raw, "better": "higher", "note": f"{note}; {three_why}"})
    rows.append({"name": "multicast, 3 senders at once (per sender), compiled vs pure node", "value": three,
                 "unit": "msg/s", "baseline": three_pure, "ratio": three / three_pure, "better": "higher",
                 "note": f"baseline: the same on the node's pure sources (PURE_ENV), in the same run; pure: "
                         f"{pure_why}"})
    env = {n: {"SPLITLAB_NAKACK4_CAPACITY": str(SMALL_WINDOW)} for n in NODES}
    for pause_s, label in ((1.0, "below the suspicion timeout"), (4.0, "above it: the view excludes n3")):
        paused = cluster.up(3, node_env=env)
        try:
            blocked = _blocked_ms(paused, pause_s, 20 * SMALL_WINDOW)
        finally:
            cluster.down(paused.run_id)
        rows.append({"name": f"sender blocked, receiver paused {pause_s:g} s", "value": blocked, "unit": "ms",
                     "baseline": pause_s * 1000, "ratio": blocked / (pause_s * 1000), "better": "lower",
                     "note": f"capacity {SMALL_WINDOW}; baseline: the pause; {label}"})
    return rows


if __name__ == "__main__":
    if sys.argv[1] != "fanout":
        sys.exit(f"usage: python -m bench.bench_multicast fanout HOST,HOST PORT SIZE SECONDS (got {sys.argv[1:]})")
    fanout(sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
