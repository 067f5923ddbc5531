"""`splitlab fuzz` on real containers: 20,000 structure-aware fuzzed datagrams (a share from spoofed member
sources) at every node of a 3-node run, in two phases on one cluster:
1. 10,000 malformed ones (truncated, wrong counts, unknown types: the codec rejects each): each node answers
   /health within 1 s, its RSS grew less than MAX_RSS_GROWTH_MB, it counted the drops by reason, and the cluster
   still delivers a workload: malformed input never reaches a protocol.
2. 10,000 of every class, forged well-formed protocol messages included (valid, boundary values, window edges,
   other conn ids, oversized, bad headers around valid bodies, bundles): health, memory and delivery again. A
   forged message may take a real one's place in a window, but once the fuzzer stops every member delivers
   every new message again (DESIGN.md, "Self-stabilisation").
The command runs as users run it (`splitlab fuzz ... --json`); a failure prints the culprit datagrams (hex and
decoded) and the replay commands."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from node import history
from node.unicast import UnicastConfig

pytestmark = pytest.mark.splitlab_cluster
COUNT = 10_000             # per phase
MALFORMED = ("truncated", "bad_count", "unknown_type")
ALL_CLASSES = {"valid", "boundary", "window_edge", "conn_id", "oversized", "header", *MALFORMED, "bundle"}
SEED = 11
RATE_PER_S = 2_000
MAX_RSS_GROWTH_MB = 32     # the memory bound: 20k datagrams (~25 MB on the wire) must not be kept
HEALTH_TIMEOUT_MS = 1_000
WORKLOAD_COUNT = 100       # per member: unicasts to the next member, and multicasts


def splitlab_fuzz(*args: str) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "chaos.cli.main", "fuzz", *args, "--json"], capture_output=True,
                          text=True, timeout=900)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"splitlab fuzz printed no JSON (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.returncode, report, proc.stderr


def explain(report: dict) -> str:
    """The culprits as the failure message: symptom, each datagram's hex and decoding, the replay command."""
    lines = [f"reproduce: {report['reproduce']}", f"record: {report['record']}"]
    for name, check in report["checks"].items():
        lines.append(f"{name}: {'ok' if check['ok'] else 'FAILED'}: {check['detail']}")
    for c in report["culprits"]:
        lines.append(f"--- {c['check']} of {c['target']}: {c['symptom']} ({c['count']} suspect datagrams, "
                     f"replay: {c['replay']})")
        for d in c["datagrams"]:
            lines.append(f"  #{d['i']} {d['src']}->{d['target']} via {d['via']} {d['mutation']}: {d['detail']}")
            lines.append(f"      hex {d['hex'][:200]}")
            lines.append(f"      {d['decoded']}")
    return "\n".join(lines)


def fuzz_and_check(run, seed: int, mutations: tuple[str, ...], delivery: bool) -> dict:
    args = ["--run-id", run.run_id, "--seed", str(seed), "--count", str(COUNT), "--rate", str(RATE_PER_S),
            "--max-rss-growth-mb", str(MAX_RSS_GROWTH_MB), "--workload-count", str(WORKLOAD_COUNT),
            "--mutations", ",".join(mutations)]
    code, report, stderr = splitlab_fuzz(*args, *(() if delivery else ("--no-delivery",)))
    why = explain(report) + ("\n" + stderr if stderr else "")
    # everything was sent and recorded (a node that hung or died stops the run early)
    assert report["sent"] == COUNT, why
    assert set(report["mutations"]) == set(mutations), why
    assert report["spoofed"] > COUNT // 5, why
    assert sum(1 for _ in open(Path(report["record"]))) == COUNT + 1  # the header, then one line per datagram
    # the targets counted what they dropped, by reason
    for node in run.names:
        assert {"truncated", "absurd", "unknown-type"} <= set(report["drops"].get(node, {})), why
    # health: every node answers /health within 1 s
    health = report["checks"]["health"]
    for node in run.names:
        assert health["nodes"][node]["ok"] and health["nodes"][node]["latency_ms"] < HEALTH_TIMEOUT_MS, why
    # memory: RSS growth below the bound
    for node in run.names:
        growth = report["checks"]["memory"]["nodes"][node]["growth"]
        assert growth is not None and growth < MAX_RSS_GROWTH_MB * 2**20, why
    if delivery:  # the cluster still delivers a workload (after forgeries: seqnos forged ones took, at most as many
        # as the receivers had delivered ahead of their senders when the workload began)
        check = report["checks"]["delivery"]
        taken = check.get("taken_by_forgeries", 0)
        assert taken == 0 or not set(mutations) <= set(MALFORMED), why
        assert taken <= check.get("forged_ahead", 0), why
        for node in run.names:
            assert check["nodes"][node]["delivered"] >= 3 * WORKLOAD_COUNT - taken, why
    assert code == 0 and report["ok"] and not report["culprits"], why
    return report


def resync_bound(elapsed_s: float, peers: int) -> int:
    """The most resync messages (SYNC, SYNC-OK, SYNC-ACK) a unicast3 member sends in `elapsed_s`, whatever
    arrives: each at most once per xmit_interval per peer, a new sync at most once per sync_min_interval
    (node.unicast.unicast3; the node's defaults)."""
    config = UnicastConfig()
    per_peer = elapsed_s * 1000 / config.xmit_interval_ms + elapsed_s * 1000 / config.sync_min_interval_ms + 1
    return int(3 * peers * per_peer)


def test_twenty_thousand_fuzzed_datagrams_leave_every_node_healthy_bounded_and_delivering(splitlab_up):
    run = splitlab_up(3)
    started = time.monotonic()
    fuzz_and_check(run, SEED, MALFORMED, delivery=True)
    report = fuzz_and_check(run, SEED + 1, tuple(sorted(ALL_CLASSES)), delivery=True)
    assert report["checks"]["delivery"]["ok"] is True, report["checks"]
    # the resyncs the forgeries set off are paced by the members, not by the forger (~125k forged SYNCs per node
    # came in bundles; answered one for one they were ~100k resync messages per node)
    bound = resync_bound(time.monotonic() - started, len(run.names) - 1)
    sent = {node: sum(1 for e in history.read(run.run_dir / "events" / f"{node}.jsonl") if e["type"] == "resync_tx")
            for node in run.names}
    assert all(count <= bound for count in sent.values()), f"resync messages sent {sent}, at most {bound} each"
