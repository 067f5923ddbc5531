"""Leases without containers: the lease file, the renewer that keeps it alive, the watchdog's wait, the TTL's
checks on the command line and in scenario files, and the simulator's lease (kept, never expiring)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from chaos.cli import faults
from chaos.cli.main import main as splitlab
from chaos.harness.errors import ScenarioError
from chaos.harness.load import load_text
from chaos.net import lease, watchdog
from node.errors import UsageError


def test_a_lease_expires_ttl_after_its_last_write_and_is_gone_once_dropped(tmp_path: Path) -> None:
    lease.write(tmp_path, "partition-1", 2.0, now_ts=100.0)
    assert lease.read(tmp_path, "partition-1") == {"fault_id": "partition-1", "ttl_s": 2.0, "expires_ts": 102.0}
    lease.drop(tmp_path, "partition-1")
    assert lease.read(tmp_path, "partition-1") is None
    lease.drop(tmp_path, "partition-1")  # idempotent


def test_the_renewer_moves_the_expiry_forward_and_stops_with_the_fault(tmp_path: Path) -> None:
    renewer = lease.Renewer(tmp_path)
    renewer.add("slow-1", 0.6)
    first = lease.read(tmp_path, "slow-1")["expires_ts"]
    time.sleep(0.5)
    assert lease.read(tmp_path, "slow-1")["expires_ts"] > first  # renewed every ttl/3
    renewer.end("slow-1")
    assert lease.read(tmp_path, "slow-1") is None
    time.sleep(0.3)
    assert lease.read(tmp_path, "slow-1") is None  # not written again


def test_the_watchdog_leaves_a_fault_alone_whose_lease_was_removed(tmp_path: Path) -> None:
    assert watchdog.watch(tmp_path, "no-such-run", "partition-1") == "lease removed: the fault ended otherwise"


@pytest.mark.parametrize("ttl_s", [0, 0.1, -1, 86_401, True, "5"])
def test_a_bad_ttl_is_refused(ttl_s) -> None:
    with pytest.raises(UsageError, match="ttl_s must be a number of seconds"):
        lease.check_ttl(ttl_s)


def test_the_cli_refuses_a_bad_ttl_before_looking_for_the_cluster(monkeypatch, capsys) -> None:
    monkeypatch.setattr(faults, "_net", lambda args: pytest.fail("the cluster was looked up"))
    assert splitlab(["chaos", "partition", "n2<-n1", "--ttl-s", "0.1"]) == 2
    assert "ttl_s must be a number of seconds in 0.5..86400" in capsys.readouterr().err


SCENARIO = """cluster: {{nodes: 2}}
steps:
  - at_s: 1
    {step}
    ttl_s: {ttl_s}
"""


@pytest.mark.parametrize("step,ttl_s,fragment", [("heal: partition", 5, "ttl_s leases the fault a step starts"),
                                                 ('partition: "n2<-n1"', 0.1, "expected a value >= 0.5")])
def test_a_scenario_ttl_is_checked_with_its_line(step: str, ttl_s: float, fragment: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_text(SCENARIO.format(step=step, ttl_s=ttl_s), "s.yaml")
    assert any(str(p).startswith("s.yaml:5: steps[0].ttl_s") and fragment in str(p) for p in info.value.problems), \
        [str(p) for p in info.value.problems]


class _Net:
    """Records the partition and the lease a step asks for."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def partition(self, grudge, jam=None) -> str:
        self.calls.append(("partition", grudge, jam))
        return "partition-1"

    def lease(self, fault_id: str, ttl_s: float) -> None:
        self.calls.append(("lease", fault_id, ttl_s))


@pytest.mark.parametrize("ttl_line,leased", [("    ttl_s: 30\n", [("lease", "partition-1", 30.0)]), ("", [])])
def test_a_step_with_ttl_s_leases_the_fault_it_opened(ttl_line: str, leased: list) -> None:
    from chaos.harness import actions

    text = 'cluster: {nodes: 2}\nsteps:\n  - at_s: 0.5\n    partition: "n2<-n1"\n' + ttl_line
    net = _Net()
    actions.apply(load_text(text, "s.yaml").scenario.steps[0], actions.Target(net))
    assert net.calls == [("partition", "n2<-n1", None), *leased]
