"""A run on containers probes this machine's fault backends while its nodes start (chaos.harness.runner), so the
timeline's first link or message fault does not pay the probe (it landed 0.3 s late). Docker, the cluster and
DockerNet are stood in for: what is under test is only when the probe runs."""
from __future__ import annotations

import threading
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import pytest

import chaos.net.docker
from chaos.harness import runner
from chaos.harness.load import load_scenario
from chaos.harness.progress import Progress
from chaos.net import backends

REPO = Path(__file__).resolve().parents[2]
PROBE_WAIT_S = 10.0


class _Net:
    def __init__(self, cluster, seed, log) -> None:
        self.run_dir = cluster.run_dir

    def heal_all(self) -> None:
        pass


def _enter_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hosts) -> list[str]:
    """Open `_docker_net` for a seed scenario with `up` standing for the nodes' start; returns what happened, in
    order."""
    seen: list[str] = []
    probed = threading.Event()

    def probe() -> dict:
        seen.append("probe")
        probed.set()
        return {}

    def up(*args, **kwargs):
        seen.append("up")
        if hosts is None:
            probed.wait(PROBE_WAIT_S)  # the nodes take their time: the probe runs beside them or not at all
        seen.append("nodes started")
        return SimpleNamespace(run_id="r1", run_dir=tmp_path)

    monkeypatch.setattr(backends, "capabilities", probe)
    monkeypatch.setattr(runner.clusters, "up", up)
    monkeypatch.setattr(runner.clusters, "stop", lambda run_id: None)
    monkeypatch.setattr(runner.clusters, "down", lambda run_id: None)
    monkeypatch.setattr(runner, "_exists", lambda run_id: False)
    monkeypatch.setattr(runner, "_save_logs", lambda cluster: None)
    monkeypatch.setattr(chaos.net.docker, "DockerNet", _Net)
    loaded = load_scenario(REPO / "scenarios" / "jgrp1873.yaml", variant="legacy")
    with ExitStack() as background:
        with runner._docker_net(loaded, "r1", tmp_path, 1, Progress(quiet=True), background, hosts):
            seen.append("timeline")
    return seen


def test_the_fault_backends_are_probed_while_the_nodes_start(monkeypatch, tmp_path) -> None:
    seen = _enter_run(monkeypatch, tmp_path, None)
    assert sorted(seen[:2]) == ["probe", "up"] and seen[2:] == ["nodes started", "timeline"], seen


def test_a_run_on_other_hosts_probes_nothing_here(monkeypatch, tmp_path) -> None:
    inventory = SimpleNamespace(hosts=())
    assert _enter_run(monkeypatch, tmp_path, (inventory, None)) == ["up", "nodes started", "timeline"]
