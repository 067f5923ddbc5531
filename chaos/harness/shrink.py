"""The search of `splitlab shrink`, pure: a failing scenario document (the realised schedule of a run, every step
at an absolute `at_s`) and a trial function (`Trial`: does this document still fail the target check?) in,
the smallest document found out. What runs the trials is `chaos.harness.shrink_run`.

The steps are grouped into fault units (`group_units`): a fault step with the step that ends it (`end: <id>`;
else, for a partition, the next `heal`; for a link or message fault, the next `fast`; for a pause or a kill, the
next `resume` or `start` of that node; `heal: all` ends any of them); a step that ends several faults belongs to
each of their units and is kept while one of them is. Any other step (inject, restart, admin, a heal or fast
that ends nothing) is a unit of its own. Workloads are no units: every trial keeps them until phase 4.

Phases, each keeping a change only when the trial still fails:
  1. fewer steps: `chaos.ddmin.ddmin` over the units;
  2. shorter faults: each remaining unit's end moved to halfway, again and again (down to `MIN_FAULT_S`);
  3. fewer nodes: `cluster.nodes` lowered one at a time while the highest node is named by no remaining fault
     step (it leaves the workloads' `from` lists; a workload to it or only from it goes);
  4. smaller workloads: each workload left out, else its `count` halved again and again.
The trials are capped (`max_trials`, counted across phases); each is reported through `log`.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from chaos.ddmin import ddmin
from chaos.harness.schema import ENDABLE, LINK_ACTIONS, STEP_KEYS

Trial = Callable[[dict[str, Any]], bool]
Log = Callable[[str], None]
MIN_FAULT_S = 0.1        # phase 2 does not shorten a fault below this
MIN_NODES = 2
_NODE = re.compile(r"\bn(\d+)\b")
LINK_FAULTS = (*LINK_ACTIONS, "msg_fault")  # what `fast` ends


def action_of(step: dict[str, Any]) -> str:
    """The action of a step as the schema names it (`msg-fault` written is `msg_fault`)."""
    return key_of(step).replace("-", "_")


def _node_of(arg: Any) -> str | None:
    """The node a pause/kill/resume/start/restart names (text, or a mapping with `node`)."""
    return arg.get("node") if isinstance(arg, dict) else arg


@dataclass(frozen=True)
class Unit:
    """Steps that go together: the step that opens a fault and those that end it (indices into the steps), or one
    step alone."""

    steps: tuple[int, ...]

    @property
    def start(self) -> int:
        return self.steps[0]

    @property
    def end(self) -> int | None:
        return self.steps[-1] if len(self.steps) > 1 else None


def key_of(step: dict[str, Any]) -> str:
    """The key under which a step's action is written (`msg-fault` or `msg_fault`)."""
    for key in step:
        if key not in STEP_KEYS:
            return key
    raise ValueError(f"step without an action: {step}")


def _ends(opening: dict[str, Any], later: dict[str, Any]) -> bool:
    """Whether the step `later` ends the fault the step `opening` opened."""
    action, then = action_of(opening), action_of(later)
    arg = later.get(key_of(later))
    if then == "end":
        return opening.get("id") is not None and arg == opening["id"]
    if then == "heal" and arg == "all":
        return action in ENDABLE and action != "fault"
    if action == "partition":
        return then == "heal"
    if action in LINK_FAULTS:
        return then == "fast"
    if action in ("pause", "kill"):
        return then == {"pause": "resume", "kill": "start"}[action] and \
            _node_of(arg) == _node_of(opening.get(key_of(opening)))
    return False


def group_units(steps: list[dict[str, Any]]) -> tuple[list[int], list[Unit]]:
    """(indices of the workload steps, the fault units in order of their first step). See the module
    docstring."""
    workloads = [i for i, s in enumerate(steps) if action_of(s) == "workload"]
    claimed: set[int] = set()
    units: list[Unit] = []
    openers = ENDABLE
    for i, step in enumerate(steps):
        if action_of(step) not in openers:
            continue
        end = next((j for j in range(i + 1, len(steps)) if _ends(step, steps[j])), None)
        units.append(Unit((i,) if end is None else (i, end)))
        if end is not None:
            claimed.add(end)
    for i, step in enumerate(steps):
        if i not in claimed and i not in workloads and action_of(step) not in openers:
            units.append(Unit((i,)))
    units.sort(key=lambda u: u.start)
    return workloads, units


def nodes_named(step: dict[str, Any]) -> set[int]:
    """The numbers of the nodes a step names (`n3` -> 3) in its action's arguments."""
    return {int(n) for n in _NODE.findall(json.dumps(step.get(key_of(step))))}


@dataclass
class Shrunk:
    """What the search found."""

    doc: dict[str, Any]
    trials: int
    units_before: int
    units_after: int
    nodes_before: int
    nodes_after: int
    complete: bool               # every phase ran to its end within the trial cap
    notes: list[str] = field(default_factory=list)


class Shrinker:
    """The state of one search: the steps (changed by phases 2 and 4), the units and workloads kept, the node
    count; `document()` is the scenario for the current state."""

    def __init__(self, doc: dict[str, Any], trial: Trial, *, max_trials: int, spent: int = 0,
                 log: Log = lambda _: None) -> None:
        self.template = {k: v for k, v in doc.items() if k != "steps"}
        self.steps = [dict(s) for s in doc.get("steps") or []]
        self.workloads, self.units = group_units(self.steps)
        self.nodes = int(doc["cluster"]["nodes"])
        self.trial, self.max_trials, self.trials, self.log = trial, max_trials, spent, log
        self.complete = True

    # --- documents ---------------------------------------------------------------------------------------------
    def document(self, units: list[Unit] | None = None, steps: list[dict[str, Any]] | None = None,
                 nodes: int | None = None, workloads: list[int] | None = None) -> dict[str, Any]:
        """The scenario with `units` (default: the kept ones), the workloads, `nodes` nodes."""
        steps = self.steps if steps is None else steps
        nodes = self.nodes if nodes is None else nodes
        kept = {i for u in (self.units if units is None else units) for i in u.steps}
        kept |= set(self.workloads if workloads is None else workloads)
        out = []
        for i in sorted(kept, key=lambda i: (float(steps[i]["at_s"]), i)):
            step = _within(steps[i], nodes)
            if step is not None:
                out.append(step)
        doc = copy.deepcopy(self.template)
        doc["steps"] = out
        if nodes != int(doc["cluster"]["nodes"]):
            _drop_nodes(doc, nodes)
        return doc

    def attempt(self, doc: dict[str, Any], what: str) -> bool:
        """One trial (False without running once the cap is reached)."""
        if self.trials >= self.max_trials:
            self.complete = False
            return False
        self.trials += 1
        fails = self.trial(doc)
        faults = sum(1 for s in doc["steps"] if action_of(s) != "workload")
        self.log(f"trial {self.trials}/{self.max_trials}: {what}: {faults} fault step(s), "
                 f"{doc['cluster']['nodes']} node(s): {'still fails' if fails else 'passes'}")
        return fails

    # --- phases ------------------------------------------------------------------------------------------------
    def fewer_steps(self) -> None:
        before = len(self.units)
        found, minimal = ddmin(self.units, lambda units: self.attempt(self.document(units=units),
                                                                      f"{len(units)} of {before} unit(s)"),
                               max_trials=max(0, self.max_trials - self.trials))
        self.units = found
        self.complete &= minimal

    def shorter_faults(self) -> None:
        for unit in list(self.units):
            if unit.end is None:
                continue
            while True:
                start_s, end_s = float(self.steps[unit.start]["at_s"]), float(self.steps[unit.end]["at_s"])
                length_s = end_s - start_s
                if length_s < 2 * MIN_FAULT_S:
                    break
                steps = list(self.steps)
                steps[unit.end] = {**steps[unit.end], "at_s": round(start_s + length_s / 2, 3)}
                if not self.attempt(self.document(steps=steps), f"steps[{unit.start}] {length_s:g} s -> "
                                                                f"{length_s / 2:g} s"):
                    break
                self.steps = steps

    def fewer_nodes(self) -> None:
        named = {n for u in self.units for i in u.steps for n in nodes_named(self.steps[i])}
        floor = max([MIN_NODES, *named])
        while self.nodes > floor:
            if not self.attempt(self.document(nodes=self.nodes - 1), f"{self.nodes - 1} node(s)"):
                break
            self.nodes -= 1

    def smaller_workloads(self) -> None:
        for index in list(self.workloads):
            if _within(self.steps[index], self.nodes) is None:
                self.workloads.remove(index)  # nothing of it is left with the nodes dropped
                continue
            rest = [i for i in self.workloads if i != index]
            if self.attempt(self.document(workloads=rest), f"without the workload of steps[{index}]"):
                self.workloads = rest
                continue
            while (count := int(self.steps[index]["workload"]["count"])) > 1:
                steps = list(self.steps)
                steps[index] = {**steps[index], "workload": {**steps[index]["workload"], "count": count // 2}}
                if not self.attempt(self.document(steps=steps), f"steps[{index}] count {count} -> {count // 2}"):
                    break
                self.steps = steps

    def run(self) -> Shrunk:
        units_before, nodes_before = len(self.units), self.nodes
        for phase in (self.fewer_steps, self.shorter_faults, self.fewer_nodes, self.smaller_workloads):
            phase()
        notes = [] if self.complete else [f"stopped at the cap of {self.max_trials} trials"]
        return Shrunk(self.document(), self.trials, units_before, len(self.units), nodes_before, self.nodes,
                      self.complete, notes)


def _within(step: dict[str, Any], nodes: int) -> dict[str, Any] | None:
    """`step` on a cluster of `nodes` nodes: a workload loses the senders beyond it (None when none is left or
    its receiver is beyond it); any other step as it is."""
    if action_of(step) != "workload":
        return step
    work = step["workload"]
    senders = work["from"] if isinstance(work["from"], list) else [work["from"]]
    kept = [s for s in senders if int(s[1:]) <= nodes]
    if not kept or (work.get("to") is not None and int(work["to"][1:]) > nodes):
        return None
    if len(kept) == len(senders):
        return step
    return {**step, "workload": {**work, "from": kept if len(kept) > 1 else kept[0]}}


def _drop_nodes(doc: dict[str, Any], nodes: int) -> None:
    """Lower `cluster.nodes` to `nodes`: the per-node overrides of the nodes beyond it go, in the cluster and in
    every variant, and so do they from the expectations' list parameters (e.g. `ignore_receivers`)."""
    def beyond(name: Any) -> bool:
        match = _NODE.fullmatch(str(name))
        return match is not None and int(match.group(1)) > nodes

    doc["cluster"]["nodes"] = nodes
    for holder in [doc["cluster"], *(doc.get("variants") or {}).values()]:
        if isinstance(holder, dict) and isinstance(holder.get("overrides"), dict):
            holder["overrides"] = {k: v for k, v in holder["overrides"].items() if not beyond(k)}
    for checks in (doc.get("expect") or {}).values():
        for item in (checks or {}).values():
            if isinstance(item, dict):
                for key, value in item.items():
                    if isinstance(value, list):
                        item[key] = [v for v in value if not beyond(v)]


def shrink(doc: dict[str, Any], trial: Trial, *, max_trials: int, spent: int = 0, log: Log = lambda _: None
           ) -> Shrunk:
    """Search for the smallest document that still fails (see the module docstring); `doc` must fail already
    (the caller checked it, spending `spent` of the `max_trials`)."""
    return Shrinker(doc, trial, max_trials=max_trials, spent=spent, log=log).run()
