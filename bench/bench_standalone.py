"""The analysis on a Spark standalone cluster against local[2]: events analysed per second by `pipeline.analyze`
on a cluster of two workers of one core each (`pipeline.standalone`, this machine, 127.0.0.1) and on local[2],
for the same generated history (10M events, the size issue 15 names; 100k with quick=True), in the same run,
as a ratio.

Both have two cores and 4g for the executors (local[2]: the driver's 4g; the cluster: 2g per executor), and both
analyses run in one child process, one Spark context after the other in the same driver JVM, each after a
warm-up analysis of a small history on its own master (so neither pays a JVM's or an executor's first jobs).
On one machine the ratio is what the cluster costs (executor JVMs beside the driver, tasks scheduled over RPC,
cached blocks and shuffles through the block manager over loopback), not a speed-up: that needs workers on
other machines. The two verdicts must agree; nothing else is asserted.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_pipeline import BENCH_DRIVER_MEMORY
from pipeline.synthetic import generate_history
from pipeline import standalone
from pipeline.service_client import SOCKET_ENV
from pipeline.master import MASTER_ENV
from pipeline.session import DRIVER_MEMORY_ENV

LOCAL = "local[2]"
WORKERS = 2
CORES_PER_WORKER = 1
MEMORY_PER_WORKER = "2g"
WARM_UP_EVENTS = 5_000
NOTE = ("on one machine this is the standalone cluster's overhead (executor JVMs, RPC scheduling, loopback "
        "block transfers), not a speed-up")


def _analyse(master: str, warm_dir: Path, run_dir: Path) -> dict[str, Any]:
    """In the child: a context on `master`, a warm-up analysis, the timed one; the context is stopped after."""
    from pipeline.api import analyze
    from pipeline.session import spark_session

    spark = spark_session(master)
    try:
        analyze(warm_dir, spark=spark)
        started = time.monotonic()
        summary = analyze(run_dir, spark=spark)
        elapsed_s = time.monotonic() - started
    finally:
        spark.stop()
    return {"master": master, "analyze_s": elapsed_s, "events": summary.history["events"],
            "verdict": {"status": summary.status, **{n: r.status for n, r in summary.checks.items()}}}


def _child(cluster_url: str, warm_dir: Path, run_dir: Path) -> None:
    print(json.dumps([_analyse(LOCAL, warm_dir, run_dir), _analyse(cluster_url, warm_dir, run_dir)]))


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


def run(quick: bool) -> list[dict]:
    """One row: events/s on the cluster, against local[2] (the baseline) in the same run."""
    target = 100_000 if quick else 10_000_000
    with tempfile.TemporaryDirectory(prefix="sl-bench-standalone-") as tmp:
        work = Path(tmp)
        events = generate_history(work / "run", target)
        generate_history(work / "warm", WARM_UP_EVENTS, seed=2)
        state_dir = work / "spark"
        cluster = standalone.start(state_dir, workers=WORKERS, cores_per_worker=CORES_PER_WORKER,
                                   memory_per_worker=MEMORY_PER_WORKER, master_port=0, webui_port=0)
        try:
            env = {**os.environ, "SPARK_EXECUTOR_MEMORY": MEMORY_PER_WORKER, SOCKET_ENV: str(work / "none.sock")}
            env.setdefault(DRIVER_MEMORY_ENV, BENCH_DRIVER_MEMORY)
            env.pop(MASTER_ENV, None)
            done = subprocess.run([sys.executable, "-m", "bench.bench_standalone", "--child", cluster["master_url"],
                                   str(work / "warm"), str(work / "run")],
                                  env=env, capture_output=True, text=True)
        finally:
            standalone.stop(state_dir)
    if done.returncode != 0:
        raise RuntimeError(f"the analyses exited {done.returncode}: {done.stderr[-3000:]}")
    local, remote = json.loads(done.stdout.strip().splitlines()[-1])
    if local["verdict"] != remote["verdict"] or {local["events"], remote["events"]} != {events}:
        raise RuntimeError(f"local[2] and the cluster disagree: {local} against {remote}")
    local_eps, remote_eps = events / local["analyze_s"], events / remote["analyze_s"]
    return [{"name": f"analyze {_label(events)} events, standalone {WORKERS} workers x {CORES_PER_WORKER} core "
                     f"vs {LOCAL}",
             "value": remote_eps, "unit": "events/s", "baseline": local_eps, "ratio": remote_eps / local_eps,
             "better": "higher",
             "note": f"cluster {remote['analyze_s']:.1f} s vs {LOCAL} {local['analyze_s']:.1f} s, same verdict "
                     f"({local['verdict']['status']}); {NOTE}"}]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        for row in run(quick=os.environ.get("BENCH_QUICK") == "1"):
            print(row)
        print(NOTE)
