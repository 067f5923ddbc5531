"""Shared pytest fixtures: a cluster factory over real containers that always cleans up, and failure reports.

`cluster_factory(n, **kwargs)` starts a run with `chaos.cluster.up` and removes it at teardown, also when the
test failed; a failed test first prints the run directory and the logs of every node. A session-end sweep
removes any run this session started that is still there (e.g. after an interrupted teardown).
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


def pytest_sessionfinish(session, exitstatus):
    if not _started:
        return
    from chaos import cluster as cl

    left = {r.run_id for r in cl.ps()} & set(_started)
    for run_id in left:
        cl.down(run_id)
