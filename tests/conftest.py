"""The suite's fixtures come from splitlab's own pytest plugin (chaos/harness/pytest_plugin.py, registered as the
`pytest11` entry point `splitlab`): this file refuses to start without it, so that an environment installed
before the entry point existed fails with its fix instead of with "fixture 'splitlab_up' not found".

Under pytest-xdist (`make test`: `-n 3`) the tests of `tests/cluster/` and `tests/scenarios/` are two work units.
The container tests whose timing matters run in one worker, one after the other, as without xdist. The others
(BESIDE_CONTAINERS) are one unit in a second worker, one after the other as well, so that no more than two tests'
clusters share the machine at a time: the multi-host tests (a bed of three hosts whose CPU weight is a quarter of a
container's, whose runs live on those hosts, and which watch only their own runs; two minutes and more of
containers), the netem VM (its qemu at real-time priority) and the container tests no timing decides. The third
worker takes the unit tests one by one, which the others join once done; the Spark cluster test joins the container
unit (WITH_CONTAINERS). (The scheduler groups by path: xdist's own `--dist loadgroup` marks nodes ids in a way
pytest 9 no longer keeps.) Three workers on two cores: the container unit is the critical path and mostly waits on
its clusters, which a third worker fills. The workers run at nice 10, which (with Linux's autogroups) yields only to
the test session's other processes, but for the first unit's worker, at nice 0 from its first test; the instruments
whose timing is the measurement raise their own priority above the whole load (the NFQUEUE shaper, the netem VM's
qemu: chaos/host/priority.py)."""
from __future__ import annotations

import os

import pytest

CONTAINER_DIRS = ("tests/cluster/", "tests/scenarios/")
# The second work unit, beside the container tests: the multi-host tests, the netem VM, and the container tests whose
# outcome no timing decides (a cluster's lifecycle and clean-up, the node contract item by item, captures decoded,
# addresses and keys, the real JGroups' own traffic, fuzzed datagrams, metrics, a repeat's tally of verdicts, a shrink
# to a one-way cut that blocks for as long as it lasts, a short torture whose invariants hold whatever the timing),
# in collection order
BESIDE_CONTAINERS = ("tests/cluster/test_multihost.py", "tests/cluster/test_netem_vm.py",
                     "tests/cluster/test_spine.py", "tests/cluster/test_wireshark_cluster.py",
                     "tests/cluster/test_ipv6_cluster.py", "tests/cluster/test_auth_cluster.py",
                     "tests/cluster/test_jgroups_cluster.py", "tests/cluster/test_fuzz_cluster.py",
                     "tests/cluster/test_live_metrics_cluster.py", "tests/cluster/test_repeat_cluster.py",
                     "tests/cluster/test_shrink_cluster.py", "tests/scenarios/test_torture_short.py")
# Not containers, but a load on the whole machine that timing-sensitive container tests must not run beside: a
# Spark standalone cluster (two worker JVMs, executors, an analysis). Beside the scenario tests it spread node
# starts by 2 s and failed test_a_restarted_senders_new_life_is_heard in 3 of 4 CI runs.
WITH_CONTAINERS = ("tests/unit/test_pipeline_cluster.py",)
WORKER_NICENESS = 10


def in_container_unit(nodeid: str) -> bool:
    """The test is one of the container tests whose timing matters (the first work unit)."""
    return nodeid.startswith(CONTAINER_DIRS + WITH_CONTAINERS) and not nodeid.startswith(BESIDE_CONTAINERS)


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("splitlab"):
        raise pytest.UsageError("splitlab's pytest plugin is not registered in this environment: run "
                                "'.venv/bin/pip install -e .' (or 'make venv') so its pytest11 entry point exists")
    if hasattr(config, "workerinput"):  # an xdist worker
        os.nice(WORKER_NICENESS)


@pytest.hookimpl(tryfirst=True)  # before the fixtures' setup: the session's Spark JVM may start there
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The worker of the container tests whose timing matters runs them at nice 0, ahead of the other workers: their
    harness (a run's controller, its analysis in this process's Spark JVM) is the suite's critical path, and what
    they time must not wait behind unit tests. Niceness is per thread on Linux: this thread's, inherited by every
    thread and process it starts from here on (the JVM included: a worker's first unit is this one)."""
    if hasattr(item.config, "workerinput") and in_container_unit(item.nodeid) and os.getpriority(os.PRIO_PROCESS, 0):
        os.setpriority(os.PRIO_PROCESS, 0, 0)  # as root (the container tests need it), lowering it is allowed


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ContainerTestsTogether(LoadScopeScheduling):
        """The container tests in two work units (those whose timing matters, those beside them); every other
        test a unit of its own. xdist hands out the units with the most tests first: the containers to one worker,
        those beside them to another, the unit tests to the third."""

        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(BESIDE_CONTAINERS):
                return "beside the containers"
            return "containers" if in_container_unit(nodeid) else nodeid

    return ContainerTestsTogether(config, log)
