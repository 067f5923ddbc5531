"""`splitlab analyze` (chaos.cli.analysis, through the one tree): exit codes, outputs on disk, check parameters."""
from __future__ import annotations

import json

import pytest

import pipeline_fixtures as pf
from pipeline_fixtures import spark  # noqa: F401  (the shared session fixture)

from chaos.cli.main import main as splitlab
from node.errors import UsageError
from pipeline.checks import CHECKS
from pipeline.params import parse_assignments, resolve
from pipeline.master import MASTER_ENV


@pytest.fixture
def no_master_env(monkeypatch):
    monkeypatch.delenv(MASTER_ENV, raising=False)


def test_clean_run_exits_0_and_writes_summary_report_and_tables(tmp_path, spark, no_master_env, capsys):  # noqa: F811
    run_dir = pf.clean_scenario().write(tmp_path / "r")

    assert splitlab(["analyze", str(run_dir)]) == 0

    report = run_dir / "report"
    summary = json.loads((report / "summary.json").read_text())
    assert summary["format"] == "splitlab-summary/1"
    assert summary["status"] == "ok"
    assert list(summary["checks"]) == [c.name for c in CHECKS]
    assert all(set(c) == {"status", "reason", "details", "params"} for c in summary["checks"].values())
    assert summary["outputs"]["report_html"] == "report/report.html"
    html = (report / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4
    for name, rel in summary["outputs"]["tables"].items():
        assert list((run_dir / rel).glob("*.parquet")), name
    pairs = spark.read.parquet(str(run_dir / summary["outputs"]["tables"]["pairs"]))
    assert pairs.agg({"expected": "sum"}).collect()[0][0] == 28
    assert "stale_link" in capsys.readouterr().out


def test_failing_check_exits_1_and_parameters_reach_the_check(tmp_path, spark, no_master_env):  # noqa: F811
    run_dir = pf.with_endless_retransmission(requests=25).write(tmp_path / "r")

    assert splitlab(["analyze", str(run_dir), "--no-report"]) == 1
    assert not (run_dir / "report" / "report.html").exists()
    assert splitlab(["analyze", str(run_dir), "--no-report",
                         "--check-param", "endless_retransmission.min_requests=30"]) == 0
    summary = json.loads((run_dir / "report" / "summary.json").read_text())
    assert summary["checks"]["endless_retransmission"]["params"]["min_requests"] == 30


@pytest.mark.parametrize("argv", [
    ["{missing}"],
    ["{run}", "--check-param", "nosuchcheck.x=1"],
    ["{run}", "--check-param", "delivery.nosuchkey=1"],
    ["{run}", "--check-param", "delivery.max_missing=lots"],
    ["{run}", "--check-param", "no-dot-or-equals"],
    ["{run}", "--bogus-option"],
    ["{run}", "--diagram-window", "9:5"],
    ["{run}", "--diagram-window", "soon"],
    ["{run}", "--diagram-arrows", "0"],
])
def test_usage_errors_exit_2(argv, tmp_path, no_master_env, capsys):
    run_dir = pf.clean_scenario().write(tmp_path / "r")
    args = [a.format(missing=tmp_path / "nope", run=run_dir) for a in argv]

    assert splitlab(["analyze", *args]) == 2
    assert capsys.readouterr().err.strip()


def test_help_exits_0(capsys):
    assert splitlab(["analyze", "--help"]) == 0
    assert "--check-param" in capsys.readouterr().out


def test_parse_assignments_reads_json_values_else_text():
    assert parse_assignments(["a.x=3", "a.y=1.5", "b.z=true", "b.w=n3,n4", "c.v=null", 'c.l=["n1"]']) == {
        "a": {"x": 3, "y": 1.5}, "b": {"z": True, "w": "n3,n4"}, "c": {"v": None, "l": ["n1"]}}


def test_resolve_merges_over_defaults_and_coerces():
    params = resolve(CHECKS, {"delivery": {"ignore_receivers": "n3, n4", "max_missing": 2.0},
                              "latency": {"max_p99_ms": 250}})
    assert params["delivery"]["ignore_receivers"] == ["n3", "n4"]
    assert params["delivery"]["max_missing"] == 2
    assert params["latency"]["max_p99_ms"] == 250.0
    assert params["endless_retransmission"]["min_requests"] == 20
    with pytest.raises(UsageError, match="must be an integer"):
        resolve(CHECKS, {"fifo": {"max_violations": 0.5}})
    with pytest.raises(UsageError, match="true or false"):
        resolve(CHECKS, {"views": {"require_all_members": 1}})
