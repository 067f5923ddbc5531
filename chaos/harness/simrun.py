"""Run a scenario in the seeded simulator (`splitlab sim`): the nodes' real protocol stacks (built from the same
environment a container gets, by `node.__main__.build_stack`), virtual time, and the step equivalents below.
The history is written like a container run's (events/<node>.jsonl, events/controller.jsonl, schedule.json),
so the same analysis and expectations judge it.

    workload            application sends at the given rate (multicast: waits while the window is full)
    partition / heal    one-way cuts of the simulated network / all cuts removed
    slow, flaky, shape  per-link delay, jitter, loss, duplication, reordering; fast: links back to default
    msg-fault           the simulator's message faults (drop, drop-first:N, drop-nth:N, drop-every:N,
                        drop-range:A-B, delay:MS, hold:MS), matched by conn_id, seqno and first through
                        node.sim.faults `where` predicates
    inject              the datagram the real injection would send, delivered to the target; conn_id current,
                        previous, next read from the target's unicast layer object
    admin               the unicast layer's request
    end, duration_s     that fault removed (a hold keeps what it holds until its release time); link faults
                        rebuilt from the steps still open
    after: heal, view,  the same conditions, checked after every simulated event (view: `view` events recorded
    workload-done       after the previous step)

pause, resume, kill, start, restart, corruption, rate limits, delay distributions and correlation, and the
`duplicate` message fault have no equivalent:
such a scenario is refused (UsageError, exit code 2) before anything runs. One seed drives the simulator; the
steps' timing is `chaos.harness.timeline`'s, as on containers.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.harness.errors import Problem, ScenarioError, StepError
from chaos.harness.faultstate import link_faults
from chaos.harness.load import Loaded
from chaos.harness.progress import Progress
from chaos.harness.schedule import Schedule
from chaos.harness.schema import LINK_ACTIONS
from chaos.harness.timeline import Timeline
from chaos.naming import new_run_id
from node.core import make_payload
from node.errors import UsageError

SIM_ONLY_ON_CONTAINERS = ("pause", "resume", "kill", "start", "restart")
POLL_S = 0.005
BURST = 64


SIMULATED_LINK_FIELDS = ("delay_ms", "jitter_ms", "loss_pct", "duplicate_pct", "reorder_pct")


def _unsimulable(step: Any, nodes: list[str]) -> list[str]:
    """The link-fault fields a slow/flaky/shape step sets (LinkFault.as_dict) that the simulator does not model."""
    from chaos import grudge

    if step.action == "shape":
        faults = list(grudge.parse_matrix(step.shape, nodes).values())
    else:
        faults = [grudge.link_fault(getattr(step, step.action).model_dump(exclude={"links"}))]
    return sorted({k for f in faults for k in f.as_dict()} - set(SIMULATED_LINK_FIELDS))


def check_simulable(loaded: Loaded) -> None:
    """Raise `ScenarioError` naming every step without a simulator equivalent."""
    problems = []
    raw_steps = loaded.doc.data.get("steps") or []
    for index, step in enumerate(loaded.scenario.steps):
        written = "msg-fault" if step.action == "msg_fault" and "msg-fault" in raw_steps[index] else step.action
        path = ("steps", index, written)
        where = loaded.doc.locate(("steps", index))
        if step.action in SIM_ONLY_ON_CONTAINERS:
            problems.append(Problem(where, path, f"{step.action} has no simulator equivalent (processes exist "
                                                  "only on containers); run it with 'splitlab run'"))
        elif step.action == "msg_fault" and step.msg_fault.action.startswith("duplicate"):
            problems.append(Problem(where, path, "the duplicate message fault has no simulator equivalent"))
        elif step.action in ("slow", "flaky", "shape"):
            unsimulable = _unsimulable(step, loaded.scenario.node_names)
            if unsimulable:
                problems.append(Problem(where, path, f"{', '.join(unsimulable)} have no simulator equivalent"))
    if problems:
        raise ScenarioError(problems, hint="pause, resume, kill, start, corruption, rate limits, correlations, "
                                           "delay distributions and message duplication run only on containers "
                                           "('splitlab run')")


class SimHistory:
    """Writes the simulator's records as history files (schema v1), with unix times base + virtual time.

    Records come from two places (the simulator's own, drained after the fact, and the workloads' `app_send`,
    recorded as they happen), so each file is ordered by virtual time before `seq` is numbered.
    """

    def __init__(self, run_dir: Path, run_id: str, base_ts: float) -> None:
        self.events_dir = run_dir / "events"
        self.events_dir.mkdir(parents=True, exist_ok=False)
        self.run_id = run_id
        self.base_ts = base_ts
        self.records: dict[str, list[tuple[float, int, str, dict[str, Any]]]] = {}
        self._order = 0

    def add(self, node: str, at_s: float, type_: str, fields: dict[str, Any]) -> None:
        self._order += 1
        body = {k: v for k, v in fields.items() if k not in ("ts", "node", "type")}
        self.records.setdefault(node, []).append((at_s, self._order, type_, body))

    def write(self) -> None:
        for node, records in self.records.items():
            lines = []
            for seq, (at_s, _, type_, body) in enumerate(sorted(records, key=lambda r: (r[0], r[1])), start=1):
                event = {"v": 1, "ts": round(self.base_ts + at_s, 6), "seq": seq, "run": self.run_id, "node": node,
                         "type": type_, **body}
                lines.append(json.dumps(event, default=str))
            (self.events_dir / f"{node}.jsonl").write_text("\n".join(lines) + "\n")


@dataclass
class SimWorkload:
    """One workload's progress (the shape of a node's /state workload entry)."""

    id: int
    node: str
    kind: str
    to: str
    count: int
    size: int
    rate: float
    sent: int = 0
    blocked_since_s: float | None = None
    blocked_s: float = 0.0
    error: str | None = None

    def state(self, now_s: float) -> dict[str, Any]:
        blocked = self.blocked_s + (now_s - self.blocked_since_s if self.blocked_since_s is not None else 0.0)
        return {"id": self.id, "kind": self.kind, "to": self.to, "count": self.count, "sent": self.sent,
                "done": self.sent >= self.count or self.error is not None, "error": self.error,
                "blocked": self.blocked_since_s is not None, "blocked_ms": round(blocked * 1000, 3)}


class SimCluster:
    """The simulated cluster: members, their workloads, faults, and the history being recorded."""

    def __init__(self, loaded: Loaded, seed: int, history: SimHistory) -> None:
        from node.__main__ import build_stack
        from node.config import from_env
        from node.sim import Simulator

        self.loaded = loaded
        self.nodes = loaded.scenario.node_names
        self.sim = Simulator(seed)
        self.rng = random.Random(seed)
        self.history = history
        self.boot = 1 + seed % 1_000_000  # virtual: the same seed writes the same message ids
        self.msg_counter = {n: 0 for n in self.nodes}
        self.workloads: list[SimWorkload] = []
        self.cuts: set[tuple[str, str]] = set()
        self.links: dict[tuple[str, str], dict[str, float]] = {}
        self.active: dict[str, str] = {}  # fault_id -> kind
        self.opened: dict[str, Any] = {}  # fault_id -> the step that opened it, in order
        self.msg_faults: dict[str, tuple[int, Any, dict[str, Any]]] = {}  # fault_id -> (sim id, switch, hold)
        for name, env in loaded.node_env().items():
            full = {"SPLITLAB_NODE": name, "SPLITLAB_RUN": history.run_id, "SPLITLAB_MEMBERS": ",".join(self.nodes),
                    "SPLITLAB_TOKEN": "sim",  # a container takes its first conn_id from its boot time; here the seed
                    "SPLITLAB_UNICAST_CONN_ID_START": str(self.rng.randrange(1, 0x7FFFFFFF)), **env}
            config = from_env(full)
            history.add(name, 0.0, "node_start", {"boot": self.boot, "data_ip": "sim", "control_ip": "sim",
                                                   "members": self.nodes, "config": {"unicast": config.unicast,
                                                                                    "backend": "sim"}})
            self.sim.add_member(name, build_stack(config))

    # --- controller history -------------------------------------------------------------------------------------
    def fault(self, kind: str, detail: dict[str, Any]) -> str:
        fault_id = f"{kind}-{self.rng.getrandbits(32):08x}"
        self.active[fault_id] = kind
        now = self.history.base_ts + self.sim.now_s
        self.history.add("controller", self.sim.now_s, "fault_start",
                         {"fault_id": fault_id, "kind": kind, "detail": detail, "applied_ts": now, "effective_ts": now})
        return fault_id

    def end(self, kinds: tuple[str, ...], only: str | None = None) -> None:
        """Record the end of every open fault of `kinds` (or of the one fault `only`)."""
        now = self.history.base_ts + self.sim.now_s
        for fault_id, kind in list(self.active.items()):
            if kind in kinds and only in (None, fault_id):
                del self.active[fault_id]
                self.history.add("controller", self.sim.now_s, "fault_end",
                                 {"fault_id": fault_id, "kind": kind, "applied_ts": now, "effective_ts": now})

    # --- workloads ----------------------------------------------------------------------------------------------
    def new_msg_id(self, node: str) -> str:
        self.msg_counter[node] += 1
        return f"{node}.{self.boot}.{self.msg_counter[node]}"

    def start_workload(self, node: str, kind: str, to: str | None, count: int, size: int, rate: float) -> SimWorkload:
        w = SimWorkload(len(self.workloads) + 1, node, kind, to or "*", count, size, rate)
        self.workloads.append(w)
        self.history.add("controller", self.sim.now_s, "workload", {"sender": node, "kind": kind, "to": w.to,
                                                                    "count": count, "size": size, "rate": rate})
        started = self.sim.now_s
        self._pump(w, started)
        return w

    def _pump(self, w: SimWorkload, started_s: float) -> None:
        """Send what is due now; schedule the next send (rate), or a retry while the window is full."""
        from node.multicast import WindowFull

        sim = self.sim
        sent_now = 0
        while w.sent < w.count and w.error is None:
            msg_id = self.new_msg_id(w.node)
            payload = make_payload(msg_id, w.size)
            try:
                if w.kind == "multicast":
                    sim.request(w.node, "multicast", "send", {"payload": payload})
                    self.history.add(w.node, sim.now_s, "app_send", {"msg_id": msg_id, "kind": w.kind, "to": "*",
                                                                      "size": len(payload)})
                else:
                    self.history.add(w.node, sim.now_s, "app_send", {"msg_id": msg_id, "kind": w.kind, "to": w.to,
                                                                      "size": len(payload)})
                    sim.request(w.node, "unicast", "send", {"to": w.to, "payload": payload})
            except WindowFull:
                self.msg_counter[w.node] -= 1  # not taken: the same id goes again
                if w.blocked_since_s is None:
                    w.blocked_since_s = sim.now_s
                sim.at(sim.now_s + POLL_S, lambda: self._pump(w, started_s))
                return
            except UsageError as exc:
                w.error = str(exc)
                return
            if w.blocked_since_s is not None:
                w.blocked_s += sim.now_s - w.blocked_since_s
                w.blocked_since_s = None
            w.sent += 1
            sent_now += 1
            if w.rate > 0 and w.sent < w.count:
                sim.at(max(sim.now_s, started_s + w.sent / w.rate), lambda: self._pump(w, started_s))
                return
            if w.rate == 0 and sent_now >= BURST and w.sent < w.count:
                sim.at(sim.now_s, lambda: self._pump(w, started_s))  # let arrivals in between, as the node does
                return

    def states(self) -> dict[str, dict[str, Any]]:
        now = self.sim.now_s
        return {n: {"boot": self.boot, "workloads": [w.state(now) for w in self.workloads if w.node == n]}
                for n in self.nodes}

    def started(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for w in self.workloads:
            out.setdefault(w.node, []).append({"id": w.id, "boot": self.boot, "count": w.count, "kind": w.kind,
                                               "to": w.to})
        return out

    # --- the network ----------------------------------------------------------------------------------------
    def set_cuts(self, cuts: set[tuple[str, str]]) -> None:
        self.sim.heal()
        for src, dst in sorted(cuts):
            self.sim.partition(src, dst)
        self.cuts = set(cuts)

    def set_links(self, updates: dict[tuple[str, str], dict[str, float]], merge: bool) -> None:
        if not merge:
            self.links = {}
            self.sim.reset_links()
        for pair, values in updates.items():
            merged = {**self.links.get(pair, {}), **{k: v for k, v in values.items() if v}}
            self.links[pair] = merged
            self.sim.set_link(pair[0], pair[1], loss_pct=merged.get("loss_pct", 0.0),
                              delay_ms=max(1.0, merged.get("delay_ms", 1.0)), jitter_ms=merged.get("jitter_ms", 0.0),
                              dup_pct=merged.get("duplicate_pct", 0.0), reorder_pct=merged.get("reorder_pct", 0.0))

    def clear_links(self) -> None:
        self.links = {}
        self.sim.reset_links()
        self.sim.clear_faults()

    def heal_all(self) -> None:
        self.set_cuts(set())
        self.clear_links()
        now = self.history.base_ts + self.sim.now_s
        for fault_id, kind in list(self.active.items()):
            self.history.add("controller", self.sim.now_s, "fault_end",
                             {"fault_id": fault_id, "kind": kind, "applied_ts": now, "effective_ts": now})
        self.active.clear()
        self.history.add("controller", self.sim.now_s, "heal", {"applied_ts": now, "effective_ts": now})


# --- steps --------------------------------------------------------------------------------------------------------
def _msg_fault(c: SimCluster, m: Any) -> str:
    from chaos.dissect import message_type
    from chaos.shaper.msgrules import action_spec
    from node.sim import faults
    from node.wire import message_types

    cls = message_types()[message_type(m.type)]
    spec = action_spec(m.action)
    action = spec["action"]
    base = faults.fields_equal(conn_id=m.conn_id, seqno=m.seqno, first=m.first)
    sim = c.sim
    holder: dict[str, Any] = {}
    if action == "drop-range":
        base = faults.all_of(base, faults.seqno_within(spec["seqno_lo"], spec["seqno_hi"]))
    switch = faults.Switch()
    if action in ("drop", "drop-range"):
        switch.where = base
        sim_id = sim.drop_matching(m.from_, m.to, cls, where=switch)
    elif action == "drop-first":
        switch.where = base
        sim_id = sim.drop_matching(m.from_, m.to, cls, where=switch, count=spec["n"])
    elif action == "drop-nth":
        switch.where = faults.nth_only(spec["n"], base)
        sim_id = sim.drop_matching(m.from_, m.to, cls, where=switch)
    elif action == "drop-every":
        switch.where = faults.every_nth(spec["n"], base)
        sim_id = sim.drop_matching(m.from_, m.to, cls, where=switch)
    elif action == "delay":
        switch.where = base
        sim_id = sim.delay_matching(m.from_, m.to, cls, spec["ms"] / 1000, where=switch)
    else:  # hold: from the first match on for `ms`, then released together; later matches pass
        def first_then_window(msg: Any) -> bool:
            if not base(msg):
                return False
            if "release_at" not in holder:
                holder["release_at"] = sim.now_s + spec["ms"] / 1000
                sim.at(holder["release_at"], lambda: sim.release(holder["id"]))
            return True
        switch.where = first_then_window
        sim_id = holder["id"] = sim.hold(m.from_, m.to, cls, where=switch)
    fault_id = c.fault("msg_fault", {"type": m.type, "src": m.from_, "dst": m.to, "action": m.action,
                                     "conn_id": m.conn_id, "seqno": m.seqno, "first": m.first})
    c.msg_faults[fault_id] = (sim_id, switch, holder)
    return fault_id


def end_fault(c: SimCluster, step: Any, fault_id: str | None) -> dict[str, Any]:
    """End the fault `step` opened as `fault_id` (a no-op when it already ended); see the module docstring."""
    if fault_id is None or fault_id not in c.active:
        return {"already_ended": fault_id}
    action = step.action
    if action == "partition":
        c.set_cuts(set())
    elif action == "msg_fault":
        sim_id, switch, holder = c.msg_faults.pop(fault_id)
        switch.off()
        if sim_id in c.sim.faults.faults and "release_at" not in holder:
            c.sim.remove_fault(sim_id)  # a hold that holds messages keeps them until its release time
    elif action in LINK_ACTIONS:
        still = [s for fid, s in c.opened.items() if fid != fault_id and fid in c.active and s.action in LINK_ACTIONS]
        c.set_links({pair: fault.as_dict() for pair, fault in link_faults(still, c.nodes).items()}, merge=False)
    else:
        raise UsageError(f"{action} has no simulator equivalent")
    c.end((c.active[fault_id],), only=fault_id)
    return {"ended": fault_id}


def _inject(c: SimCluster, args: Any) -> dict[str, Any]:
    from chaos.dissect import message_type
    from chaos.harness.injection import datagram, relative_conn_id

    code = message_type(args.type)
    fields = dict(args.fields)
    detail: dict[str, Any] = {}
    if isinstance(args.conn_id, str):
        state = c.sim.layer(args.to, "unicast").state(c.sim.now_s)
        fields["conn_id"] = detail["conn_id"] = relative_conn_id(state, args.to, args.from_, code, args.conn_id)
    elif args.conn_id is not None:
        fields["conn_id"] = args.conn_id
    data = datagram(c.sim.cluster_id, args.from_, code, fields, args.payload)
    for _ in range(args.count):
        c.sim.inject_bytes(args.to, data)
    return {"fault_id": c.fault("inject", {"from": args.from_, "to": args.to, "count": args.count, **detail}),
            "detail": detail}


def apply_step(c: SimCluster, step: Any) -> dict[str, Any]:
    """Apply one step in the simulator now; returns the realised schedule's fields (fault_id, detail)."""
    result = _apply(c, step)
    if result.get("fault_id"):
        c.opened[result["fault_id"]] = step
    return result


def _apply(c: SimCluster, step: Any) -> dict[str, Any]:
    from chaos import grudge as grudges

    action, args = step.action, step.args
    if action == "workload":
        senders = args.from_ if isinstance(args.from_, list) else [args.from_]
        ids = {s: c.start_workload(s, args.kind, args.to, args.count, args.size, args.rate).id for s in senders}
        return {"detail": {"workload_ids": ids}}
    if action == "partition":
        grudge = grudges.parse_grudge(args, c.nodes, c.rng) if isinstance(args, str) else args
        c.set_cuts({(src, dst) for dst, srcs in grudge.items() for src in srcs})
        c.end(("partition",))
        return {"fault_id": c.fault("partition", {"grudge": {k: sorted(v) for k, v in grudge.items()}})}
    if action == "heal":
        if args == "all":
            c.heal_all()
        else:
            c.set_cuts(set())
            c.end(("partition",))
        return {}
    if action in ("slow", "flaky"):
        pairs = grudges.parse_links(args.links, c.nodes) if args.links else grudges.all_links(c.nodes)
        values = args.model_dump(exclude={"links"})
        c.set_links({p: values for p in pairs}, merge=True)
        return {"fault_id": c.fault(action, {"links": [f"{s}->{d}" for s, d in pairs], **values})}
    if action == "shape":
        matrix = grudges.parse_matrix(args, c.nodes)
        c.set_links({p: f.as_dict() for p, f in matrix.items()}, merge=False)
        return {"fault_id": c.fault("shape", {"links": {f"{s}->{d}": f.as_dict() for (s, d), f in matrix.items()}})}
    if action == "fast":
        c.clear_links()
        c.end(("slow", "flaky", "shape", "msg_fault"))
        return {}
    if action == "msg_fault":
        return {"fault_id": _msg_fault(c, args)}
    if action == "inject":
        return _inject(c, args)
    if action == "admin":
        c.sim.request(args.node, "unicast", args.op, {"peer": args.peer})
        return {"detail": {"op": args.op}}
    raise UsageError(f"{action} has no simulator equivalent")


def _drain_records(c: SimCluster, done: int) -> int:
    """Move the simulator's new records into the history; returns how many were taken."""
    events = c.sim.events
    for event in events[done:]:
        fields = {k: v for k, v in event.items() if k not in ("ts", "node", "type")}
        c.history.add(event["node"], event["ts"], event["type"], fields)
    return len(events)


class SimBackend:
    """The virtual-time side of `chaos.harness.timeline.Timeline`: conditions are checked after every simulated
    event; the history keeps the simulator's records in the order they happened."""

    def __init__(self, c: SimCluster, schedule: Schedule, run_dir: Path, progress: Progress) -> None:
        self.c = c
        self.schedule = schedule
        self.run_dir = run_dir
        self.progress = progress
        self.recorded = 0
        self._scan: dict[str, Any] = {"mark": None, "pos": 0, "done": set()}
        self._missing = ""

    def drain(self) -> None:
        self.recorded = _drain_records(self.c, self.recorded)

    def now_s(self) -> float:
        return self.c.sim.now_s

    def now_ts(self) -> float:
        return self.c.history.base_ts + self.c.sim.now_s

    def pass_time(self, until_s: float, label: str) -> None:
        self.c.sim.run_until(until_s)

    def wait_until(self, ready: Any, until_s: float, label: str) -> bool:
        if ready():
            return True
        return self.c.sim.run_until_true(ready, max(0.0, until_s - self.c.sim.now_s))

    def apply(self, index: int, step: Any) -> dict[str, Any]:
        self.drain()
        return apply_step(self.c, step)

    def end_fault(self, index: int, step: Any, fault_id: str | None) -> dict[str, Any]:
        self.drain()
        return end_fault(self.c, step, fault_id)

    def view_mark(self) -> int:
        return len(self.c.sim.events)

    def views_installed(self, mark: int | None) -> bool:
        """Every node recorded a `view` holding all nodes after event number `mark` (scanned incrementally)."""
        scan = self._scan
        if scan["mark"] != mark:
            scan.update(mark=mark, pos=mark or 0, done=set())
        events, nodes = self.c.sim.events, set(self.c.nodes)
        for event in events[scan["pos"]:]:
            if event["type"] == "view" and nodes <= set(event["members"]):
                scan["done"].add(event["node"])
        scan["pos"] = len(events)
        missing = sorted(nodes - scan["done"])
        self._missing = f"{', '.join(missing)} installed no view holding every node after it"
        return not missing

    def workloads_done(self) -> bool:
        for w in self.c.workloads:
            if w.error is not None:
                raise StepError(f"workload {w.node}#{w.id} ended with an error after {w.sent}/{w.count} "
                                f"messages: {w.error}")
            if w.sent < w.count:
                blocked = " (blocked on a full window)" if w.blocked_since_s is not None else ""
                self._missing = f"workload {w.node}#{w.id} has sent {w.sent}/{w.count}{blocked}"
                return False
        return True

    def control_ready(self, node: str) -> bool:
        return True  # simulated members never go down (process steps are refused)

    def waiting_for(self) -> str:
        return self._missing

    def show(self, index: int, total: int, planned_s: float, applied_s: float, step: Any) -> None:
        self.progress.step(index, total, planned_s, applied_s, _describe(step))

    def save(self) -> None:
        pass  # written once at the end: a simulated run does not stop half-way


def run(loaded: Loaded, *, seed: int | None = None, out: Path | str | None = None, progress: Progress | None = None,
        spark: Any = None, report: bool = True, analyze: bool = True, replay_of: str | None = None) -> Any:
    """Run `loaded` in the simulator and judge it; returns a `chaos.harness.runner.RunResult`."""
    from chaos import cluster as clusters
    from chaos.harness.runner import finish

    check_simulable(loaded)
    progress = progress or Progress()
    scenario = loaded.scenario
    seed = scenario.seed if seed is None else seed
    started = time.monotonic()
    run_id = new_run_id()
    run_dir = (Path(out).resolve() if out else clusters.runs_root()) / run_id
    history = SimHistory(run_dir, run_id, time.time())
    progress.say(f"[bold]{scenario.name or loaded.doc.source}[/bold] in the simulator: variant "
                 f"{loaded.label}, seed {seed}, run {run_id}")
    c = SimCluster(loaded, seed, history)
    schedule = Schedule(scenario=loaded.doc.data, source=str(loaded.path or loaded.doc.source), variant=loaded.variant,
                        seed=seed, backend="sim", run_id=run_id, sets=loaded.sets, started_ts=history.base_ts,
                        replay_of=replay_of)
    backend = SimBackend(c, schedule, run_dir, progress)
    try:
        Timeline(scenario, backend, schedule).run()
    except StepError:
        backend.drain()
        history.write()
        schedule.save(run_dir)
        raise
    for realised in schedule.steps:
        realised.effective_ts = realised.applied_ts  # a simulated fault is in effect the moment it is applied
    timeline_end_s = c.sim.now_s
    timeline_states = c.states()
    backend.drain()
    c.heal_all()
    schedule.final_heal = {"applied_ts": history.base_ts + c.sim.now_s}
    c.sim.run_until(timeline_end_s + scenario.settle_s)
    backend.drain()
    states = c.states()
    for node in c.nodes:
        history.add(node, c.sim.now_s, "node_stop", {"reason": "exit", "counters": {}})
    history.write()
    schedule.finished = True
    schedule.save(run_dir)
    (run_dir / "final_state.json").write_text(json.dumps(states, indent=1))
    progress.say(f"simulated {c.sim.now_s:.1f} s of virtual time in {time.monotonic() - started:.1f} s")
    return finish(loaded, run_dir, run_id, seed, schedule, c.started(), states, timeline_states, progress, spark,
                  report, analyze, started)


def _describe(step: Any) -> str:
    from chaos.harness.actions import describe

    return describe(step)
