"""Helpers of the scenario tests: what a failing test prints about a run, and assertion messages."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from node.errors import SplitlabError

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"
TEST_RUNS = REPO / "runs" / "tests"
LOG_TAIL_LINES = 25


def require_cluster_machine() -> None:
    """Fail (not skip) when this machine cannot run real containers."""
    if os.geteuid() != 0 or shutil.which("docker") is None:
        pytest.fail("scenario tests need root and Docker -- run 'make test' as root, or 'make unit'", pytrace=False)


def print_run(result) -> None:
    """Everything a reader of a failed test needs about one run."""
    from pipeline.api import analyze

    if result.summary is not None and not result.report_html.exists():
        try:
            analyze(result.run_dir)  # the report was skipped to keep passing runs fast
        except SplitlabError as exc:
            print(f"(report of {result.run_id} not drawn: {exc})")
    print(f"\n=== {result.describe()}")
    for o in result.verdict.outcomes:
        print(f"  {'ok ' if o.held else 'BAD'} {o.check}: expected {o.expected}, got {o.actual}: {o.reason}")
    for log in sorted((result.run_dir / "logs").glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        print(f"--- {log.stem} (last {len(lines)} lines of {log}) ---")
        print("\n".join(lines))


def held(runs: dict) -> str:
    """An assertion message: which expectations did not hold, and where to look."""
    lines = []
    for variant, result in runs.items():
        bad = [o for o in result.verdict.outcomes if not o.held]
        lines += [f"{variant}: {o.check} expected {o.expected}, got {o.actual} ({o.reason})" for o in bad]
        lines.append(f"{variant}: {result.run_dir} (seed {result.seed}; splitlab replay {result.run_dir})")
    return "\n".join(lines)
