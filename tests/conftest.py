"""The suite's fixtures come from splitlab's own pytest plugin (chaos/harness/pytest_plugin.py, registered as the
`pytest11` entry point `splitlab`): this file refuses to start without it, so that an environment installed
before the entry point existed fails with its fix instead of with "fixture 'splitlab_up' not found".

Under pytest-xdist (`make test`: `-n 2`) the tests of `tests/cluster/` and `tests/scenarios/` (every container test
but the multi-host ones; not the netem VM test, which boots qemu) are one work unit: they run in one worker, one
after the other, as without xdist (their timing matters), while the other worker takes the multi-host tests (their
own unit: a bed of three hosts whose CPU weight is a quarter of a container's, whose runs live on those hosts, and
which watch only their own runs; two minutes and more of containers) and the netem VM, then the container tests no
timing decides (BESIDE_CONTAINERS, a unit per file) and the unit tests one by one; the Spark cluster test joins the
container unit (WITH_CONTAINERS). (The scheduler groups by path: xdist's own `--dist
loadgroup` marks nodes ids in a way pytest 9 no longer keeps.) The workers run at nice 10, which (with Linux's
autogroups) yields only to the test session's other processes; the instruments whose timing is the measurement raise
their own priority above the whole load (the NFQUEUE shaper, the netem VM's qemu: chaos/host/priority.py)."""
from __future__ import annotations

import os

import pytest

CONTAINER_DIRS = ("tests/cluster/", "tests/scenarios/")
# One work unit beside the container tests, the first the other worker takes: the multi-host tests, then the netem
# VM (its guest clock runs only while qemu does: it boots while the container unit runs clusters of Python nodes,
# not the real JGroups' JVMs of the scenarios later on, which twice starved it past its jitter bounds)
OWN_UNITS = ("tests/cluster/test_multihost.py", "tests/cluster/test_netem_vm.py")
# Container tests whose outcome no timing decides (a cluster's lifecycle and clean-up, the node contract item by
# item, captures decoded, addresses and keys, the real JGroups' own traffic, fuzzed datagrams, metrics): a unit per
# file, each smaller than the one above so that it is taken after it, beside the timing-sensitive container tests
# (issue 34: make test in 10 minutes)
BESIDE_CONTAINERS = ("tests/cluster/test_spine.py", "tests/cluster/test_wireshark_cluster.py",
                     "tests/cluster/test_ipv6_cluster.py", "tests/cluster/test_auth_cluster.py",
                     "tests/cluster/test_jgroups_cluster.py", "tests/cluster/test_fuzz_cluster.py",
                     "tests/cluster/test_live_metrics_cluster.py")
# Not containers, but a load on the whole machine that timing-sensitive container tests must not run beside: a
# Spark standalone cluster (two worker JVMs, executors, an analysis). Beside the scenario tests it spread node
# starts by 2 s and failed test_a_restarted_senders_new_life_is_heard in 3 of 4 CI runs.
WITH_CONTAINERS = ("tests/unit/test_pipeline_cluster.py",)
WORKER_NICENESS = 10


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("splitlab"):
        raise pytest.UsageError("splitlab's pytest plugin is not registered in this environment: run "
                                "'.venv/bin/pip install -e .' (or 'make venv') so its pytest11 entry point exists")
    if hasattr(config, "workerinput"):  # an xdist worker
        os.nice(WORKER_NICENESS)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ContainerTestsTogether(LoadScopeScheduling):
        """Every container test in one work unit but those beside it (a unit per file), the multi-host tests
        and the netem VM in another; every other test a unit of its own. xdist hands out the units with the most
        tests first: the containers to one worker, the multi-host tests and the VM to the other, which then takes
        the containers beside."""

        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith(OWN_UNITS):
                return "multi-host and netem VM"
            if nodeid.startswith(BESIDE_CONTAINERS):
                return nodeid.split("::", 1)[0]
            if nodeid.startswith(CONTAINER_DIRS + WITH_CONTAINERS):
                return "containers"
            return nodeid

    return ContainerTestsTogether(config, log)
