"""Pipeline throughput: events analysed per second by `pipeline.analyze` on local[2], for 1M and 10M generated
events (100k and 1M with quick=True), next to a plain Spark read-parse-count of the same files in the same run,
and how the analysis time grows from the smaller to the larger history (10x the events; linear growth is 10x).

The histories (`pipeline.synthetic`) are generated streaming to disk by the node's own history writer (run lines, as
nodes write them; one open file per writer, nothing held in memory beyond its buffer): four nodes multicasting and
unicasting, one NAKACK4 retransmission per 50 multicasts, a partition between 40% and 60% of the run with split
views and a merge after the heal. The baseline reads the same files with the same explicit schema and counts the
events with a `type` (Spark then parses only that field); the analysis parses and type-checks every field, caches
the events and runs ten checks, the Parquet tables and the HTML report, so it is expected to be an order of
magnitude slower. Nothing is asserted.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from node.history import ROWS
from pipeline.api import analyze
from pipeline.schema import EVENT_SCHEMA
from pipeline.session import DRIVER_MEMORY_ENV, spark_session
from pipeline.synthetic import generate_history

MASTER = "local[2]"
BENCH_DRIVER_MEMORY = "4g"


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
