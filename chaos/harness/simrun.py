"""Run a scenario in the seeded simulator (`splitlab sim`): the nodes' real protocol stacks (built from the same
environment a container gets, by `node.__main__.build_stack`), virtual time, and the step equivalents below.
The history is written like a container run's (events/<node>.jsonl, events/controller.jsonl, schedule.json),
so the same analysis and expectations judge it.

| step | simulator equivalent |
|---|---|
| workload | application sends at the given rate (multicast: waits while the window is full) |
| partition / heal | one-way cuts of the simulated network / all cuts removed |
| slow / flaky / shape / fast | per-link delay, jitter, loss, duplication, reordering / links back to default |
| msg-fault | the simulator's message faults: drop, drop-first:N, drop-nth:N, delay:MS, hold:MS |
| inject | the datagram the real injection would send (scapy dissector), delivered to the target |
| admin | the unicast layer's request |

pause, resume, kill, start, restart, corruption, rate limits, delay distributions and correlation, and the
`duplicate` message fault have no equivalent:
such a scenario is refused (UsageError, exit code 2) before anything runs. One seed drives the simulator.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.harness.errors import Problem, ScenarioError
from chaos.harness.load import Loaded
from chaos.harness.progress import Progress
from chaos.harness.schedule import RealisedStep, Schedule
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

    def end(self, kinds: tuple[str, ...]) -> None:
        now = self.history.base_ts + self.sim.now_s
        for fault_id, kind in list(self.active.items()):
            if kind in kinds:
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
    from chaos.shaper.msgrules import parse_action
    from node.wire import message_types

    cls = message_types()[message_type(m.type)]
    action, ms, n = parse_action(m.action)

    def fields_match(msg: Any) -> bool:
        return ((m.conn_id is None or getattr(msg, "conn_id", None) == m.conn_id)
                and (m.seqno is None or getattr(msg, "seqno", None) == m.seqno))

    sim = c.sim
    if action == "drop":
        sim.drop_matching(m.from_, m.to, cls, where=fields_match)
    elif action == "drop-first":
        sim.drop_matching(m.from_, m.to, cls, where=fields_match, count=n)
    elif action == "drop-nth":
        seen = [0]

        def nth(msg: Any) -> bool:
            if not fields_match(msg):
                return False
            seen[0] += 1
            return seen[0] == n
        sim.drop_matching(m.from_, m.to, cls, where=nth)
    elif action == "delay":
        sim.delay_matching(m.from_, m.to, cls, ms / 1000, where=fields_match)
    else:  # hold: from the first match on for `ms`, then released together; later matches pass
        holder: dict[str, Any] = {}

        def first_then_window(msg: Any) -> bool:
            if not fields_match(msg):
                return False
            if "release_at" not in holder:
                holder["release_at"] = sim.now_s + ms / 1000
                sim.at(holder["release_at"], lambda: sim.release(holder["id"]))
            return True
        holder["id"] = sim.hold(m.from_, m.to, cls, where=first_then_window)
    return c.fault("msg_fault", {"type": m.type, "src": m.from_, "dst": m.to, "action": m.action,
                                 "conn_id": m.conn_id, "seqno": m.seqno})


def apply_step(c: SimCluster, step: Any) -> dict[str, Any]:
    """Apply one step in the simulator now; returns the realised schedule's fields (fault_id, detail)."""
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
        from chaos import dissect, inject

        data = dissect.build(c.sim.cluster_id, args.from_, [inject.message(str(args.type), **args.fields)])
        for _ in range(args.count):
            c.sim.inject_bytes(args.to, data)
        return {"fault_id": c.fault("inject", {"from": args.from_, "to": args.to, "count": args.count})}
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
    recorded = 0
    for index, step in enumerate(scenario.steps):
        c.sim.run_until(step.at_s)
        recorded = _drain_records(c, recorded)
        realised = RealisedStep(index=index, action=step.action, at_s=step.at_s, applied_at_s=c.sim.now_s,
                                applied_ts=history.base_ts + c.sim.now_s,
                                args=step.model_dump(mode="json", by_alias=True)[
                                    "msg-fault" if step.action == "msg_fault" else step.action])
        progress.step(index, len(scenario.steps), step.at_s, c.sim.now_s, _describe(step))
        result = apply_step(c, step)
        realised.done_at_s = c.sim.now_s
        realised.effective_ts = realised.applied_ts
        realised.fault_id = result.get("fault_id")
        realised.detail = result.get("detail", {})
        schedule.steps.append(realised)
    c.sim.run_until(scenario.timeline_s)
    timeline_states = c.states()
    recorded = _drain_records(c, recorded)
    c.heal_all()
    schedule.final_heal = {"applied_ts": history.base_ts + c.sim.now_s}
    c.sim.run_until(scenario.timeline_s + scenario.settle_s)
    _drain_records(c, recorded)
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
