"""Fixtures of the scenario suite (real containers): run a scenario's variants, the Net bound to a cluster, and
what a failing test prints.

- `run_variants(name, variants=None, seed=None, sets=())` runs the scenario `scenarios/<name>.yaml` under each
  variant (default: all it defines), at the same time (one cluster each), and returns {variant: RunResult} with
  the verdict of each run. The runs share one Spark session. Every cluster is removed and every fault healed
  by the runner, also when a run fails.
- `net_factory(count, seed=0, **up_kwargs)` starts a cluster (the `cluster_factory` of tests/conftest.py) and
  returns (cluster, Net); the Net heals everything at teardown, before the cluster goes.
- When a test fails, each of its runs prints its directory, seed, replay command, verdict, the HTML report
  (drawn then, to keep passing runs fast) and the tail of every node's log.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from scenario_helpers import SCENARIOS, TEST_RUNS, print_run, require_cluster_machine


@pytest.fixture(scope="session")
def spark():
    """One Spark session for every analysis of the session (starting one costs seconds). Same master and
    settings as the pipeline tests' session (tests/unit/pipeline_fixtures.py), so whichever starts first serves
    both in one pytest process: a process can hold only one."""
    from pipeline.session import spark_session

    return spark_session("local[2]", shuffle_partitions=2)


def _failed(request) -> bool:
    rep = getattr(request.node, "rep_call", None)
    return rep is not None and rep.failed


@pytest.fixture
def run_variants(request, spark):
    """Run a scenario's variants side by side; see the module docstring."""
    require_cluster_machine()
    from chaos.harness import runner
    from chaos.harness.load import load_scenario
    from chaos.harness.progress import Progress

    results = []

    def run(name: str, variants: list[str] | None = None, seed: int | None = None, sets: tuple[str, ...] = ()):
        path = SCENARIOS / f"{name}.yaml"
        chosen = variants or list(load_scenario(path, sets).scenario.variants) or [None]
        loaded = [load_scenario(path, sets, v) for v in chosen]

        def one(item):
            return runner.run(item, seed=seed, out=TEST_RUNS, progress=Progress(quiet=True), spark=spark,
                              report=False)

        with ThreadPoolExecutor(max_workers=len(loaded)) as pool:
            futures = [pool.submit(one, item) for item in loaded]
            errors = [f.exception() for f in futures if f.exception() is not None]
            done = [f.result() for f in futures if f.exception() is None]
        results.extend(done)
        if errors:
            raise errors[0]
        return {r.variant or "default": r for r in done}

    yield run
    if _failed(request):
        for result in results:
            print_run(result)


@pytest.fixture
def net_factory(cluster_factory):
    """(cluster, Net) pairs on fresh clusters; every Net heals at teardown."""
    from chaos.net import Net

    nets = []

    def make(count: int = 3, seed: int = 0, **up_kwargs):
        up_kwargs.setdefault("runs_dir", TEST_RUNS)
        cluster = cluster_factory(count, **up_kwargs)
        net = Net(cluster, seed=seed)
        nets.append(net)
        return cluster, net

    yield make
    for net in nets:
        net.heal_all()
