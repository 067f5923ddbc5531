"""splitlab as a pytest plugin: installing splitlab registers it (entry point `pytest11: splitlab`, the
pytest-docker convention), so any project's test suite gets clusters of real containers, the Net bound to one,
scenario runs and their verdicts, cleanup that survives failures, and a printout of what a failed test ran.

Fixtures
    splitlab_up          factory: `splitlab_up(count=3, **up_kwargs) -> Cluster` (chaos.cluster.lifecycle.up);
                         every cluster it started is removed at teardown, also when the test failed
    splitlab_net         factory: `splitlab_net(count=3, seed=0, **up_kwargs) -> (Cluster, DockerNet)` on a fresh
                         cluster; every fault healed at teardown, before the cluster goes
    splitlab_scenario    runner: `splitlab_scenario(path_or_loaded, variant=None, *, seed=None, sets=(),
                         sim=False) -> RunResult` (`.verdict.held`, `.status(check)`, `.run_dir`);
                         `.variants(path, variants=None, ...) -> {variant: RunResult}` runs them side by side;
                         `.track(result)` adds a run made elsewhere (e.g. chaos.harness.torture) to the printout
    splitlab_spark       session: the SparkSession every analysis shares (pipeline.session.spark_session on
                         local[2] unless $SPLITLAB_SPARK_MASTER names one); left running: a process holds one;
                         None when the warm analysis service is up (`splitlab spark up`), which then serves them
    splitlab_runs_dir    session: this session's own run directory, <--splitlab-runs>/<session id>/

Marker
    splitlab_cluster     needs root and Docker: the test fails (never skips) on a machine without them. Tests
                         using splitlab_up or splitlab_net get it by themselves; `-m "not splitlab_cluster"`
                         deselects them.

Options
    --splitlab-runs DIR  where sessions put their run directories (default: <rootdir>/runs/tests)
    --splitlab-keep      for debugging: the clusters of splitlab_up / splitlab_net stay up with their faults
                         (`splitlab down --run-id ID` removes one); scenario runs remove their own as always

A failed test's report gets a section "splitlab runs": for each run of the test its directory, report, seed,
replay command, the verdict's outcomes and the tail of every node's log.

At the end of the session the sweep removes every run of THIS session that still has containers or networks
(its directory is in the session's directory, or a fixture started it), however it was started and however its
own cleanup failed; runs of other sessions (a second pytest, xdist workers) are never touched.
"""
from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pytest

from node.errors import EnvironmentProblem, SplitlabError, UsageError

LOG_TAIL_LINES = 25
SPARK_MASTER = "local[2]"
SPARK_SHUFFLE_PARTITIONS = 2
CLUSTER_FIXTURES = frozenset({"splitlab_up", "splitlab_net"})
MARKER = "splitlab_cluster"
SECTION = "splitlab runs"


def run_scenario(loaded: Any, *, sim: bool, seed: int | None, out: Path, spark: Any) -> Any:
    """One scenario run, judged (the HTML report is drawn only if the test fails): the one place that names the
    harness's entry point."""
    from chaos.harness import runner
    from chaos.harness.progress import Progress

    return runner.run(loaded, backend="sim" if sim else "docker", seed=seed, out=out,
                      progress=Progress(quiet=True), spark=spark, report=False)


@dataclass
class SessionRuns:
    """Where this session's runs go, which of them its fixtures started, and whether to keep them up."""

    base: Path
    session_id: str
    keep: bool = False
    started: set[str] = field(default_factory=set)

    @property
    def dir(self) -> Path:
        return self.base / self.session_id

    def ours(self, run_id: str) -> bool:
        """Whether this session started the run: a fixture did, or its directory is in the session's (made before
        any container starts, so it names runs whose start or removal failed half-way too)."""
        return run_id in self.started or (self.dir / run_id).is_dir()


_SESSION = pytest.StashKey[SessionRuns]()
_DESCRIBERS = pytest.StashKey[list[Callable[[], str]]]()


def cluster_machine_problems() -> list[str]:
    """Why this machine cannot run real containers (empty when it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("it needs root (the controller enters container namespaces)")
    if shutil.which("docker") is None:
        problems.append("docker is not installed")
    return problems


def require_cluster_machine() -> None:
    """Fail the test (never skip it) when this machine cannot run real containers."""
    problems = cluster_machine_problems()
    if problems:
        pytest.fail(f"this test runs real containers, but {'; '.join(problems)} -- run it as root on a machine "
                    f"with Docker, or deselect it with -m 'not {MARKER}'", pytrace=False)


def sweep(runs: SessionRuns, lister: Callable[[], Iterable[Any]], remover: Callable[[str], None]) -> list[str]:
    """Remove (unless `runs.keep`) every run `lister()` shows up that this session started; returns their ids.
    `lister` gives objects with a `run_id` (chaos.cluster.lifecycle.ps), `remover` takes one down."""
    left = sorted(r.run_id for r in lister() if runs.ours(r.run_id))
    if not runs.keep:
        _each(left, remover, ignore=UsageError)  # UsageError: it went meanwhile
    return left


def _each(items: Iterable[Any], action: Callable[[Any], Any], ignore: type[BaseException] | tuple = ()) -> None:
    """`action` on every item even when one fails; then the first failure (other than `ignore`) is raised."""
    errors = []
    for item in items:
        try:
            action(item)
        except ignore:
            pass
        except Exception as exc:  # noqa: BLE001 -- re-raised below, after the others were tried
            errors.append(exc)
    if errors:
        raise errors[0]


def _tail(name: str, where: str, text: str) -> list[str]:
    lines = text.splitlines()[-LOG_TAIL_LINES:]
    return [f"--- {name} (last {len(lines)} lines of {where}) ---", *lines]


def container_log(container: str) -> str:
    """The end of a container's output, or why there is none."""
    import docker.errors

    from chaos.cluster import lifecycle

    try:
        return lifecycle.docker_client().containers.get(container).logs(tail=LOG_TAIL_LINES).decode(errors="replace")
    except (docker.errors.DockerException, SplitlabError) as exc:
        return f"(no logs: {exc})"


def describe_cluster(cluster: Any, kept: bool) -> str:
    """What a failed test prints about a cluster of splitlab_up: where its history is, each node's log tail."""
    fate = "kept up (--splitlab-keep)" if kept else "removed at teardown"
    lines = [f"=== run {cluster.run_id}: {cluster.run_dir} (history in events/; {fate}; "
             f"splitlab down --run-id {cluster.run_id})"]
    from chaos.hosts.multi import container_log as remote_log
    from chaos.hosts.remote import closing, run_hosts

    with closing(run_hosts(cluster.run_dir)) as remotes:  # {} for a run on this machine
        for node in cluster.nodes:
            if node.host:
                lines += _tail(node.name, f"container {node.container} on host {node.host}",
                               remote_log(remotes[node.host], node.container, LOG_TAIL_LINES))
            else:
                lines += _tail(node.name, f"container {node.container}", container_log(node.container))
    return "\n".join(lines)



def _draw_report(result: Any) -> str | None:
    """Draw the HTML report a passing run skipped, with the check parameters of its own expectations; returns why
    it could not be drawn, or None."""
    if result.summary is None or result.report_html.exists():
        return None
    from chaos.harness.expect import check_params
    from chaos.harness.load import from_data
    from pipeline.api import analyze

    try:
        loaded = from_data(result.schedule.scenario, result.schedule.source, result.schedule.variant)
        analyze(result.run_dir, params=check_params(loaded.expectations()), report=True)
    except SplitlabError as exc:
        return f"(report not drawn: {exc})"
    return None


def describe_result(result: Any) -> str:
    """What a failed test prints about a scenario run: directory, report, seed, replay command, the verdict's
    outcomes and the tail of every node's log."""
    problem = _draw_report(result)
    lines = [f"=== {result.describe()}", *([problem] if problem else [])]
    lines += [f"  {'ok ' if o.held else 'BAD'} {o.check}: expected {o.expected}, got {o.actual}: {o.reason}"
              for o in result.verdict.outcomes]
    for log in sorted((result.run_dir / "logs").glob("*.log")):
        lines += _tail(log.stem, str(log), log.read_text(errors="replace"))
    return "\n".join(lines)


def _describers(item: pytest.Item) -> list[Callable[[], str]]:
    return item.stash.setdefault(_DESCRIBERS, [])


class ScenarioRunner:
    """The `splitlab_scenario` fixture: scenario runs into the session's directory, each printed if the test
    fails (see the module docstring)."""

    def __init__(self, runs_dir: Path, spark: Any, describers: list[Callable[[], str]]) -> None:
        self.runs_dir = runs_dir
        self.spark = spark
        self.describers = describers

    def __call__(self, scenario: Any, variant: str | None = None, *, seed: int | None = None,
                 sets: Iterable[str] = (), sim: bool = False) -> Any:
        """Run one variant of a scenario file (or an already loaded scenario) and return its RunResult."""
        from chaos.harness.load import Loaded, load_scenario

        loaded = scenario if isinstance(scenario, Loaded) else load_scenario(scenario, sets, variant)
        if not sim:
            require_cluster_machine()
        return self._run(loaded, seed, sim)

    def variants(self, scenario: Path | str, variants: list[str] | None = None, *, seed: int | None = None,
                 sets: Iterable[str] = (), sim: bool = False) -> dict[str, Any]:
        """Run a scenario under each variant (default: all it defines) at the same time, one cluster each;
        returns {variant or "default": RunResult}."""
        from chaos.harness.load import load_scenario

        sets = tuple(sets)
        chosen = variants or list(load_scenario(scenario, sets).scenario.variants) or [None]
        loaded = [load_scenario(scenario, sets, v) for v in chosen]
        if not sim:
            require_cluster_machine()
        with ThreadPoolExecutor(max_workers=len(loaded)) as pool:
            futures = [pool.submit(self._run, item, seed, sim) for item in loaded]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]
        return {r.variant or "default": r for r in (f.result() for f in futures)}

    def track(self, result: Any) -> Any:
        """Print `result` (a RunResult) too if the test fails; returns it."""
        self.describers.append(lambda: describe_result(result))
        return result

    def _run(self, loaded: Any, seed: int | None, sim: bool) -> Any:
        return self.track(run_scenario(loaded, sim=sim, seed=seed, out=self.runs_dir, spark=self.spark))


# -- hooks --------------------------------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("splitlab", "splitlab clusters and scenario runs")
    group.addoption("--splitlab-runs", metavar="DIR", default=None,
                    help="where sessions put their run directories, one per session (default: <rootdir>/runs/tests)")
    group.addoption("--splitlab-keep", action="store_true", default=False,
                    help="debugging: leave the clusters of splitlab_up / splitlab_net up with their faults")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: needs root and Docker (real containers); fails, never skips, "
                                       "without them")
    chosen = config.getoption("splitlab_runs")
    base = config.invocation_params.dir / chosen if chosen else config.rootpath / "runs" / "tests"
    session_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    config.stash[_SESSION] = SessionRuns(base.resolve(), session_id, keep=config.getoption("splitlab_keep"))


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(MARKER)


@pytest.hookimpl(tryfirst=True)  # before the fixtures are set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker(MARKER) is not None:
        require_cluster_machine()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    report = yield
    describers = item.stash.get(_DESCRIBERS, [])
    if report.when == "call" and report.failed and describers:
        report.sections.append((SECTION, "\n".join(describe() for describe in describers)))
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    runs = session.config.stash[_SESSION]
    if not runs.dir.is_dir() and not runs.started:
        return  # nothing was started: no need to ask Docker
    from chaos.cluster import lifecycle

    try:
        up_now = lifecycle.ps()
    except EnvironmentProblem:
        return  # no Docker engine answers: no container of ours can be up
    try:
        left = sweep(runs, lambda: up_now, lifecycle.down)
    except SplitlabError as exc:
        _say(session.config, f"splitlab: the sweep could not remove every run of this session: {exc}")
        return
    for run_id in left:
        what = "kept up (--splitlab-keep)" if runs.keep else "swept: this session left it up"
        _say(session.config, f"splitlab: run {run_id} {what}; its directory is {runs.dir / run_id}")


def _say(config: pytest.Config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)


# -- fixtures -----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def splitlab_runs_dir(pytestconfig: pytest.Config) -> Path:
    """This session's own run directory (see the module docstring); made on first use."""
    path = pytestconfig.stash[_SESSION].dir
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def splitlab_spark() -> Any:
    """The SparkSession every analysis of the session shares (starting one costs seconds); None when the warm
    analysis service is up (`splitlab spark up`): `pipeline.api.analyze` then hands every run to it. Its JVM is
    a short-lived one (`pipeline.jvm_archive`: C1 only, the serial collector, the class archive): a test session
    analyses small histories for minutes, where C2 compiling Spark costs more CPU than it saves (the pipeline's
    unit tests: the JVM's CPU 131.6 s -> 91.6 s, the same wall time alone, 2026-12-01)."""
    from pipeline import service_client
    from pipeline.master import MASTER_ENV
    from pipeline.session import spark_session

    if service_client.status() is not None:
        return None

    return spark_session(None if os.environ.get(MASTER_ENV) else SPARK_MASTER,
                         shuffle_partitions=SPARK_SHUFFLE_PARTITIONS, short_lived=True)


@pytest.fixture
def splitlab_up(request: pytest.FixtureRequest, pytestconfig: pytest.Config,
                splitlab_runs_dir: Path) -> Iterator[Callable[..., Any]]:
    """`splitlab_up(count=3, **up_kwargs) -> Cluster`; every cluster removed at teardown (see the module
    docstring)."""
    require_cluster_machine()
    from chaos.cluster import lifecycle

    runs = pytestconfig.stash[_SESSION]
    mine: list[str] = []

    def up(count: int = 3, **up_kwargs: Any) -> Any:
        up_kwargs.setdefault("runs_dir", splitlab_runs_dir)
        cluster = lifecycle.up(count, **up_kwargs)
        runs.started.add(cluster.run_id)
        mine.append(cluster.run_id)
        _describers(request.node).append(lambda: describe_cluster(cluster, runs.keep))
        return cluster

    yield up
    if not runs.keep:
        _each(mine, lifecycle.down, ignore=UsageError)  # UsageError: the test took it down itself


@pytest.fixture
def splitlab_net(pytestconfig: pytest.Config, splitlab_up: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """`splitlab_net(count=3, seed=0, **up_kwargs) -> (Cluster, DockerNet)`; every Net heals at teardown, before
    its cluster goes."""
    from chaos.net.docker import DockerNet

    nets: list[Any] = []

    def make(count: int = 3, seed: int = 0, **up_kwargs: Any) -> tuple[Any, Any]:
        cluster = splitlab_up(count, **up_kwargs)
        net = DockerNet(cluster, seed=seed)
        nets.append(net)
        return cluster, net

    yield make
    if not pytestconfig.stash[_SESSION].keep:
        _each(nets, lambda net: net.heal_all())


@pytest.fixture
def splitlab_scenario(request: pytest.FixtureRequest, splitlab_runs_dir: Path, splitlab_spark: Any) -> ScenarioRunner:
    """Scenario runs with their verdicts (see `ScenarioRunner`)."""
    return ScenarioRunner(splitlab_runs_dir, splitlab_spark, _describers(request.node))
