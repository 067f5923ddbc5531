"""The analysis on a Spark standalone cluster (master and worker on 127.0.0.1, started here from the Spark that
pyspark ships) gives the same summary as on the local session; also runs `python -m pipeline`."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pipeline_fixtures as pf
from pipeline_fixtures import analyzed, spark  # noqa: F401  (shared fixtures)

SAME_ON_EVERY_MASTER = ("format", "run_id", "status", "checks", "counts", "history")


@pytest.mark.slow
def test_standalone_cluster_gives_the_same_summary_as_local(tmp_path, analyzed):  # noqa: F811
    local = analyzed(pf.with_lost_message)
    cluster_dir = tmp_path / "cluster" / "r1"
    shutil.copytree(Path(local.run_dir) / "events", cluster_dir / "events")
    local = local.to_dict()

    with pf.standalone_cluster(tmp_path / "spark") as master_url:
        proc = subprocess.run([sys.executable, "-m", "pipeline", str(cluster_dir), "--master", master_url,
                               "--no-report"], env=pf.cluster_env(), capture_output=True, text=True, timeout=600)

    assert proc.returncode == 1, proc.stderr[-3000:]  # the lost message fails `delivery`
    remote = json.loads((cluster_dir / "report" / "summary.json").read_text())
    assert remote["analysis"]["master"] == master_url
    assert {k: remote[k] for k in SAME_ON_EVERY_MASTER} == {k: local[k] for k in SAME_ON_EVERY_MASTER}
