"""splitlab's pytest plugin (chaos/harness/pytest_plugin.py), as a user's suite meets it through its `pytest11`
entry point: the README's test file runs verbatim in the simulator and passes, with its container test deselected
by the marker the plugin gives it; a failing verdict prints the run directory, seed and replay command; the marker
is registered and fails (never skips) a test on a machine without root and Docker; a cluster of `splitlab_up` is
removed at teardown of a failed test, and when that removal fails the session-end sweep removes it; the sweep
removes only this session's runs. Clusters are faked here (no Docker); the two scenario runs use the simulator."""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import pipeline.plots  # noqa: F401  (see below)
import pipeline.sequence_source  # noqa: F401
from chaos.cluster import lifecycle
from chaos.harness import pytest_plugin
from chaos.harness.pytest_plugin import SessionRuns, sweep
from node.errors import EnvironmentProblem, UsageError

# The analysis imports the report's modules when it first draws one (`pipeline.api._write_report`). pytester's
# in-process runs restore `sys.modules` when they end, which removes what a run imported but leaves it bound on its
# package: a later `from pipeline import plots` in this worker got the removed module, whose matplotlib classes were
# no longer matplotlib's (`Figure()` failed in matplotlib's own `normalize_kwargs`: "'Figure' object has no
# attribute 'items'", every later report of the worker). Imported here first, they outlive the runs' restores.

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parents[2]
QUIET = ("-p", "no:cacheprovider", "-p", "no:asyncio")


def readme_example() -> str:
    """The test file of the README's section "Testing your protocol with pytest"."""
    section = (REPO / "README.md").read_text().split("## Testing your protocol with pytest", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readme_example_runs_verbatim_and_its_container_test_is_deselected(pytester) -> None:
    (pytester.path / "scenarios").mkdir()
    shutil.copy(REPO / "scenarios" / "jgrp1873.yaml", pytester.path / "scenarios")
    pytester.makepyfile(test_my_protocol=readme_example())
    result = pytester.runpytest("-m", "not splitlab_cluster", *QUIET)
    result.assert_outcomes(passed=1, deselected=1)
    assert list((pytester.path / "runs" / "tests").glob("*/*/verdict.json")), "the run is in the session's dir"


TINY = """\
cluster: {nodes: 2}
steps:
  - at_s: 0
    workload: {kind: unicast, from: n1, to: n2, count: 5, size: 10}
duration_s: 2
settle_s: 1
expect:
  default: {delivery: fail}
"""


@pytest.mark.slow
def test_a_failing_verdict_prints_the_run_directory_seed_and_replay_command(pytester) -> None:
    pytester.makefile(".yaml", tiny=TINY)
    pytester.makepyfile(test_tiny="""
        def test_every_message_is_lost(splitlab_scenario):
            assert splitlab_scenario("tiny.yaml", seed=5, sim=True).verdict.held
    """)
    result = pytester.runpytest(*QUIET)
    result.assert_outcomes(failed=1)
    [run_dir] = (pytester.path / "runs" / "tests").glob("*/*/verdict.json")
    run_dir = run_dir.parent
    out = result.stdout.str()
    assert "splitlab runs" in out and f"seed 5): {run_dir}" in out, out
    assert f"replay: splitlab replay {run_dir}" in out
    assert "BAD delivery: expected fail, got ok" in out
    assert (run_dir / "report" / "report.html").exists(), "the report a passing run skips is drawn on failure"


def test_the_marker_is_registered_and_given_to_tests_using_the_cluster_fixtures(pytester, fake_docker) -> None:
    result = pytester.runpytest("--markers", *QUIET)
    result.stdout.fnmatch_lines(["@pytest.mark.splitlab_cluster: needs root and Docker*"])
    pytester.makepyfile("""
        def test_cluster(splitlab_up):
            pass

        def test_net(splitlab_net):
            pass

        def test_plain():
            pass
    """)
    pytester.runpytest("-m", "not splitlab_cluster", *QUIET).assert_outcomes(passed=1, deselected=2)


def test_without_root_or_docker_a_cluster_test_fails_and_never_runs(pytester, monkeypatch, fake_docker) -> None:
    monkeypatch.setattr(pytest_plugin, "cluster_machine_problems", lambda: ["docker is not installed"])
    pytester.makepyfile("""
        import pytest

        def test_uses_the_factory(splitlab_up):
            splitlab_up(2)

        @pytest.mark.splitlab_cluster
        def test_marked():
            raise AssertionError("the body ran")
    """)
    result = pytester.runpytest("-rA", *QUIET)
    result.assert_outcomes(errors=2)
    # one failure section per test (the "short test summary" lines repeat it, cut to the terminal's width)
    reasons = [line for line in result.stdout.lines
               if line.startswith("this test runs real containers, but docker is not installed")]
    assert len(reasons) == 2, result.stdout.str()
    assert "the body ran" not in result.stdout.str() and fake_docker.up_now.keys() == {"r-other"}


class FakeDocker:
    """`lifecycle.up/down/ps` without Docker: `up` makes the run directory as the real one does; the first `down`
    of each run fails (a cleanup that went wrong), so the run stays up for the sweep."""

    def __init__(self) -> None:
        self.up_now: dict[str, Path] = {"r-other": Path("/elsewhere/runs/tests/other-session/r-other")}
        self.downs: list[str] = []

    def up(self, count: int, runs_dir: Path, **_: object) -> SimpleNamespace:
        run_id = f"r{len(self.up_now)}"
        (runs_dir / run_id).mkdir(parents=True)
        self.up_now[run_id] = runs_dir / run_id
        nodes = [SimpleNamespace(name=f"n{i}", container=f"{run_id}-n{i}", host="") for i in range(1, count + 1)]
        return SimpleNamespace(run_id=run_id, run_dir=runs_dir / run_id, nodes=nodes)

    def down(self, run_id: str, log: object = None) -> None:
        self.downs.append(run_id)
        if self.downs.count(run_id) == 1:
            raise EnvironmentProblem(f"compose down of {run_id} timed out")
        del self.up_now[run_id]

    def ps(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(run_id=r, run_dir=str(d)) for r, d in self.up_now.items()]


@pytest.fixture
def fake_docker(monkeypatch) -> FakeDocker:
    fake = FakeDocker()
    for name in ("up", "down", "ps"):
        monkeypatch.setattr(lifecycle, name, getattr(fake, name))
    monkeypatch.setattr(pytest_plugin, "cluster_machine_problems", lambda: [])
    monkeypatch.setattr(pytest_plugin, "container_log", lambda container: f"log line of {container}\n")
    return fake


FAILING_CLUSTER_TEST = """
    def test_fails_with_a_cluster_up(splitlab_up):
        assert splitlab_up(2).run_id == "nothing"
"""


def test_a_failed_tests_cluster_is_printed_removed_and_swept_when_its_removal_failed(pytester, fake_docker) -> None:
    pytester.makepyfile(FAILING_CLUSTER_TEST)
    result = pytester.runpytest(*QUIET)
    result.assert_outcomes(failed=1, errors=1)  # the error: the teardown's down, which failed
    out = result.stdout.str()
    assert "splitlab runs" in out and "--- n2 (last 1 lines of container r1-n2) ---\nlog line of r1-n2" in out
    assert fake_docker.downs == ["r1", "r1"], "torn down at teardown, then by the sweep; never r-other"
    assert "run r1 swept: this session left it up" in out
    assert set(fake_docker.up_now) == {"r-other"}


def test_keep_leaves_the_clusters_up(pytester, fake_docker) -> None:
    pytester.makepyfile(FAILING_CLUSTER_TEST)
    result = pytester.runpytest("--splitlab-keep", *QUIET)
    result.assert_outcomes(failed=1)
    assert fake_docker.downs == [] and "run r1 kept up (--splitlab-keep)" in result.stdout.str()


def test_the_sweep_removes_only_runs_this_session_started(tmp_path) -> None:
    runs = SessionRuns(tmp_path, "mine", started={"r-started"})
    for run_dir in ("mine/r-up", "mine/r-networks-only", "mine/r-gone", "theirs/r-theirs"):
        (tmp_path / run_dir).mkdir(parents=True)
    listed = [SimpleNamespace(run_id="r-up", run_dir=str(tmp_path / "mine" / "r-up")),
              SimpleNamespace(run_id="r-networks-only", run_dir=""),  # containers gone, networks left
              SimpleNamespace(run_id="r-gone", run_dir=str(tmp_path / "mine" / "r-gone")),
              SimpleNamespace(run_id="r-started", run_dir="/somewhere/else/r-started"),
              SimpleNamespace(run_id="r-theirs", run_dir=str(tmp_path / "theirs" / "r-theirs")),
              SimpleNamespace(run_id="r-old", run_dir=str(tmp_path / "r-old"))]
    removed = []

    def remove(run_id: str) -> None:
        removed.append(run_id)
        if run_id == "r-gone":
            raise UsageError(f"no run {run_id!r}")  # went between listing and removal

    expected = ["r-gone", "r-networks-only", "r-started", "r-up"]
    assert sweep(runs, lambda: listed, remove) == expected
    assert removed == expected
    removed.clear()
    runs.keep = True
    assert sweep(runs, lambda: listed, remove) == expected and removed == []


def test_the_sessions_spark_is_a_short_lived_jvm(pytester, monkeypatch) -> None:
    """`splitlab_spark` starts a short-lived JVM (C1 only, the serial collector, the class archive): a test session
    analyses small histories for minutes (`pipeline.jvm_archive`); none while the warm service is up."""
    from pipeline import service_client, session

    asked: list[dict] = []
    monkeypatch.setattr(service_client, "status", lambda *args, **kwargs: None)
    monkeypatch.setattr(session, "spark_session", lambda *args, **kwargs: asked.append(kwargs) or "the session")
    pytester.makepyfile(test_spark="""
        def test_it(splitlab_spark):
            assert splitlab_spark == "the session"
    """)
    pytester.runpytest(*QUIET).assert_outcomes(passed=1)
    assert [kwargs.get("short_lived") for kwargs in asked] == [True]
