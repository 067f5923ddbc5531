"""Pipeline throughput: events analysed per second by `pipeline.analyze` on local[2], for 1M and 10M generated
events (100k and 1M with quick=True), next to a plain Spark read-parse-count of the same files in the same run,
and how the analysis time grows from the smaller to the larger history (10x the events; linear growth is 10x).

The histories are generated streaming to disk by the node's own history writer (run lines, as nodes write them;
one open file per writer, nothing held in memory beyond its buffer): four nodes
multicasting and unicasting, one NAKACK4 retransmission per 50 multicasts, a partition between 40% and 60% of
the run with split views and a merge after the heal. The baseline reads the same files with the same explicit
schema and counts the events with a `type` (Spark then parses only that field); the analysis parses and
type-checks every field, caches the events and runs ten checks, the Parquet tables and the HTML report, so it
is expected to be an order of magnitude slower. Nothing is asserted.
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from node.history import ROWS, HistoryWriter
from pipeline.api import analyze
from pipeline.schema import EVENT_SCHEMA
from pipeline.session import DRIVER_MEMORY_ENV, spark_session

MASTER = "local[2]"
NODES = ("n1", "n2", "n3", "n4")
RUN_ID = "bench-pipeline"
T0_TS = 1_700_000_000.0
MSG_INTERVAL_S = 0.0001
MULTICAST_SHARE = 0.8
XMIT_EVERY = 50
BENCH_DRIVER_MEMORY = "4g"


class _Writer:
    """One node's events file, written by the node's own writer (`node.history.HistoryWriter`: run lines for the
    per-message events), or one plain line per event (`plain`, as a node wrote before run lines); `ts` never goes
    back in a file (a writer stamps events as it writes them)."""

    def __init__(self, path: Path, node: str, plain: bool) -> None:
        self.last_ts = 0.0
        self.writer = HistoryWriter(path, RUN_ID, node, buffer_lines=4096, clock=lambda: self.last_ts,
                                    runs=not plain)

    def emit(self, ts: float, type_: str, fields: dict[str, Any]) -> None:
        self.last_ts = max(round(ts, 6), self.last_ts)
        self.writer.record(type_, fields)

    def close(self) -> None:
        self.writer.close()


def generate_history(run_dir: Path, target_events: int, seed: int = 1, plain: bool = False) -> int:
    """Write a run of about `target_events` events under `run_dir/events/`; return the exact count. `plain`: one
    line per event, no run lines."""
    rng = random.Random(seed)
    events_dir = run_dir / "events"
    events_dir.mkdir(parents=True, exist_ok=True)
    writers = {n: _Writer(events_dir / f"{n}.jsonl", n, plain) for n in NODES}
    ctl = _Writer(events_dir / "controller.jsonl", "controller", plain)
    total = 0

    def view(nodes: tuple[str, ...], ts: float, n: int, members: tuple[str, ...]) -> int:
        for node in nodes:
            writers[node].emit(ts, "view", {"view_id": [members[0], n], "members": list(members)})
        return len(nodes)

    expected_messages = max(1, target_events // 8)
    split_at, heal_at = int(expected_messages * 0.4), int(expected_messages * 0.6)
    groups: dict[str, tuple[str, ...]] = {n: NODES for n in NODES}
    counters = {n: 0 for n in NODES}
    seqnos = {n: 0 for n in NODES}
    total += view(NODES, T0_TS, 1, NODES)
    i = 0
    try:
        while total < target_events:
            ts = T0_TS + 0.01 + i * MSG_INTERVAL_S
            if i == split_at:
                ctl.emit(ts, "fault_start", {"fault_id": "f1", "kind": "partition", "detail": {"bisect": True},
                                             "applied_ts": ts, "effective_ts": ts + 0.001})
                total += 1 + view(("n1", "n2"), ts + 0.002, 2, ("n1", "n2")) + view(("n3", "n4"), ts + 0.002, 2,
                                                                                      ("n3", "n4"))
                groups = {"n1": ("n1", "n2"), "n2": ("n1", "n2"), "n3": ("n3", "n4"), "n4": ("n3", "n4")}
            if i == heal_at:
                ctl.emit(ts, "heal", {"applied_ts": ts, "effective_ts": ts + 0.001})
                total += 1 + view(NODES, ts + 0.01, 3, NODES)
                groups = {n: NODES for n in NODES}
            sender = NODES[i % len(NODES)]
            counters[sender] += 1
            msg_id = f"{sender}.1700000000000.{counters[sender]}"
            w = writers[sender]
            if rng.random() < MULTICAST_SHARE:
                seqnos[sender] += 1
                seqno = seqnos[sender]
                w.emit(ts, "app_send", {"msg_id": msg_id, "kind": "multicast", "to": "*", "size": 100})
                w.emit(ts, "data_tx", {"proto": "nakack4", "to": "*", "seqno": seqno, "conn_id": 0, "first": False,
                                       "resend": False, "size": 100, "msg_id": msg_id})
                total += 2
                for k, receiver in enumerate(r for r in groups[sender] if r != sender):
                    at = ts + 0.0005 + 0.0001 * k
                    rw = writers[receiver]
                    if seqno % XMIT_EVERY == 0 and k == 0:
                        rw.emit(at, "xmit_req_tx", {"proto": "nakack4", "to": sender, "seqnos": [seqno]})
                        w.emit(at + 0.0001, "xmit_req_rx", {"proto": "nakack4", "from": receiver, "seqnos": [seqno],
                                                            "found": [seqno], "missing": []})
                        w.emit(at + 0.0001, "data_tx", {"proto": "nakack4", "to": receiver, "seqno": seqno,
                                                        "conn_id": 0, "first": False, "resend": True, "size": 100})
                        at += 0.0003
                        total += 3
                    rw.emit(at, "data_rx", {"proto": "nakack4", "from": sender, "seqno": seqno, "conn_id": 0,
                                            "first": False, "action": "deliver"})
                    rw.emit(at, "app_deliver", {"msg_id": msg_id, "kind": "multicast", "from": sender})
                    total += 2
            else:
                receiver = rng.choice([r for r in groups[sender] if r != sender])
                at = ts + 0.0004
                w.emit(ts, "app_send", {"msg_id": msg_id, "kind": "unicast", "to": receiver, "size": 50})
                w.emit(ts, "data_tx", {"proto": "unicast3", "to": receiver, "seqno": counters[sender],
                                       "conn_id": 1, "first": False, "resend": False, "size": 50, "msg_id": msg_id})
                rw = writers[receiver]
                rw.emit(at, "data_rx", {"proto": "unicast3", "from": sender, "seqno": counters[sender],
                                        "conn_id": 1, "first": False, "action": "deliver"})
                rw.emit(at, "app_deliver", {"msg_id": msg_id, "kind": "unicast", "from": sender})
                total += 4
            i += 1
    finally:
        for writer in (*writers.values(), ctl):
            writer.close()
    return total


def _read_count(spark: SparkSession, run_dir: Path) -> int:
    """The baseline: read and parse the same files with the same explicit schema, count the events (a run line's
    rows each)."""
    files = sorted(str(p) for p in (run_dir / "events").glob("*.jsonl"))
    events = F.when(F.col(ROWS).isNull(), 1).otherwise(F.size(F.col(f"{ROWS}.ts")))
    lines = spark.read.schema(EVENT_SCHEMA).json(files).filter(F.col("type").isNotNull())
    return int(lines.agg(F.sum(events)).collect()[0][0])


def _measure(spark: SparkSession, work: Path, target_events: int) -> dict[str, Any]:
    run_dir = work / f"run-{target_events}"
    events = generate_history(run_dir, target_events)
    started = time.monotonic()
    counted = _read_count(spark, run_dir)
    read_s = time.monotonic() - started
    started = time.monotonic()
    summary = analyze(run_dir, spark=spark)
    analyze_s = time.monotonic() - started
    if counted != events or summary.history["events"] != events:
        raise RuntimeError(f"event counts disagree: generated {events}, read-count {counted}, "
                           f"analysed {summary.history['events']}")
    shutil.rmtree(run_dir)
    return {"events": events, "read_s": read_s, "analyze_s": analyze_s, "status": summary.status,
            "verdict_s": summary.analysis["verdict_s"], "elapsed_s": summary.analysis["elapsed_s"]}


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


def run(quick: bool) -> list[dict]:
    """Rows (name, value, unit, baseline, ratio): events/s of analyze vs read-and-count, the time to the verdict
    against the whole analysis, and time growth."""
    sizes = (100_000, 1_000_000) if quick else (1_000_000, 10_000_000)
    os.environ.setdefault(DRIVER_MEMORY_ENV, BENCH_DRIVER_MEMORY)
    created = SparkSession.getActiveSession() is None
    spark = spark_session(MASTER)
    rows: list[dict] = []
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="splitlab-bench-pipeline-") as tmp:
            for size in sizes:
                r = _measure(spark, Path(tmp), size)
                results.append(r)
                analyzed_eps = r["events"] / r["analyze_s"]
                read_eps = r["events"] / r["read_s"]
                rows.append({"name": f"analyze {_label(size)} events ({MASTER})", "value": analyzed_eps,
                             "unit": "events/s", "baseline": read_eps, "ratio": analyzed_eps / read_eps,
                             "better": "higher",
                             "note": f"analyze {r['analyze_s']:.1f} s vs read+count {r['read_s']:.1f} s; "
                                     f"verdict {r['status']}"})
                rows.append({"name": f"verdict of {_label(size)} events, before the report", "value": r["verdict_s"],
                             "unit": "s", "baseline": r["elapsed_s"], "ratio": r["verdict_s"] / r["elapsed_s"],
                             "better": "lower",
                             "note": "summary.json written; baseline: the whole analysis (tables, plots, diagram)"})
    finally:
        if created:
            spark.stop()
    small, large = results
    growth = large["analyze_s"] / small["analyze_s"]
    scale = large["events"] / small["events"]
    rows.append({"name": f"analyze time growth {_label(sizes[0])} -> {_label(sizes[1])}", "value": growth,
                 "unit": "x", "baseline": scale, "ratio": growth / scale, "better": "lower",
                 "note": f"read+count grew {large['read_s'] / small['read_s']:.1f}x; baseline = linear"})
    return rows


if __name__ == "__main__":
    for row in run(quick=os.environ.get("BENCH_QUICK") == "1"):
        print(row)
