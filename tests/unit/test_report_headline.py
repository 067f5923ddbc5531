"""The report answers the question first: for a scenario run, its headline says whether every check answered what
the scenario expected (and what that was), the checks' raw status below; a run analysed without a scenario keeps
the plain status. Judged from the rendered HTML and from a real analysis of a history with an expectation file, whose
verdict comes (summary.json, the callback) before the tables and the report."""
from __future__ import annotations

import json
import re

import pytest

import pipeline_fixtures as pf
from pipeline_fixtures import spark  # noqa: F401  (the shared Spark session)
from node.errors import HistoryError
from pipeline import api, html_report
from pipeline.checks.base import CheckResult
from pipeline.summary import Summary
from pipeline.verdict import EXPECTATION_FILE, read_expectation, run_verdict, write_expectation

HEADLINE = re.compile(r'<span id="headline"><span class="status"[^>]*>([^<]*)</span></span>')
RAW = re.compile(r'<p id="raw-status">checks: <span class="status"[^>]*>([^<]*)</span></p>')


def _summary(statuses: dict[str, str], verdict: dict | None) -> Summary:
    checks = {name: CheckResult(name, status, f"{name} is {status}", {}, {}) for name, status in statuses.items()}
    return Summary(run_id="r1", run_dir="/runs/r1", checks=checks, counts={}, history={
        "events": 0, "lines": 0, "bad_lines": 0, "bad_line_examples": [], "truncated": []}, verdict=verdict)


def _expectation(expected: dict[str, str]) -> dict:
    return {"scenario": "jgrp1873", "variant": "unicast2", "expected": expected,
            "harness": {"workloads": {"status": "ok", "reason": "3 workload(s) finished"}}}


def test_an_expected_failure_is_headlined_as_expected_with_the_raw_fail_below() -> None:
    statuses = {"delivery": "fail", "sync": "ok"}
    verdict = run_verdict(_expectation({"delivery": "fail", "workloads": "ok"}),
                          {n: (s, "") for n, s in statuses.items()})
    page = html_report.render(_summary(statuses, verdict), {})
    assert HEADLINE.findall(page) == ["as expected"]
    assert RAW.findall(page) == ["fail"]
    assert "variant <code>unicast2</code> expected: delivery fail, workloads ok" in page


def test_an_unexpected_outcome_is_headlined_not_as_expected_with_what_came_instead() -> None:
    statuses = {"delivery": "fail"}
    verdict = run_verdict(_expectation({"delivery": "ok"}), {n: (s, "") for n, s in statuses.items()})
    page = html_report.render(_summary(statuses, verdict), {})
    assert HEADLINE.findall(page) == ["NOT as expected"]
    assert "expected: delivery ok (got fail)" in page


def test_a_run_without_a_scenario_keeps_the_plain_status() -> None:
    page = html_report.render(_summary({"delivery": "fail"}, None), {})
    assert HEADLINE.findall(page) == ["fail"]
    assert not RAW.findall(page) and 'id="expectation"' not in page


def test_an_expectation_file_that_is_not_one_is_a_clear_error(tmp_path) -> None:
    (tmp_path / EXPECTATION_FILE).write_text('{"format": "something else"}')
    with pytest.raises(HistoryError, match="not a splitlab-expectation/1 file"):
        read_expectation(tmp_path)
    (tmp_path / EXPECTATION_FILE).write_text("{")
    with pytest.raises(HistoryError, match="cannot read"):
        read_expectation(tmp_path)


def test_the_analysis_of_a_scenario_run_judges_it_into_the_summary_and_the_headline(tmp_path, spark):  # noqa: F811
    """A history where n2 never gets n1's unicast #2 (delivery fails), with the expectation a scenario run leaves
    beside it: the summary carries the verdict and the report's headline says "as expected"."""
    s = pf.Scenario(run_id="headline")
    for i, node in enumerate(("n1", "n2")):
        s.add(node, 0.0, "node_start", boot=pf.BOOT, data_ip=f"10.9.0.{i + 2}", control_ip="10.1.0.1",
              members=["n1", "n2"], config={"unicast": "unicast2"})
    s.unicast("n1", "n2", 0.1, 0.102, seqno=1)
    s.unicast("n1", "n2", 0.2, None, seqno=2)
    for node in ("n1", "n2"):
        s.add(node, 1.0, "node_stop", reason="signal")
    run_dir = s.write(tmp_path / "run")
    write_expectation(run_dir, "jgrp1873", "unicast2", {"delivery": "fail"}, {"workloads": ("ok", "finished")})
    first: list[tuple[bool, bool]] = []  # at the verdict: (summary.json written, report.html drawn)
    summary = api.analyze(run_dir, spark=spark, on_verdict=lambda s: first.append((
        (run_dir / "report" / "summary.json").exists(), (run_dir / "report" / "report.html").exists())))
    assert first == [(True, False)], "the verdict comes before the report"
    assert summary.checks["delivery"].status == "fail"
    saved = json.loads((run_dir / "report" / "summary.json").read_text())
    assert saved["outputs"]["report_html"] == "report/report.html" and saved["outputs"]["tables"]
    assert 0 < saved["analysis"]["verdict_s"] <= saved["analysis"]["elapsed_s"]
    assert saved["verdict"]["held"] is True and saved["verdict"]["variant"] == "unicast2"
    assert [(o["check"], o["expected"], o["actual"]) for o in saved["verdict"]["outcomes"]] == [
        ("delivery", "fail", "fail")]
    page = (run_dir / "report" / "report.html").read_text()
    assert HEADLINE.findall(page) == ["as expected"] and RAW.findall(page) == ["fail"]
