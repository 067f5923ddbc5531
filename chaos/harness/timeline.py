"""When each step of a scenario fires, and what a step leaves for later: the one timeline driver of the container
runner (`runner.py`) on every network backend: containers (wall clock) and the simulator (virtual time).

Steps fire one after another, in list order:
- `at_s: T` fires at T seconds from the start of the timeline (at once if an earlier relative step went past T).
  The opening (the steps at `at_s: 0` that lead the list) sets the run's first conditions, and the timeline
  starts once they are all in place: every later `at_s` counts from the end of the opening (`opening_s` in the
  schedule), and so does what the opening's steps leave for later (a fault's `duration_s`, a restart's delay),
  so that a slow opening (steps over SSH on a loaded machine: 3 s) does not squeeze the intervals after it;
- `after: C` fires when condition C holds, plus `delay_s`; `timeout_s` (default 60 s) bounds the wait, after
  which the run stops with a `StepError` naming what was missing:
  - `heal`: the previous heal took effect: the nearest earlier step among heal, fast, end, resume and start
    (done when that step returned: partitions and heals return once probes see them in effect), or, if a fault
    step with `duration_s` is nearer, the end of that fault when its duration runs out;
  - `view`: every node installed a view holding all nodes after the previous step was applied (simulator: a
    `view` event recorded after it; containers: each node's `/state` view differs from the one it held just
    before that step and holds every node);
  - `workload-done`: every workload started so far handed all its messages to the protocol (`sent == count`);
    a workload that ended with an error or went with a restarted process never will: StepError at once.

What a step leaves for later runs at its time, between steps and during waits: the end of its fault after its
`duration_s` (counted from when the step returned), and the start of a node restarted with `delay_s`. A step
that needs a node's control API (a workload's senders, admin, inject with a relative conn_id) first waits for a
pending start of that node (a delayed restart, or the `duration_s` of its kill or pause), then until its control
API answers (`CONTROL_TIMEOUT_S`); a node that is down (kill, pause) with nothing to bring it back is a StepError
at once. `heal: all` brings every node back. The timeline ends at its planned length (`duration_s`, else the
last `at_s`) or later, once every step and everything left for later has happened.

The realised schedule gets, per step, the time it really fired (`applied_at_s`), when its condition held
(`condition_met_at_s`), and when what it left for later began and was done (`end_applied_at_s`,
`ended_at_s`), so a replay runs it at absolute times.
"""
from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from chaos.harness.errors import StepError
from chaos.harness.schedule import RealisedStep, Schedule
from chaos.harness.schema import HEALING, Scenario, Step

CONTROL_TIMEOUT_S = 30.0


class Backend(Protocol):
    """What the driver needs from a run: time, steps, fault ends and the conditions' state."""

    def now_s(self) -> float: ...                       # seconds since the timeline started
    def now_ts(self) -> float: ...                      # unix seconds
    def pass_time(self, until_s: float, label: str) -> None: ...
    def wait_until(self, ready: Callable[[], bool], until_s: float, label: str) -> bool: ...
    def apply(self, index: int, step: Step) -> dict[str, Any]: ...
    def end_fault(self, index: int, step: Step, fault_id: str | None) -> dict[str, Any]: ...
    def view_mark(self) -> Any: ...
    def views_installed(self, mark: Any) -> bool: ...
    def workloads_done(self) -> bool: ...
    def control_ready(self, node: str) -> bool: ...
    def waiting_for(self) -> str: ...                   # what the last unmet condition lacked (for errors)
    def show(self, index: int, total: int, planned_s: float, applied_s: float, step: Step) -> None: ...
    def opened(self, opening_s: float) -> None: ...     # the opening is in place, after opening_s
    def save(self) -> None: ...


@dataclass(order=True)
class Later:
    """Something a step left for later: the end of its fault (`end`) or a restarted node's start (`start`)."""

    due_s: float
    order: int
    index: int = field(compare=False)
    what: str = field(compare=False)
    run: Callable[[], dict[str, Any]] = field(compare=False)
    resumes: str | None = field(default=None, compare=False)


def describe(step: Step) -> str:
    from chaos.harness.actions import describe as text

    return text(step)


def control_nodes(step: Step) -> list[str]:
    """The nodes whose control API a step talks to."""
    if step.action == "workload":
        args = step.workload
        return list(args.from_) if isinstance(args.from_, list) else [args.from_]
    if step.action == "admin":
        return [step.admin.node]
    if step.action == "inject" and isinstance(step.inject.conn_id, str):
        return [step.inject.to]
    return []


def process_node(step: Step) -> str | None:
    """The node a process step (kill, pause, start, resume, restart) acts on."""
    if step.action in ("kill", "start", "resume"):
        return step.args
    if step.action == "pause":
        return step.pause if isinstance(step.pause, str) else step.pause.node
    return step.restart_node


class Timeline:
    """Runs a scenario's steps through a backend and records them in the schedule. See the module docstring."""

    def __init__(self, scenario: Scenario, backend: Backend, schedule: Schedule) -> None:
        self.scenario = scenario
        self.steps = scenario.steps
        self.backend = backend
        self.schedule = schedule
        self.realised: dict[int, RealisedStep] = {}
        self.ids = {s.id: i for i, s in enumerate(self.steps) if s.id is not None}
        self.later: list[Later] = []
        self._order = itertools.count()
        self.down: dict[str, str] = {}   # node -> why it is down (its control API cannot answer)
        self.unsure: set[str] = set()    # nodes started again whose control API has not answered yet
        self.view_mark: Any = None
        self.opening = next((i for i, s in enumerate(self.steps) if s.after is not None or s.at_s > 0),
                            len(self.steps))  # how many steps the opening holds
        self.offset_s = 0.0                    # where the timeline's t=0 is on the backend's clock: the opening's end

    # --- time -----------------------------------------------------------------------------------------------------
    def advance(self, until_s: float, label: str) -> None:
        """Let time pass until `until_s`, running what falls due on the way."""
        while self.later and self.later[0].due_s <= until_s:
            self._run_later()
        self.backend.pass_time(until_s, label)

    def wait(self, ready: Callable[[], bool], deadline_s: float, label: str) -> bool:
        """Wait until `ready()` holds (True) or `deadline_s` passes (False), running what falls due meanwhile."""
        while True:
            due = self.later[0].due_s if self.later else math.inf
            if self.backend.wait_until(ready, min(deadline_s, due), label):
                return True
            if due <= deadline_s:
                self._run_later()
                continue
            return False

    def _run_later(self) -> None:
        item = heapq.heappop(self.later)
        self.backend.pass_time(item.due_s, f"{item.what} of step {item.index + 1}")
        realised = self.realised[item.index]
        realised.end_applied_at_s = self.backend.now_s()
        detail = item.run()
        realised.ended_at_s = self.backend.now_s()
        realised.ended_ts = self.backend.now_ts()
        realised.end_detail = {"what": item.what, **detail}
        if item.resumes is not None and not detail.get("already_ended"):
            self.down.pop(item.resumes, None)
            self.unsure.add(item.resumes)
        self.backend.save()

    def _defer(self, due_s: float, index: int, what: str, run: Callable[[], dict[str, Any]],
               resumes: str | None = None) -> None:
        heapq.heappush(self.later, Later(due_s, next(self._order), index, what, run, resumes))

    def _open(self) -> None:
        """The opening is in place: the timeline's t=0 is now, and what the opening's steps left for later counts
        from now as well."""
        self.offset_s = self.schedule.opening_s = self.backend.now_s()
        for item in self.later:
            item.due_s += self.offset_s - (self.realised[item.index].done_at_s or 0.0)
        heapq.heapify(self.later)
        self.backend.opened(self.offset_s)

    # --- when a step fires -----------------------------------------------------------------------------------------
    def _fire_time(self, index: int, step: Step) -> tuple[float, float | None]:
        """Let time pass until the step fires; returns (planned time, when its condition held)."""
        if step.after is None:
            planned = step.at_s + self.offset_s
            self.advance(planned, f"next: step {index + 1} at t={step.at_s:g} s")
            return planned, None
        deadline = self.backend.now_s() + step.wait_s
        what = f"step {index + 1} after {step.after}"
        if step.after == "heal":
            met = self._heal_done(index, deadline, what)
        else:
            ready = (lambda: self.backend.views_installed(self.view_mark)) if step.after == "view" \
                else self.backend.workloads_done
            if not self.wait(ready, deadline, what):
                since = f"steps[{index - 1}]" if index else "the start"
                raise StepError(f"steps[{index}] (after: {step.after}): not met within {step.wait_s:g} s after "
                                f"{since}: {self.backend.waiting_for()}",
                                hint="raise the step's timeout_s, or check the cluster's logs in the run directory")
            met = self.backend.now_s()
        planned = met + (step.delay_s or 0.0)
        self.advance(planned, f"{what} + {step.delay_s or 0:g} s")
        return planned, met

    def _heal_done(self, index: int, deadline_s: float, label: str) -> float:
        """When the heal a `after: heal` step waits for took effect (waiting for it if it is still to come)."""
        for j in range(index - 1, -1, -1):
            step = self.steps[j]
            if step.action in HEALING:
                return self.realised[j].done_at_s or self.backend.now_s()
            if step.duration_s is not None:
                realised = self.realised[j]
                if not self.wait(lambda: realised.ended_at_s is not None, deadline_s, label):
                    raise StepError(f"steps[{index}] (after: heal): steps[{j}]'s duration_s did not run out within "
                                    f"{self.steps[index].wait_s:g} s", hint="raise the step's timeout_s")
                return realised.ended_at_s
        raise StepError(f"steps[{index}] (after: heal): no earlier heal")  # the loader refuses such a file

    def _need_control(self, index: int, step: Step) -> None:
        """Wait until every node whose control API the step needs is up and answers."""
        for node in control_nodes(step):
            if node in self.down:
                pending = [item for item in self.later if item.resumes == node]
                if not pending:
                    raise StepError(f"steps[{index}] ({describe(step)}) needs {node}'s control API, but {node} is "
                                    f"down ({self.down[node]}) and no step brings it back before this one",
                                    hint=f"add a start or end step for {node} before steps[{index}]")
                self.advance(min(item.due_s for item in pending), f"{node} coming back")
            if node in self.unsure:
                deadline = self.backend.now_s() + CONTROL_TIMEOUT_S
                if not self.wait(lambda: self.backend.control_ready(node), deadline, f"{node}'s control API"):
                    raise StepError(f"steps[{index}] ({describe(step)}): {node}'s control API did not answer within "
                                    f"{CONTROL_TIMEOUT_S:g} s after {node} was started again",
                                    hint=f"see {node}'s log in the run directory (logs/{node}.log)")
                self.unsure.discard(node)

    # --- applying -----------------------------------------------------------------------------------------------
    def _end(self, index: int, ref: int) -> dict[str, Any]:
        """End the fault steps[ref] started (no-op when something else ended it already)."""
        step = self.steps[ref]
        detail = self.backend.end_fault(ref, step, self.realised[ref].fault_id)
        node = process_node(step)
        if node is not None and not detail.get("already_ended"):
            self.down.pop(node, None)
            self.unsure.add(node)
        return detail

    def _processes(self, index: int, step: Step) -> None:
        """Keep track of which nodes are down after a process step."""
        node = process_node(step)
        if step.action == "heal" and step.heal == "all":  # heal_all starts killed nodes and resumes paused ones
            self.unsure.update(self.down)
            self.down.clear()
        elif step.action in ("kill", "pause"):
            self.down[node] = f"{step.action} at steps[{index}]"
        elif step.action in ("start", "resume"):
            self.down.pop(node, None)
            self.unsure.add(node)
        elif step.action == "restart":
            if step.restart_delay_s:
                self.down[node] = f"restart at steps[{index}]"
            else:
                self.unsure.add(node)

    def run(self) -> None:
        backend, steps = self.backend, self.steps
        if steps and steps[0].after == "view":
            self.view_mark = backend.view_mark()
        for index, step in enumerate(steps):
            planned_s, met_s = self._fire_time(index, step)
            self._need_control(index, step)
            mark = backend.view_mark() if index + 1 < len(steps) and steps[index + 1].after == "view" else None
            realised = RealisedStep(index=index, action=step.action,
                                    args=step.model_dump(mode="json", by_alias=True)[_key(step)], at_s=planned_s,
                                    applied_at_s=backend.now_s(), applied_ts=backend.now_ts(), after=step.after,
                                    condition_met_at_s=met_s, opening=index < self.opening)
            self.realised[index] = realised
            self.schedule.steps.append(realised)
            backend.show(index, len(steps), planned_s, realised.applied_at_s, step)
            if step.action == "end":
                result: dict[str, Any] = {"detail": self._end(index, self.ids[step.end])}
            else:
                result = backend.apply(index, step)
            realised.done_at_s = backend.now_s()
            realised.fault_id = result.get("fault_id")
            realised.detail = result.get("detail", {})
            self._processes(index, step)
            if step.duration_s is not None:
                self._defer(realised.done_at_s + step.duration_s, index, "end",
                            lambda ref=index: self._end(ref, ref), process_node(step))
            then = result.get("then")
            if then is not None:
                self._defer(realised.done_at_s + then["delay_s"], index, "start", then["run"], then.get("node"))
            if index + 1 == self.opening:
                self._open()
            self.view_mark = mark
            backend.save()
        self.advance(max(self.scenario.timeline_s + self.offset_s, backend.now_s()), "end of the timeline")
        while self.later:
            self._run_later()
        backend.save()


def _key(step: Step) -> str:
    return "msg-fault" if step.action == "msg_fault" else step.action


__all__ = ["CONTROL_TIMEOUT_S", "Backend", "Later", "Timeline", "control_nodes", "process_node"]
