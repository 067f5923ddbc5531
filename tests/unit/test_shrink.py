"""`splitlab shrink`: fault steps grouped into units, each phase of the search against a fake trial (pure), and a
failing simulator run with one known cause among benign faults shrunk back to exactly that cause, written as a
scenario file that loads and still fails."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos.cli.main import main as splitlab
from chaos.harness import runner
from chaos.harness.load import from_data, load_scenario
from chaos.harness.progress import Progress
from chaos.harness.shrink import Unit, group_units, shrink
from chaos.harness.shrink_run import shrink_run, statuses
from node.errors import UsageError

QUIET = Progress(quiet=True)


def W(at_s: float, count: int = 40, sender: Any = "n1", to: str | None = None) -> dict[str, Any]:
    work = {"kind": "unicast" if to else "multicast", "from": sender, "count": count, "size": 100, "rate": 100}
    return {"at_s": at_s, "workload": {**work, "to": to} if to else work}


def test_units_pair_each_fault_with_what_ends_it():
    steps = [W(0), {"at_s": 1, "partition": "n2<-n1"}, {"at_s": 1, "id": "s", "slow": {"delay_ms": 5}},
             {"at_s": 2, "flaky": {"loss_pct": 5}}, {"at_s": 3, "heal": "partition"}, {"at_s": 3.5, "end": "s"},
             {"at_s": 4, "fast": None}, {"at_s": 5, "pause": {"node": "n3"}}, {"at_s": 5.5, "resume": "n2"},
             {"at_s": 6, "resume": "n3"}, {"at_s": 7, "inject": {"type": "UnicastAck", "from": "n1", "to": "n2"}},
             {"at_s": 8, "partition": "n1|n2"}, {"at_s": 9, "heal": "all"}, {"at_s": 9.5, "fast": None}]
    workloads, units = group_units(steps)
    assert workloads == [0]
    assert units == [Unit((1, 4)), Unit((2, 5)), Unit((3, 6)), Unit((7, 9)), Unit((8,)), Unit((10,)),
                     Unit((11, 12)), Unit((13,))]


def _doc(steps: list[dict[str, Any]], nodes: int = 4) -> dict[str, Any]:
    return {"cluster": {"nodes": nodes, "overrides": {"n4": {"unicast": "unicast2"}}}, "steps": steps,
            "expect": {"default": {"delivery": {"status": "fail", "ignore_receivers": ["n2", "n4"]}}}}


CAUSE = {"at_s": 2.0, "partition": "n3<-n1"}


def _fails_with_cause(doc: dict[str, Any]) -> bool:
    """Fails while the cut n3<-n1 is on for at least 1 s and 10 messages from n1 go out."""
    steps = doc["steps"]
    cut = next((i for i, s in enumerate(steps) if s.get("partition") == "n3<-n1"), None)
    if cut is None:
        return False
    heal = next((s for s in steps[cut + 1:] if "heal" in s), None)
    long_enough = heal is None or heal["at_s"] - steps[cut]["at_s"] >= 1.0
    sent = sum(s["workload"]["count"] for s in steps if "workload" in s and "n1" in str(s["workload"]["from"]))
    return long_enough and sent >= 10 and doc["cluster"]["nodes"] >= 3


def test_each_phase_shrinks_what_does_not_matter_and_keeps_what_does():
    steps = [W(0, 160, ["n1", "n4"]), W(0, 50, "n2", to="n4"), {"at_s": 0.5, "slow": {"delay_ms": 9}},
             {"at_s": 1.0, "fast": None}, {"at_s": 1.2, "partition": "n1|n2"}, {"at_s": 1.5, "heal": "partition"},
             CAUSE, {"at_s": 10.0, "heal": "partition"}, {"at_s": 11, "flaky": {"loss_pct": 5, "links": "n4->n2"}},
             {"at_s": 12, "fast": None}, {"at_s": 13, "admin": {"op": "sync", "node": "n2", "peer": "n4"}}]
    lines: list[str] = []
    found = shrink(_doc(steps), _fails_with_cause, max_trials=100, log=lines.append)
    assert found.complete and found.units_before == 5 and found.units_after == 1
    faults = [s for s in found.doc["steps"] if "workload" not in s]
    assert faults == [CAUSE, {"at_s": 3.0, "heal": "partition"}]        # 8 s -> 4 s -> 2 s -> 1 s; 0.5 s passes
    assert found.doc["cluster"] == {"nodes": 3, "overrides": {}}        # n4 dropped, with its override
    assert found.doc["expect"]["default"]["delivery"]["ignore_receivers"] == ["n2"]
    assert [s["workload"] for s in found.doc["steps"] if "workload" in s] == [
        {"kind": "multicast", "from": "n1", "count": 10, "size": 100, "rate": 100}]  # 160 -> 10; n2->n4 gone
    assert found.trials == len(lines) and lines[0] == "trial 1/100: 3 of 5 unit(s): 6 fault step(s), 4 node(s): still fails"


def test_the_cap_stops_the_search_and_says_so():
    steps = [W(0)] + [{"at_s": 1 + i, "slow": {"delay_ms": i + 1}} for i in range(8)] + [CAUSE]
    found = shrink(_doc(steps), _fails_with_cause, max_trials=3, spent=1)
    assert found.trials == 3 and not found.complete and found.notes == ["stopped at the cap of 3 trials"]
    assert CAUSE in found.doc["steps"]


# --- end to end in the simulator --------------------------------------------------------------------------------
def _torture_like() -> dict[str, Any]:
    """n1 multicasts 400 messages into NAKACK4 windows of 32 without a membership layer: the one-way cut n3<-n1
    from 2 s to 9.8 s keeps n3 from acking, so n1 is blocked when the timeline ends (`unblocked` fails). The
    other faults (short partitions, delay and loss on other links, an idle 4th node) do not matter."""
    steps = [W(0.0, 400), {"at_s": 0.3, "partition": "n2<-n3"}, {"at_s": 0.8, "heal": "partition"},
             {"at_s": 1.0, "slow": {"delay_ms": 20, "links": "n2->n1"}}, {"at_s": 1.5, "fast": None},
             {"at_s": 2.0, "partition": "n3<-n1"},
             {"at_s": 2.5, "flaky": {"loss_pct": 10, "links": "n1->n2"}}, {"at_s": 4.0, "fast": None},
             {"at_s": 4.5, "slow": {"delay_ms": 30, "jitter_ms": 5, "links": "n2->n1;n3->n2"}},
             {"at_s": 6.0, "fast": None},
             {"at_s": 6.5, "flaky": {"loss_pct": 20, "links": "n3->n2"}}, {"at_s": 7.5, "fast": None},
             {"at_s": 9.8, "heal": "partition"}]
    return {"name": "torture-like", "seed": 5, "cluster": {"nodes": 4, "defaults": {
        "unicast": "unicast3", "multicast": "nakack4", "bcast_sync": "tipc", "membership": "none",
        "nakack4_settings": {"capacity": 32}}}, "steps": steps, "duration_s": 10, "settle_s": 2,
        "expect": {"default": {"unblocked": "ok", "workloads": "ok"}}}


def test_shrinking_a_failing_simulator_run_comes_back_with_its_one_way_cut(tmp_path: Path, capsys):
    failing = runner.run(from_data(_torture_like(), "torture-like", None), backend="sim", seed=5, out=tmp_path,
                         progress=QUIET, analyze=False)
    assert statuses(failing.run_dir)["unblocked"] == "fail"
    out = tmp_path / "small.yaml"
    assert splitlab(["shrink", str(failing.run_dir), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "trial 1/60: the full schedule in the simulator: still fails" in printed.err
    assert f"smallest failing schedule: {out} (1 of 6 fault unit(s), 3 node(s)" in printed.out
    loaded = load_scenario(out)
    assert loaded.scenario.cluster.nodes == 3 and loaded.expectations() == {"unblocked": {"status": "fail"}}
    faults = [s for s in loaded.doc.data["steps"] if "workload" not in s]
    assert faults == [{"at_s": 2.0, "partition": "n3<-n1"}, {"at_s": 9.8, "heal": "partition"}]
    assert out.read_text().startswith(f"# Shrunk by 'splitlab shrink' from {failing.run_dir} ")
    again = runner.run(loaded, backend="sim", seed=loaded.scenario.seed, out=tmp_path, progress=QUIET, analyze=False)
    assert statuses(again.run_dir)["unblocked"] == "fail"


def test_a_run_that_does_not_reproduce_or_did_not_fail_is_said_so(tmp_path: Path):
    doc = _torture_like()
    doc["steps"] = [s for s in doc["steps"] if s.get("partition") != "n3<-n1"]
    passing = runner.run(from_data(doc, "t", None), backend="sim", seed=5, out=tmp_path, progress=QUIET,
                         analyze=False)
    assert splitlab(["shrink", str(passing.run_dir)]) == 2          # nothing failed: bad input
    assert splitlab(["shrink", str(tmp_path / "nowhere")]) == 2
    # a check that failed once but not with this schedule: did not reproduce
    verdict = passing.run_dir / "verdict.json"
    data = json.loads(verdict.read_text())
    data["harness_checks"]["unblocked"]["status"] = "fail"
    verdict.write_text(json.dumps(data))
    lines: list[str] = []
    outcome = shrink_run(passing.run_dir, log=lines.append)
    assert outcome.exit_code == 1 and outcome.out is None and not (passing.run_dir / "shrunk.yaml").exists()
    assert [line for line in lines if line.startswith("trial")] == [  # a simulator run: no container trial
        "trial 1/60: the full schedule in the simulator: passes (the failure does not reproduce there)"]
    with pytest.raises(UsageError, match="did not fail"):
        shrink_run(passing.run_dir, checks=["delivery"], log=lambda _: None)


def test_the_trials_share_one_short_lived_spark_session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A shrink analyses many small runs in one JVM: a short-lived one (C1 only, the serial collector), started
    once for every trial, and none while the warm service is up."""
    from chaos.harness import shrink_run
    from pipeline import service_client, session

    asked: list[dict[str, Any]] = []
    started = object()
    monkeypatch.setattr(service_client, "status", lambda *args, **kwargs: None)
    monkeypatch.setattr(session, "spark_session", lambda *args, **kwargs: asked.append(kwargs) or started)
    trials = shrink_run.Trials("sim", None, ["delivery"], tmp_path, "test", lambda line: None)  # type: ignore[arg-type]
    assert trials.spark() is started and trials.spark() is started
    assert asked == [{"short_lived": True}]
    monkeypatch.setattr(service_client, "status", lambda *args, **kwargs: {"pid": 1})
    served = shrink_run.Trials("sim", None, ["delivery"], tmp_path, "test", lambda line: None)  # type: ignore[arg-type]
    assert served.spark() is None and len(asked) == 1
