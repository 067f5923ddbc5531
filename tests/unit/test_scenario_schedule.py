"""The realised schedule and replay, expectations and verdicts, and the command line's exit codes on bad input
(no Docker: the scenario is refused before any cluster starts)."""
from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cli.main import main as splitlab
from chaos.harness import schedule
from chaos.harness.expect import check_params, judge, workloads_check
from chaos.harness.load import from_data, load_text
from chaos.harness.schedule import RealisedStep, Schedule
from node.errors import UsageError

TEXT = """\
name: t
seed: 5
cluster: {nodes: 2}
variants: {legacy: {unicast: unicast2}, fixed: {unicast: unicast3}}
steps:
  - {at_s: 0, workload: {kind: unicast, from: n1, to: n2, count: 5}}
  - {at_s: 1, msg-fault: {type: UnicastAck, from: n2, to: n1, action: "hold:500"}}
  - {at_s: 2, partition: "n2<-n1"}
  - {at_s: 4, heal: partition}
expect:
  legacy: {delivery: fail, endless_retransmission: {status: fail, min_requests: 5}}
  fixed: {delivery: ok, workloads: ok}
"""


def saved(tmp_path: Path) -> Schedule:
    loaded = load_text(TEXT, "t.yaml", variant="legacy")
    sched = Schedule(scenario=loaded.doc.data, source="t.yaml", variant="legacy", seed=5, backend="docker",
                     run_id="261121-000000-abcd")
    for index, applied in enumerate([0.01, 1.4, 2.9]):   # the heal was never applied (the run stopped)
        step = loaded.scenario.steps[index]
        sched.steps.append(RealisedStep(index=index, action=step.action, args={}, at_s=step.at_s,
                                        applied_at_s=applied, fault_id=f"f{index}"))
    sched.save(tmp_path)
    return sched


def test_a_saved_schedule_loads_back_with_lateness(tmp_path: Path) -> None:
    sched = saved(tmp_path)
    back = schedule.load(tmp_path)
    assert back.variant == "legacy" and back.seed == 5 and back.run_id == sched.run_id
    assert [s.applied_at_s for s in back.steps] == [0.01, 1.4, 2.9]
    assert [round(s.late_s, 2) for s in back.steps] == [0.01, 0.4, 0.9]


def test_replay_puts_each_applied_step_at_its_realised_time_and_drops_the_rest(tmp_path: Path) -> None:
    doc = schedule.replay_document(saved(tmp_path))
    loaded = from_data(doc, "schedule.json", "legacy")
    assert [(s.action, s.at_s) for s in loaded.scenario.steps] == [("workload", 0.01), ("msg_fault", 1.4),
                                                                   ("partition", 2.9)]
    assert loaded.scenario.seed == 5 and loaded.expectations()["delivery"] == {"status": "fail"}


def test_effective_times_come_from_the_controller_history(tmp_path: Path) -> None:
    sched = saved(tmp_path)
    sched.add_effective_times([{"type": "fault_start", "fault_id": "f2", "effective_ts": 123.5},
                               {"type": "heal", "effective_ts": 200.0}])
    assert [s.effective_ts for s in sched.steps] == [None, None, 123.5]


def test_load_refuses_a_directory_without_a_schedule(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="has no schedule.json"):
        schedule.load(tmp_path)


class _Result:
    def __init__(self, status: str, reason: str = "r") -> None:
        self.status, self.reason = status, reason


class _Summary:
    def __init__(self, **statuses: str) -> None:
        self.checks = {name: _Result(status) for name, status in statuses.items()}


def test_judge_compares_expected_and_actual_statuses() -> None:
    exp = load_text(TEXT, "t.yaml", variant="legacy").expectations()
    assert check_params(exp) == {"endless_retransmission": {"min_requests": 5}}
    verdict = judge(exp, _Summary(delivery="fail", endless_retransmission="fail", fifo="ok"), {})
    assert verdict.held and verdict.exit_code == 0
    verdict = judge(exp, _Summary(delivery="ok", endless_retransmission="fail"), {})
    assert not verdict.held and verdict.exit_code == 1
    assert [(o.check, o.held) for o in verdict.outcomes] == [("delivery", False), ("endless_retransmission", True)]


def test_judge_without_expectations_wants_every_check_ok() -> None:
    assert judge({}, _Summary(delivery="ok", views="ok"), {}).held
    assert not judge({}, _Summary(delivery="ok", views="unknown"), {}).held
    assert not judge({}, _Summary(delivery="ok"), {"workloads": ("fail", "blocked", {})}).held


def test_workloads_check_finished_unfinished_and_lost_with_a_restart() -> None:
    started = {"n1": [{"id": 1, "boot": 10, "count": 5}], "n2": [{"id": 4, "boot": 20, "count": 3}]}
    done = {"n1": {"boot": 10, "workloads": [{"id": 1, "done": True, "sent": 5}]},
            "n2": {"boot": 20, "workloads": [{"id": 4, "done": True, "sent": 3}]}}
    assert workloads_check(started, done)[0] == "ok"
    blocked = {**done, "n2": {"boot": 20, "workloads": [{"id": 4, "done": False, "sent": 1, "blocked": True}]}}
    status, reason, details = workloads_check(started, blocked)
    assert status == "fail" and details["unfinished"] == ["n2#4 sent 1/3 (blocked)"], reason
    restarted = {**done, "n2": {"boot": 21, "workloads": []}}
    status, reason, details = workloads_check(started, restarted)
    assert status == "ok" and details["lost_with_restart"] == ["n2#4"] and "lost with a restarted node" in reason
    assert workloads_check(started, {**done, "n2": None})[0] == "unknown"


def test_splitlab_run_exits_2_on_a_bad_scenario_before_starting_anything(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(TEXT.replace("count: 5", "count: five"))
    assert splitlab(["run", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:6: steps[0].workload.count: expected an integer, got 'five'" in err
    assert splitlab(["run", str(bad), "--variant", "newest"]) == 2
    assert splitlab(["sim", str(tmp_path / "missing.yaml"), "--seed", "1"]) == 2
    assert splitlab(["replay", str(tmp_path)]) == 2
    assert "has no schedule.json" in capsys.readouterr().err
    assert splitlab(["run", "--help"]) == 0
