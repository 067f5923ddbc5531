"""The analysis on a Spark standalone cluster of two workers, started by `splitlab spark-cluster up` (master and
workers on 127.0.0.1 from the Spark that pyspark ships, pipeline.standalone), gives the same verdict, summary and
tables as the local session on the same history; `splitlab spark-cluster down` leaves no process of it behind.

Real processes throughout: the verbs run as commands, the cluster analysis is `splitlab analyze --master URL` in
a process of its own, what is left is read from /proc. The `python3` on the cluster's PATH is a stub that fails,
so the executors' Python workers must be the driver's interpreter (pipeline.session), and the executors must
have reached the driver on 127.0.0.1. The cluster is stopped by the fixture too, also when the test fails.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pipeline_fixtures as pf
from pipeline_fixtures import spark  # noqa: F401  (shared fixture)
from pipeline import standalone
from pipeline.service_client import SOCKET_ENV
from pipeline.master import MASTER_ENV

SPLITLAB = [sys.executable, "-m", "chaos.cli.main"]
SAME_ON_EVERY_MASTER = ("format", "run_id", "status", "checks", "counts", "history")
SPARK_JVMS = (standalone.MASTER_CLASS, standalone.WORKER_CLASS, "CoarseGrainedExecutorBackend")


def _proc_text(pid: str, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:  # gone meanwhile, or not ours
        return b""


def cluster_processes(state_dir: Path, master_url: str) -> list[str]:
    """Command lines of the live processes that belong to the cluster of `state_dir`, read from /proc: those with
    its mark in their environment, and every Spark master, worker or executor JVM that names its master URL or
    its state directory (in case the mark were lost)."""
    mark = f"{standalone.MARK_ENV}={state_dir}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        cmdline = _proc_text(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace")
        if not cmdline:  # a zombie or a kernel thread
            continue
        marked = mark in _proc_text(pid, "environ").split(b"\0")
        named = any(jvm in cmdline for jvm in SPARK_JVMS) and (master_url in cmdline or str(state_dir) in cmdline
                                                              or f"--port {master_url.rsplit(':', 1)[1]}" in cmdline)
        if marked or named:
            found.append(f"{pid}: {cmdline[:300]}")
    return found


@pytest.fixture
def cluster(tmp_path):
    """The environment of the verbs (a state directory of this test's own, no analysis service, no master from
    the caller's environment, no PYSPARK_PYTHON, a `python3` and `python` on PATH that fail) and the state
    directory; stops whatever cluster is left there at teardown."""
    state_dir = (tmp_path / "spark").resolve()
    stubs = tmp_path / "stub-bin"
    stubs.mkdir()
    for name in ("python3", "python"):
        (stubs / name).write_text("#!/bin/sh\necho 'not the driver's Python' >&2\nexit 3\n")
        (stubs / name).chmod(0o755)
    env = {**os.environ, standalone.STATE_DIR_ENV: str(state_dir), SOCKET_ENV: str(tmp_path / "no-service.sock"),
           "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}"}
    for name in (MASTER_ENV, "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(name, None)
    yield env, state_dir
    standalone.stop(state_dir, grace_s=5.0)


def _splitlab(argv: list[str], env: dict[str, str], timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(SPLITLAB + argv, env=env, capture_output=True, text=True, timeout=timeout_s)


def _tables(spark, run_dir: Path, summary: dict) -> dict[str, list[str]]:  # noqa: F811
    """Every Parquet table of the analysis, as sorted row texts (NaN equals NaN)."""
    return {name: sorted(map(repr, spark.read.parquet(str(run_dir / path)).collect()))
            for name, path in summary["outputs"]["tables"].items()}


@pytest.mark.slow
def test_two_workers_give_the_same_verdict_and_tables_as_local_and_down_leaves_nothing(
        tmp_path, cluster, spark):  # noqa: F811
    env, state_dir = cluster
    up = ["spark-cluster", "up", "--workers", "2", "--port", "0", "--webui-port", "0"]
    starting = subprocess.Popen(SPLITLAB + up, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    history = pf.with_lost_message()  # the local analysis meanwhile
    local_dir, cluster_dir = history.write(tmp_path / "local" / "r1"), history.write(tmp_path / "cluster" / "r1")
    from pipeline import api

    local = api.analyze(local_dir, spark=spark).to_dict()
    out, err = starting.communicate(timeout=300)
    assert starting.returncode == 0, err[-3000:]
    master_url = out.splitlines()[0]
    assert master_url.startswith("spark://127.0.0.1:"), out
    assert f"--master {master_url}" in out  # how to use it
    running = cluster_processes(state_dir, master_url)
    assert sum(standalone.MASTER_CLASS in p for p in running) == 1, running
    assert sum(standalone.WORKER_CLASS in p for p in running) == 2, running

    again = _splitlab(up, env)
    assert again.returncode == 2 and "already runs" in again.stderr, again.stderr
    status = _splitlab(["spark-cluster", "status"], env)
    assert status.returncode == 0 and f"{master_url}: 2 of 2 worker(s) alive, 2 cores" in status.stdout, status

    remote_run = _splitlab(["analyze", str(cluster_dir), "--master", master_url], env)
    summary = cluster_dir / "report" / "summary.json"
    assert remote_run.returncode == 1 and summary.exists(), remote_run.stderr[-3000:]  # a verdict: `delivery` fails
    remote = json.loads(summary.read_text())
    logs = sorted((state_dir / standalone.WORK_DIR).glob("*/app-*/*/stderr"))
    # Every worker ran an executor of the analysis. Under load the master may replace an executor that was slow
    # to register, so a worker can hold more than one: the count of workers is the claim, not of executors.
    assert {p.parents[2].name for p in logs} == {"worker-1", "worker-2"}, logs
    executors = [p.read_text(errors="replace") for p in logs]
    for log in executors:
        assert "--driver-url\" \"spark://CoarseGrainedScheduler@127.0.0.1:" in log, log[:3000]

    assert remote["analysis"]["master"] == master_url and local["analysis"]["master"].startswith("local")
    assert remote["status"] == local["status"] == "fail"
    assert {k: remote[k] for k in SAME_ON_EVERY_MASTER} == {k: local[k] for k in SAME_ON_EVERY_MASTER}
    assert remote["outputs"] == local["outputs"]
    assert _tables(spark, cluster_dir, remote) == _tables(spark, local_dir, local)

    down = _splitlab(["spark-cluster", "down"], env)
    assert down.returncode == 0 and f"stopped the Spark cluster {master_url}" in down.stdout, down
    assert cluster_processes(state_dir, master_url) == []
    assert not state_dir.exists()
    again = _splitlab(["spark-cluster", "down"], env)  # idempotent
    assert again.returncode == 0 and "no Spark cluster runs" in again.stdout, again
