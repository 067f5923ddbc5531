"""The NFQUEUE shaper measured from outside, in a network namespace of its own (no containers, no images): two
addresses on the namespace's loopback, the queue chain the controller sets (`chaos.net.shaper.control`), the real
shaper process, and plain UDP probes (`chaos.wire.probe`) offered from one address to the other at a paced rate.

`flood(...)` does that where it runs and returns what it measured (the probes' counts and delays, how long the
sending took, the shaper's last counters, its RSS before and after the flood); `in_own_namespace(...)` runs it
under `unshare --net` (root) as `python -m bench.shaper_netns '<json arguments>'`. bench_shaper and the queue
limit's kernel test (tests/unit/test_shaper_queue_limit.py) both measure through it.
"""
from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chaos.faults.grudge import LinkFault, link_fault
from chaos.net import iptables
from chaos.net.shaper import control
from chaos.net.shaper.spec import ShaperSpec
from chaos.wire import probe
from node.errors import EnvironmentProblem

REPO = Path(__file__).resolve().parents[1]
SRC_IP, DST_IP = "10.9.0.2", "10.9.0.3"
NODE = "src"
PAYLOAD_BYTES = 1000
HEADER_BYTES = 28  # IPv4 and UDP: the shaper's rate counts whole IP packets
STOP_TIMEOUT_S = 10.0


def packet_bits(payload_bytes: int = PAYLOAD_BYTES) -> int:
    """The bits the shaper's rate counts for a datagram of `payload_bytes`."""
    return (payload_bytes + HEADER_BYTES) * 8


def rss_kb(pid: int) -> int:
    """The resident set of process `pid`, in kB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise EnvironmentProblem(f"process {pid} has no VmRSS (a kernel thread, or gone)")


def _start(fault: LinkFault, run_dir: Path) -> subprocess.Popen:
    """The loopback's two addresses, the queue chain toward DST_IP, and a shaper applying `fault` to it."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for ip in (SRC_IP, DST_IP):
        subprocess.run(["ip", "addr", "add", f"{ip}/24", "dev", "lo"], check=True)
    spec = ShaperSpec(run_id="bench", node=NODE, seed=1, links={DST_IP: fault})
    path = control.spec_path(run_dir, NODE)
    spec.write(path)
    subprocess.run(iptables.RESTORE, input=iptables.restore_input(iptables.QUEUE.name(spec.run_id),
                                                                  control.queue_rules(spec),
                                                                  hook_into=iptables.QUEUE.hook_into),
                   text=True, check=True)
    log_path = path.with_suffix(".log")
    with open(log_path, "wb") as log:
        shaper = subprocess.Popen([sys.executable, "-m", "chaos.net.shaper", "--spec", str(path), "--marker", "bench"],
                                  stdout=subprocess.PIPE, stderr=log)
    if not shaper.stdout.readline().startswith(b"ready"):
        shaper.kill()
        shaper.wait()
        raise EnvironmentProblem(f"the shaper did not start: {log_path.read_text(errors='replace')[-1000:]}")
    return shaper


def flood(fault: dict, offered_kbit: float, seconds: float, settle_ms: float, payload_bytes: int) -> dict:
    """Offer `offered_kbit` (counted as the rate counts: IP packets) of datagrams of `payload_bytes` for `seconds`
    through the link fault `fault` (its fields, as `link_fault` takes them), in the namespace this process runs in
    (a fresh one: it adds addresses and a chain; its loopback's MTU is 64 KB). Returns the probes'
    `LinkStats.as_dict()` plus `send_s`, `span_s`, `max_delay_ms`, the shaper's `queue_full`, `packets`, `queue`
    and `rss_before_kb`/`rss_after_kb` (the flood's start and end)."""
    with tempfile.TemporaryDirectory(prefix="splitlab-shaper-") as tmp:
        shaper = _start(link_fault(fault), Path(tmp))
        try:
            rss_before_kb = rss_kb(shaper.pid)
            interval_ms = packet_bits(payload_bytes) / offered_kbit  # kbit/s are bits per ms
            started_s = time.monotonic()
            stats = probe.measure(probe.Endpoint(NODE, None, SRC_IP), probe.Endpoint("dst", None, DST_IP),
                                  count=round(seconds * 1000 / interval_ms), interval_ms=interval_ms,
                                  settle_ms=settle_ms, size=payload_bytes)
            send_s = time.monotonic() - started_s - settle_ms / 1000
            rss_after_kb = rss_kb(shaper.pid)
        finally:
            shaper.send_signal(signal.SIGTERM)  # it releases what it holds and writes its last counters
            shaper.wait(STOP_TIMEOUT_S)
        counters = control.read_stats(Path(tmp), NODE)
    return dict(stats.as_dict(), send_s=send_s, span_s=stats.span_s,
                max_delay_ms=max(stats.delays_ms, default=math.nan), queue_full=counters.get("queue_full", 0),
                packets=counters.get("packets", 0), queue=counters.get("queue", {}), rss_before_kb=rss_before_kb,
                rss_after_kb=rss_after_kb)


def in_own_namespace(fault: dict, offered_kbit: float, seconds: float, settle_ms: float = 300,
                     payload_bytes: int = PAYLOAD_BYTES) -> dict:
    """`flood(...)` in a network namespace of its own (`unshare --net`: root). Raises `EnvironmentProblem`."""
    args = json.dumps({"fault": fault, "offered_kbit": offered_kbit, "seconds": seconds, "settle_ms": settle_ms,
                       "payload_bytes": payload_bytes})
    try:
        proc = subprocess.run(["unshare", "--net", sys.executable, "-m", "bench.shaper_netns", args], cwd=REPO,
                              capture_output=True, text=True, timeout=seconds + settle_ms / 1000 + 60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"the shaper's flood in a namespace of its own did not run: {exc}") from None
    if proc.returncode != 0:
        raise EnvironmentProblem(f"the shaper's flood in a namespace of its own failed: {proc.stderr.strip()[-1500:]}",
                                 hint="it needs root, unshare, ip, iptables and the kernel's NFQUEUE")
    return json.loads(proc.stdout.splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(flood(**json.loads(sys.argv[1]))))
