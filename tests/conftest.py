"""Shared pytest fixtures: a cluster factory over real containers that always cleans up, and failure reports.

`cluster_factory(n, **kwargs)` starts a run with `chaos.cluster.up` and removes it at teardown, also when the
test failed; a failed test first prints the run directory and the logs of every node. A session-end sweep
removes every run under runs/tests that this session left behind, however it was started (`cluster_factory`,
the scenario runner, a module fixture) and however its own cleanup failed.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from node.errors import UsageError

REPO = Path(__file__).resolve().parent.parent
TEST_RUNS = REPO / "runs" / "tests"
_started: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def _require_cluster_machine() -> None:
    problems = []
    if os.geteuid() != 0:
        problems.append("cluster tests need root (the controller enters container namespaces)")
    if shutil.which("docker") is None:
        problems.append("docker is not installed")
    if problems:
        pytest.fail("; ".join(problems) + " -- run 'make test' as root, or 'make unit' for unit tests only",
                    pytrace=False)


@pytest.fixture
def cluster_factory(request):
    """Start clusters for one test; every one is removed at teardown, logs printed first if the test failed."""
    _require_cluster_machine()
    from chaos import cluster as cl

    mine = []

    def factory(count: int = 3, **kwargs):
        kwargs.setdefault("runs_dir", TEST_RUNS)
        run = cl.up(count, **kwargs)
        mine.append(run)
        _started.append(run.run_id)
        return run

    yield factory
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for run in mine:
        if failed:
            _print_failure(run)
        try:
            cl.down(run.run_id)
        except UsageError:
            pass  # the test itself already took it down


def _print_failure(run) -> None:
    import docker

    print(f"\n=== run {run.run_id}: directory {run.run_dir} (history in events/) ===")
    client = docker.from_env()
    for node in run.nodes:
        try:
            logs = client.containers.get(node.container).logs(tail=40).decode(errors="replace")
        except docker.errors.DockerException as exc:
            logs = f"(no logs: {exc})"
        print(f"--- {node.name} ({node.container}) ---\n{logs.rstrip()}")


def _test_runs_up() -> set[str]:
    """Run ids of the runs under runs/tests that have containers or networks now; empty without Docker (unit
    tests need none)."""
    from chaos import cluster as cl
    from node.errors import EnvironmentProblem

    try:
        runs = cl.ps()
    except EnvironmentProblem:
        return set()
    return {r.run_id for r in runs if r.run_id in _started or Path(r.run_dir).is_relative_to(TEST_RUNS)}


_before_session: set[str] = set()


def pytest_sessionstart(session):
    _before_session.update(_test_runs_up())  # a run someone left before this session is not this session's


def pytest_sessionfinish(session, exitstatus):
    from chaos import cluster as cl

    left = _test_runs_up() - _before_session
    for run_id in sorted(left):
        print(f"\nsweeping run {run_id}: this session left it behind")
        cl.down(run_id)
