"""`splitlab shrink` of a run on real containers: a torture-like schedule of seven faults on 4 nodes whose one
cause is known (the one-way cut n3<-n1 keeps n3 from acking n1's multicasts in NAKACK4 windows of 32, so n1 is
blocked when the timeline ends) fails on containers; the shrink searches in the simulator, comes back with that
cut alone on 3 nodes, writes it as a scenario file, and `--confirm` runs the result on containers, where it still
fails."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.cli.main import main as splitlab
from chaos.harness import runner
from chaos.harness.load import from_data, load_scenario
from chaos.harness.progress import Progress
from chaos.harness.shrink_run import statuses

pytestmark = pytest.mark.splitlab_cluster


def torture_like() -> dict[str, Any]:
    """n1 multicasts 400 messages at 100/s; the cut n3<-n1 from 2 s to the end blocks it. The other faults
    (a short partition, delay and loss on other links, an idle 4th node) do not matter."""
    work = {"at_s": 0.0, "workload": {"kind": "multicast", "from": "n1", "count": 400, "size": 100, "rate": 100}}
    steps = [work, {"at_s": 0.3, "partition": "n2<-n3"}, {"at_s": 0.8, "heal": "partition"},
             {"at_s": 1.0, "slow": {"delay_ms": 20, "links": "n2->n1"}}, {"at_s": 1.5, "fast": None},
             {"at_s": 2.0, "partition": "n3<-n1"},
             {"at_s": 2.5, "flaky": {"loss_pct": 10, "links": "n1->n2"}}, {"at_s": 3.0, "fast": None},
             {"at_s": 3.3, "slow": {"delay_ms": 30, "jitter_ms": 5, "links": "n2->n1;n3->n2"}},
             {"at_s": 3.8, "fast": None},
             {"at_s": 4.0, "flaky": {"loss_pct": 20, "links": "n3->n2"}}, {"at_s": 4.5, "fast": None}]
    return {"name": "torture-like", "seed": 5, "cluster": {"nodes": 4, "defaults": {
        "unicast": "unicast3", "multicast": "nakack4", "bcast_sync": "tipc", "membership": "none",
        "nakack4_settings": {"capacity": 32}}}, "steps": steps, "duration_s": 5, "settle_s": 1,
        "expect": {"default": {"unblocked": "ok", "workloads": "ok"}}}


def test_a_container_run_shrinks_to_its_one_way_cut_which_still_fails_on_containers(splitlab_runs_dir: Path,
                                                                                     capsys) -> None:
    failing = runner.run(from_data(torture_like(), "torture-like", None), seed=5, out=splitlab_runs_dir,
                         progress=Progress(quiet=True), analyze=False, report=False)
    assert statuses(failing.run_dir)["unblocked"] == "fail"
    capsys.readouterr()
    out = splitlab_runs_dir / "shrunk-on-containers.yaml"
    assert splitlab(["shrink", str(failing.run_dir), "--confirm", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "trial 1/60: the full schedule in the simulator: still fails" in printed.err + printed.out
    assert "on containers it still fails" in printed.err + printed.out
    loaded = load_scenario(out)
    assert loaded.scenario.cluster.nodes == 3 and loaded.expectations() == {"unblocked": {"status": "fail"}}
    faults = [s for s in loaded.doc.data["steps"] if "workload" not in s]
    assert [{k: v for k, v in s.items() if k != "at_s"} for s in faults] == [{"partition": "n3<-n1"}]
    # when the container run applied it (planned at 2.0 s after the opening; late by however long a loaded machine
    # made it)
    realised = json.loads((failing.run_dir / "schedule.json").read_text())
    at_s = realised["steps"][5]["applied_at_s"] - realised["opening_s"]
    assert faults[0]["at_s"] == pytest.approx(at_s, abs=0.001) and at_s >= 2.0 - 0.001
    # the confirmation was a container run: the search kept its last failing trial, the confirmation its own
    kept = {json.loads((d / "schedule.json").read_text())["backend"]: d for d in (failing.run_dir / "shrink").iterdir()}
    assert sorted(kept) == ["docker", "sim"] and statuses(kept["docker"])["unblocked"] == "fail"
