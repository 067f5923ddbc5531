"""The scenario verbs JGroups' tests need, in the simulator (the nodes' real stacks) and on the container path
with a fake cluster: drop-every / drop-range / first, inject with a relative conn_id and a payload, steps
after heal / view / workload-done, ending one fault by id or by its duration_s, a restart with a delay and
steps that wait for a restarted node's control API; and the realised schedule and its replay."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from chaos.faults.grudge import LinkFault
from chaos.harness import actions, runner, schedule, timeline
from chaos.harness.errors import StepError
from chaos.harness.faultstate import link_faults
from chaos.harness.load import from_data, load_text
from chaos.harness.progress import Progress
from chaos.harness.schedule import Schedule
from node.errors import EnvironmentProblem

QUIET = Progress(quiet=True)
UNICAST = "cluster: {nodes: 2, defaults: {unicast: unicast3, membership: none, multicast: none}}\n"


def sim(text: str, tmp_path: Path, seed: int = 1) -> Any:
    return runner.run(load_text(text, "t.yaml"), backend="sim", seed=seed, out=tmp_path, progress=QUIET, analyze=False)


def events(result: Any, node: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (result.run_dir / "events" / f"{node}.jsonl").read_text().splitlines()]


def realised(result: Any) -> list[dict[str, Any]]:
    return json.loads((result.run_dir / "schedule.json").read_text())["steps"]


def dropped_in_the_burst(result: Any) -> list[int]:
    """Seqnos of n1's 30-message burst that did not reach n2 with the burst (they came by retransmission)."""
    rx = [e for e in events(result, "n2") if e["type"] == "data_rx"]
    early = {e["seqno"] for e in rx if e["ts"] - rx[0]["ts"] < 0.05}
    return sorted(set(range(1, 31)) - early)


BURST = UNICAST + """steps:
  - at_s: 0
    id: f
    msg-fault: {type: UnicastData, from: n1, to: n2, action: "ACTION"FIRST}
  - at_s: 0
    workload: {kind: unicast, from: n1, to: n2, count: 30}
  - after: workload-done
    end: f
settle_s: 2
"""


def burst(action: str, first: str | None = None) -> str:
    return BURST.replace("ACTION", action).replace("FIRST", f", first: {first}" if first else "")


# --- msg-fault ---------------------------------------------------------------------------------------------------
def test_drop_every_third_matching_message_in_the_simulator(tmp_path: Path) -> None:
    result = sim(burst("drop-every:3", first="false"), tmp_path)
    # seqno 1 carries first=true and does not match: the 3rd, 6th, ... match are seqnos 4, 7, ...
    assert dropped_in_the_burst(result) == [4, 7, 10, 13, 16, 19, 22, 25, 28]
    assert len([e for e in events(result, "n2") if e["type"] == "app_deliver"]) == 30  # then retransmitted


def test_drop_range_drops_exactly_the_seqnos_in_it(tmp_path: Path) -> None:
    result = sim(burst("drop-range:5-8"), tmp_path)
    assert dropped_in_the_burst(result) == [5, 6, 7, 8]


def test_first_true_matches_only_the_message_that_opens_the_connection(tmp_path: Path) -> None:
    result = sim(burst("drop", first="true"), tmp_path)
    assert dropped_in_the_burst(result) == [1]
    n2 = events(result, "n2")
    assert not [e for e in n2 if e["type"] == "data_rx" and e["first"]]
    assert ("resync_tx", "sync") in {(e["type"], e.get("kind")) for e in n2}  # unicast3 resyncs instead


# --- inject -------------------------------------------------------------------------------------------------
INJECT = UNICAST.replace("multicast: none", "multicast: nakack4") + """steps:
  - at_s: 0
    workload: {kind: unicast, from: n1, to: n2, count: 5}
  - at_s: 0.5
    inject: {type: UnicastData, from: n1, to: n2, conn_id: WHICH, fields: {seqno: 6}, payload: "n1.0.99\\0hi"}
  - at_s: 0.6
    inject: {type: Nakack4Msg, from: n1, to: n2, fields: {seqno: 1}, payload: "n1.0.77\\0m"}
settle_s: 1
"""


@pytest.mark.parametrize("which", ["current", "previous", "next"])
def test_inject_aims_its_conn_id_at_the_live_connection_and_carries_the_payload(tmp_path: Path, which: str) -> None:
    result = sim(INJECT.replace("WHICH", which), tmp_path)
    n2 = events(result, "n2")
    live = next(e["conn_id"] for e in n2 if e["type"] == "conn_state" and e["dir"] == "recv")
    used = realised(result)[1]["detail"]["conn_id"]
    expected = {"current": live, "previous": live - (1 << 12), "next": live + (1 << 12)}[which]
    assert used == expected
    (rx,) = [e for e in n2 if e["type"] == "data_rx" and e["proto"] == "unicast3" and e["seqno"] == 6]
    delivered = {e["msg_id"] for e in n2 if e["type"] == "app_deliver"}
    if which == "current":
        assert rx["action"] == "deliver" and "n1.0.99" in delivered
    else:  # an older or a newer connection's message is not taken into the live window
        assert rx["action"] == "wrong_conn" and "n1.0.99" not in delivered
    assert "n1.0.77" in delivered  # the multicast payload went through NAKACK4


def test_inject_without_a_live_connection_stops_the_run_naming_the_target(tmp_path: Path) -> None:
    text = UNICAST + "steps:\n  - at_s: 0.1\n    inject: {type: UnicastAck, from: n1, to: n2, conn_id: current}\n"
    with pytest.raises(StepError, match="n2 has no send connection to n1 in unicast3") as info:
        sim(text, tmp_path)
    assert info.value.exit_code == 1


# --- when steps fire --------------------------------------------------------------------------------------------
TIMED = """cluster: {nodes: 3, defaults: {unicast: unicast3}}
steps:
  - at_s: 0
    workload: {kind: unicast, from: n1, to: n2, count: 20, rate: 40}
  - after: workload-done
    delay_s: 0.25
    id: cut
    duration_s: 2
    partition: "n3<->n1,n2"
  - after: heal
    delay_s: 0.5
    workload: {kind: multicast, from: n1, count: 3}
  - after: view
    id: s
    slow: {delay_ms: 30, links: "n1->n2"}
  - at_s: 1
    flaky: {loss_pct: 10, links: "n1->n2"}
  - at_s: 1
    end: s
duration_s: 6
settle_s: 1
"""


def test_relative_steps_fire_when_their_condition_holds_and_record_it(tmp_path: Path) -> None:
    result = sim(TIMED, tmp_path)
    steps = realised(result)
    start = json.loads((result.run_dir / "schedule.json").read_text())["started_ts"]
    # workload-done: 20 messages at 40/s, the last handed over at 19/40 s; then 0.25 s more
    assert steps[1]["condition_met_at_s"] == pytest.approx(0.475)
    assert steps[1]["applied_at_s"] == pytest.approx(0.725)
    # the partition's duration_s ended it 2 s later; after: heal is that moment, then 0.5 s more
    assert steps[1]["ended_at_s"] == pytest.approx(2.725)
    assert steps[2]["condition_met_at_s"] == pytest.approx(2.725) and steps[2]["applied_at_s"] == pytest.approx(3.225)
    # after: view: the last node to install a view of all three after step 2
    full = [e["ts"] - start for n in ("n1", "n2", "n3") for e in events(result, n)
            if e["type"] == "view" and len(e["members"]) == 3 and e["ts"] - start > 3.225]
    assert steps[3]["condition_met_at_s"] == pytest.approx(max(full), abs=1e-5)
    assert max(full) > 3.5  # really waited for the merge
    # an at_s step behind a relative one fires at once, late
    assert steps[4]["at_s"] == 1 and steps[4]["applied_at_s"] == pytest.approx(steps[3]["applied_at_s"])
    controller = events(result, "controller")
    ends = {e["fault_id"]: round(e["ts"] - start, 3) for e in controller if e["type"] == "fault_end"}
    heal = next(round(e["ts"] - start, 3) for e in controller if e["type"] == "heal")
    assert ends[steps[1]["fault_id"]] == 2.725
    # end: s ended the slow alone, when it fired; the flaky on the same link stayed until the final heal at 6 s
    assert steps[5]["detail"] == {"ended": steps[3]["fault_id"]}
    assert ends[steps[3]["fault_id"]] == round(steps[5]["applied_at_s"], 3) < 5
    assert ends[steps[4]["fault_id"]] == heal == 6.0


def test_replay_runs_relative_steps_and_durations_at_their_realised_times(tmp_path: Path) -> None:
    first = sim(TIMED, tmp_path / "a")
    doc = schedule.replay_document(schedule.load(first.run_dir))
    assert all("after" not in s and "duration_s" not in s for s in doc["steps"])
    assert {"at_s": 2.725, "end": "cut", "note": "duration_s of steps[1] ran out"} in doc["steps"]
    again = runner.run(from_data(doc, "schedule.json", None), backend="sim", seed=1, out=tmp_path / "b", progress=QUIET,
                       analyze=False)
    applied = {s["action"]: round(s["applied_at_s"], 3) for s in realised(again)}
    assert applied["partition"] == 0.725 and applied["slow"] == round(realised(first)[3]["applied_at_s"], 3)
    ends = [s["applied_at_s"] for s in realised(again) if s["action"] == "end"]
    assert ends[0] == pytest.approx(2.725)


def test_a_condition_that_never_holds_stops_the_run_with_what_was_missing(tmp_path: Path) -> None:
    text = """cluster: {nodes: 3, defaults: {unicast: unicast3}}
steps:
  - at_s: 0
    partition: "n3<->n1,n2"
  - after: view
    timeout_s: 3
    fast:
"""
    with pytest.raises(StepError, match=r"steps\[1\] \(after: view\): not met within 3 s after steps\[0\]: n1's view "
                                        r"\['n1', \d+\] holds n1, n2"):
        sim(text, tmp_path)


def test_ending_a_message_fault_lets_the_messages_through_again(tmp_path: Path) -> None:
    text = UNICAST + """steps:
  - at_s: 0
    id: all
    msg-fault: {type: UnicastData, from: n1, to: n2, action: drop}
  - at_s: 0
    workload: {kind: unicast, from: n1, to: n2, count: 5}
  - at_s: 1
    end: all
settle_s: 1
"""
    result = sim(text, tmp_path)
    delivered = [e["ts"] for e in events(result, "n2") if e["type"] == "app_deliver"]
    start = json.loads((result.run_dir / "schedule.json").read_text())["started_ts"]
    assert len(delivered) == 5 and min(delivered) - start >= 1.0


def test_link_faults_are_rebuilt_from_the_steps_still_open() -> None:
    steps = load_text("cluster: {nodes: 3}\nsteps:\n"
                      "  - {at_s: 0, slow: {delay_ms: 30, links: 'n1->n2'}}\n"
                      "  - {at_s: 0, flaky: {loss_pct: 10, links: 'n1->n2;n1->n3'}}\n"
                      "  - {at_s: 0, shape: 'n2->n3:delay_ms=5'}\n", "t.yaml").scenario.steps
    slow, flaky, shape = steps
    assert link_faults([slow, flaky], ["n1", "n2", "n3"]) == {
        ("n1", "n2"): LinkFault(delay_ms=30, loss_pct=10), ("n1", "n3"): LinkFault(loss_pct=10)}
    assert link_faults([flaky], ["n1", "n2", "n3"])[("n1", "n2")] == LinkFault(loss_pct=10)  # the slow ended
    assert link_faults([slow, shape], ["n1", "n2", "n3"]) == {("n2", "n3"): LinkFault(delay_ms=5)}
    assert link_faults([slow], ["n1", "n2", "n3"]) == {("n1", "n2"): LinkFault(delay_ms=30)}  # shape ended


# --- the container path, on a fake cluster and a stepped clock -----------------------------------------------------
class SteppedClock:
    """Time that moves only when the timeline passes it or waits for something (in `STEP_S` steps, as `WallClock`
    polls): the tests read exact times, whatever the machine's load."""

    STEP_S = 0.05

    def __init__(self) -> None:
        self.t_s = 0.0

    def now_s(self) -> float:
        return self.t_s

    def now_ts(self) -> float:
        return 1_700_000_000.0 + self.t_s

    def pass_time(self, until_s: float, label: str) -> None:
        self.t_s = max(self.t_s, until_s)

    def wait_until(self, ready: Callable[[], bool], until_s: float, label: str) -> bool:
        while not ready():
            if self.t_s >= until_s:
                return False
            self.t_s = min(until_s, round(self.t_s + self.STEP_S, 9))  # no drift from adding 0.05 s
        return True


class FakeClient:
    def __init__(self, cluster: "FakeCluster", name: str) -> None:
        self.cluster, self.name = cluster, name

    def health(self) -> dict[str, Any]:
        up_at = self.cluster.up_at.get(self.name, 0.0)
        if up_at is None or self.cluster.clock.now_s() < up_at:
            raise EnvironmentProblem(f"node {self.name}: control API not reachable")
        return {"boot": 1}

    def unicast(self, to: str, count: int, size: int, rate: float) -> int:
        self.health()
        self.cluster.calls.append(("workload", self.name, self.cluster.clock.now_s()))
        if self.cluster.workload_costs_s:  # a start that takes time (over SSH, on a loaded machine)
            self.cluster.clock.t_s += self.cluster.workload_costs_s.pop(0)
        return 1


class FakeCluster:
    def __init__(self, run_dir: Path, answer_after_start_s: float | None) -> None:
        self.run_dir = run_dir
        self.clock = SteppedClock()
        self.up_at: dict[str, float | None] = {}
        self.calls: list[tuple[str, str, float]] = []
        self.answer_after_start_s = answer_after_start_s
        self.workload_costs_s: list[float] = []  # what each workload's start takes, in turn (then nothing)

    def client(self, name: str) -> FakeClient:
        return FakeClient(self, name)


class FakeNet:
    """What actions and the step backend need of a `chaos.net.base.Net` for process steps and workloads."""

    backend = "docker"

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.run_dir = cluster.run_dir
        self.nodes = ["n1", "n2"]
        self.active: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []

    def client(self, name: str) -> FakeClient:
        return self.cluster.client(name)

    def node_state(self, name: str) -> dict[str, Any] | None:
        try:
            return self.client(name).health()
        except EnvironmentProblem:
            return None

    def record(self, type_: str, **fields: Any) -> None:
        self.events.append((type_, fields))

    def is_active(self, fault_id: str) -> bool:
        return fault_id in self.active

    def kill(self, node: str) -> str:
        self.cluster.up_at[node] = None
        self.cluster.calls.append(("kill", node, self.cluster.clock.now_s()))
        self.active[f"kill-{node}"] = {"kind": "kill", "detail": {"node": node}}
        return f"kill-{node}"

    def start(self, node: str) -> None:
        after = self.cluster.answer_after_start_s
        self.cluster.up_at[node] = None if after is None else self.cluster.clock.now_s() + after
        self.cluster.calls.append(("start", node, self.cluster.clock.now_s()))
        self.active.pop(f"kill-{node}", None)


def container_run(text: str, tmp_path: Path, answer_after_start_s: float | None = 0.2,
                  cluster: FakeCluster | None = None) -> tuple[Any, Any]:
    loaded = load_text(text, "t.yaml")
    cluster = cluster or FakeCluster(tmp_path, answer_after_start_s)
    target = actions.Target(FakeNet(cluster))  # type: ignore[arg-type]
    sched = Schedule(scenario=loaded.doc.data, source="t.yaml", variant=None, seed=0, backend="docker", run_id="r")
    backend = runner.StepBackend(target, cluster.clock, sched, QUIET)
    timeline.Timeline(loaded.scenario, backend, sched).run()
    return target, sched


def test_the_timeline_starts_once_the_opening_is_in_place(tmp_path: Path) -> None:
    """The steps at t=0 that lead the list are the opening: when they take time (a shaper started over SSH on a
    loaded machine: seconds), every later at_s and what the opening left for later (a kill's duration_s) count from
    its end, so the intervals the scenario states hold; the replay keeps them too."""
    cluster = FakeCluster(tmp_path, 0.2)
    cluster.workload_costs_s = [1.5]
    text = ("cluster: {nodes: 2}\nsteps:\n  - {at_s: 0, kill: n2, duration_s: 2}\n"
            "  - {at_s: 0, workload: {kind: unicast, from: n1, to: n2, count: 1}}\n"
            "  - {at_s: 1, workload: {kind: unicast, from: n1, to: n2, count: 1}}\n")
    _, sched = container_run(text, tmp_path, cluster=cluster)
    assert sched.opening_s == 1.5
    assert [(s.opening, s.at_s, s.applied_at_s) for s in sched.steps] == [(True, 0, 0), (True, 0, 0), (False, 2.5, 2.5)]
    assert cluster.calls == [("kill", "n2", 0.0), ("workload", "n1", 0.0), ("workload", "n1", 2.5),
                             ("start", "n2", 3.5)]  # the kill lasted 2 s from the opening's end
    replayed = schedule.replay_document(sched)["steps"]
    assert [(s["at_s"], next(k for k in s if k in ("kill", "workload", "end"))) for s in replayed] == [
        (0.0, "kill"), (0.0, "workload"), (1.0, "workload"), (2.0, "end")]


def test_a_delayed_restart_lets_steps_go_on_and_a_step_needing_the_node_waits_for_it(tmp_path: Path) -> None:
    text = ("cluster: {nodes: 2}\nsteps:\n  - at_s: 0\n    restart: {node: n2, delay_s: 0.3}\n"
            "  - at_s: 0.05\n    workload: {kind: unicast, from: n2, to: n1, count: 1}\n")
    target, sched = container_run(text, tmp_path)
    calls = target.net.cluster.calls
    assert [c[:2] for c in calls] == [("kill", "n2"), ("start", "n2"), ("workload", "n2")]
    assert calls[1][2] - calls[0][2] == pytest.approx(0.3)  # down for its delay_s
    assert calls[2][2] - calls[1][2] == pytest.approx(0.2)  # the workload waited until n2's control API answered
    restart, workload = sched.steps
    # the start comes its delay_s after the kill, while the workload step waits for n2 (not after it)
    assert restart.end_applied_at_s - restart.done_at_s == pytest.approx(0.3)
    assert restart.end_applied_at_s <= restart.ended_at_s
    assert workload.applied_at_s == pytest.approx(restart.ended_at_s + 0.2)
    assert [(t, f["kind"], f["detail"]["delay_s"]) for t, f in target.net.events if t == "fault_start"] == \
        [("fault_start", "restart", 0.3)]
    replayed = schedule.replay_document(sched)["steps"][0]["restart"]
    assert replayed["delay_s"] == pytest.approx(0.3)


def test_a_node_whose_control_api_never_comes_back_is_a_clear_error(tmp_path: Path) -> None:
    text = ("cluster: {nodes: 2}\nsteps:\n  - at_s: 0\n    restart: {node: n2, delay_s: 0.1}\n"
            "  - at_s: 0\n    workload: {kind: unicast, from: n2, to: n1, count: 1}\n")
    with pytest.raises(StepError, match=r"steps\[1\] \(workload unicast n2 -> n1: 1 x 100 B\): n2's control API did "
                                        rf"not answer within {timeline.CONTROL_TIMEOUT_S:g} s after n2 was started "
                                        r"again"):
        container_run(text, tmp_path, answer_after_start_s=None)


def test_a_killed_node_nothing_starts_again_is_an_error_at_once_and_duration_s_starts_it(tmp_path: Path) -> None:
    killed = "cluster: {nodes: 2}\nsteps:\n  - at_s: 0\n    kill: n2\n  - at_s: 0\n    " \
             "workload: {kind: unicast, from: n2, to: n1, count: 1}\n"
    cluster = FakeCluster(tmp_path, 0.2)
    with pytest.raises(StepError, match=r"n2 is down \(kill at steps\[0\]\) and no step brings it back"):
        container_run(killed, tmp_path, cluster=cluster)
    assert cluster.clock.now_s() == 0.0  # at once: the timeline did not wait for n2
    target, sched = container_run(killed.replace("kill: n2", "kill: n2\n    duration_s: 0.2"), tmp_path)
    assert [c[:2] for c in target.net.cluster.calls] == [("kill", "n2"), ("start", "n2"), ("workload", "n2")]
    assert sched.steps[0].end_detail == {"what": "end", "ended": "kill-n2"}
