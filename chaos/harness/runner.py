"""Run a scenario on a network backend and judge it: a fresh cluster (real containers, `backend="docker"`, or the
simulator, `backend="sim"`: the only difference is the `chaos.net.base.Net` constructed), the timeline, a final
heal, a settling time, the nodes' final state, the nodes stopped (their histories complete) and their logs saved,
the analysis while the containers and networks are removed, and the verdict against the scenario's expectations.

Everything lands in the run directory `runs/<run-id>/` (or `--out DIR/<run-id>/`):
    schedule.json      the realised schedule (chaos.harness.schedule), rewritten after every step (the steps'
                       timing is chaos.harness.timeline's)
    verdict.json       expectations and outcomes, with the paths of the report
    report/summary.json, report/report.html   the analysis (pipeline)
    logs/<node>.log    each container's output;  final_state.json   each node's /state after the settle
    events/, ledger.jsonl, docker-compose.yml  as every run has

The cluster is removed and every fault healed whatever happens (failure, Ctrl-C). Raises `UsageError` for bad
input, `ScenarioError` naming the steps a backend cannot run (before anything runs) and `EnvironmentProblem`
when the machine cannot run it; a verdict that does not hold is not an error.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import docker.errors
from rich.markup import escape

from chaos.cluster import lifecycle as clusters
from chaos.harness import actions
from chaos.harness.errors import Problem, ScenarioError, StepError
from chaos.harness.expect import (UNBLOCKED, WORKLOADS, Verdict, check_params, expected_statuses, judge,
                                  unblocked_check, workloads_check)
from chaos.harness.load import Loaded
from chaos.harness.progress import Progress
from chaos.harness.schedule import Schedule
from chaos.harness.timeline import Timeline
from chaos.cluster.naming import new_run_id
from chaos.hosts.inventory import Inventory
from chaos.hosts import multi
from chaos.hosts.remote import closing, run_hosts
from chaos.net.base import Clock, Net
from node.errors import EnvironmentProblem, UsageError
from pipeline.verdict import write_expectation

Hosts = tuple[Inventory, str | None] | None  # a multi-host run: the inventory and the placement

VERDICT_FILE = "verdict.json"


@dataclass
class RunResult:
    """What a run produced."""

    run_id: str
    run_dir: Path
    variant: str | None
    seed: int
    verdict: Verdict
    summary: Any  # pipeline.summary.Summary, or None when the analysis was skipped
    schedule: Schedule
    elapsed_s: float

    @property
    def report_html(self) -> Path:
        return self.run_dir / "report" / "report.html"

    @property
    def summary_json(self) -> Path:
        return self.run_dir / "report" / "summary.json"

    def status(self, check: str) -> str:
        """The status a check gave in this run (`unknown` when it has none)."""
        for outcome in self.verdict.outcomes:
            if outcome.check == check:
                return outcome.actual
        if self.summary is not None and check in self.summary.checks:
            return self.summary.checks[check].status
        return "unknown"

    def reason(self, check: str) -> str:
        if self.summary is not None and check in self.summary.checks:
            return self.summary.checks[check].reason
        return next((o.reason for o in self.verdict.outcomes if o.check == check), "")

    def describe(self) -> str:
        """Where to look, and how to run it again: printed by failing tests."""
        return (f"run {self.run_id} (variant {self.variant or 'default'}, seed {self.seed}): {self.run_dir}\n"
                f"  report: {self.report_html}\n  logs: {self.run_dir / 'logs'}\n"
                f"  replay: splitlab replay {self.run_dir}")


def _save_logs(cluster: clusters.Cluster) -> None:
    """Each container's output into run_dir/logs/ (the containers are removed next), from its host's engine on a
    multi-host run."""
    logs = cluster.run_dir / "logs"
    logs.mkdir(exist_ok=True)
    if any(node.host for node in cluster.nodes):
        with closing(run_hosts(cluster.run_dir)) as remotes:
            for node in cluster.nodes:
                (logs / f"{node.name}.log").write_text(multi.container_log(remotes[node.host], node.container))
        return
    client = clusters.docker_client()
    for node in cluster.nodes:
        try:
            text = client.containers.get(node.container).logs().decode(errors="replace")
        except docker.errors.DockerException as exc:
            text = f"(no logs: {exc})\n"
        (logs / f"{node.name}.log").write_text(text)


class StepBackend:
    """The side of `chaos.harness.timeline.Timeline` that acts: steps through `actions` on the run's Net, time from
    the Net's clock (wall or virtual), conditions read from the nodes' state (a node that does not answer is "not
    yet", never an error). The same class serves containers and the simulator."""

    def __init__(self, target: actions.Target, clock: Clock, schedule: Schedule, progress: Progress) -> None:
        self.target = target
        self.net = target.net
        self.clock = clock
        self.schedule = schedule
        self.progress = progress
        self.nodes = self.net.nodes
        self._missing = ""

    def now_s(self) -> float:
        return self.clock.now_s()

    def now_ts(self) -> float:
        return self.clock.now_ts()

    def pass_time(self, until_s: float, label: str) -> None:
        self.clock.pass_time(until_s, label)

    def wait_until(self, ready: Callable[[], bool], until_s: float, label: str) -> bool:
        return self.clock.wait_until(ready, until_s, label)

    def apply(self, index: int, step: Any) -> dict[str, Any]:
        return actions.apply(step, self.target)

    def end_fault(self, index: int, step: Any, fault_id: str | None) -> dict[str, Any]:
        return actions.end_fault(step, fault_id, self.target)

    def view_mark(self) -> dict[str, Any]:
        marks = {}
        for node in self.nodes:
            state = self.net.node_state(node)
            marks[node] = (state.get("view") or {}).get("view_id") if state else None
        return marks

    def views_installed(self, mark: dict[str, Any] | None) -> bool:
        mark = mark or {}
        for node in self.nodes:
            state = self.net.node_state(node)
            view = (state or {}).get("view")
            if view is None:
                self._missing = f"{node} {'does not answer' if state is None else 'has no view'}"
                return False
            if view["view_id"] == mark.get(node):
                self._missing = f"{node} still holds view {view['view_id']} {view['members']}"
                return False
            if not set(self.nodes) <= set(view["members"]):
                self._missing = f"{node}'s view {view['view_id']} holds {', '.join(view['members'])}"
                return False
        return True

    def workloads_done(self) -> bool:
        for node, items in self.target.workloads.items():
            state = self.net.node_state(node)
            if state is None:
                self._missing = f"{node} does not answer"
                return False
            for item in items:
                if state.get("boot") != item["boot"]:
                    raise StepError(f"workload {node}#{item['id']} went with {node}'s restarted process: it will "
                                    "never hand all its messages to the protocol")
                found = next((w for w in state.get("workloads", []) if w["id"] == item["id"]), None)
                if found is not None and found.get("error"):
                    raise StepError(f"workload {node}#{item['id']} ended with an error after {found['sent']}/"
                                    f"{item['count']} messages: {found['error']}")
                if found is None or found["sent"] < item["count"]:
                    sent = "?" if found is None else found["sent"]
                    blocked = " (blocked on a full window)" if found and found.get("blocked") else ""
                    self._missing = f"workload {node}#{item['id']} has sent {sent}/{item['count']}{blocked}"
                    return False
        return True

    def control_ready(self, node: str) -> bool:
        if self.net.node_state(node) is None:
            self._missing = f"{node}'s control API does not answer"
            return False
        return True

    def waiting_for(self) -> str:
        return self._missing

    def show(self, index: int, total: int, planned_s: float, applied_s: float, step: Any) -> None:
        self.progress.step(index, total, planned_s, applied_s, actions.describe(step))

    def opened(self, opening_s: float) -> None:
        self.progress.opened(opening_s)

    def save(self) -> None:
        self.schedule.save(self.net.run_dir)


def _states(net: Net, only: list[str] | None = None) -> dict[str, dict[str, Any] | None]:
    """Each node's state (None when it does not answer: killed or paused); `only` limits the nodes asked."""
    out: dict[str, dict[str, Any] | None] = {}
    for name in (net.nodes if only is None else only):
        try:
            out[name] = net.client(name).state()
        except EnvironmentProblem:
            out[name] = None  # killed or paused at the end: the workloads check says so
    return out


def check_backend(loaded: Loaded, backend: str) -> None:
    """Raise `ScenarioError` naming every step the backend cannot run (the simulator has no processes, ...)."""
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend != "sim":
        return
    if loaded.kind != "splitlab":
        raise UsageError(f"the simulator runs splitlab's own node; variant {loaded.label} is of {loaded.kind}",
                         hint="run it on containers: splitlab run FILE --variant " + loaded.label)
    from chaos.net.sim import REFUSED_HINT, refusal

    problems = []
    raw_steps = loaded.doc.data.get("steps") or []
    for index, step in enumerate(loaded.scenario.steps):
        why = refusal(step.action, step.args, loaded.scenario.node_names)
        if why is not None:
            written = "msg-fault" if step.action == "msg_fault" and "msg-fault" in raw_steps[index] else step.action
            problems.append(Problem(loaded.doc.locate(("steps", index)), ("steps", index, written), why))
    if problems:
        raise ScenarioError(problems, hint=REFUSED_HINT)


@contextmanager
def _docker_net(loaded: Loaded, run_id: str, runs_dir: Path, seed: int, progress: Progress,
                background: ExitStack, hosts: Hosts = None) -> Iterator[Net]:
    """A fresh cluster and its DockerNet; at the end (whatever happens) every fault healed, the nodes stopped
    (their histories complete on disk), the logs saved, and the removal of containers and networks started in
    the background: `background` waits for it (and raises its error) when it closes, after the analysis."""
    from chaos.net import backends
    from chaos.net.docker import DockerNet

    inventory, placement = hosts or (None, None)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe") as pool:
        # this machine's fault backends are probed (0.3 s, once per process) while the nodes start, not by the
        # timeline's first link or message fault, which landed that much late; other hosts need no probe
        probed = pool.submit(backends.capabilities) if inventory is None else None
        cluster = clusters.up(loaded.scenario.cluster.nodes, node_env=loaded.node_env(), runs_dir=runs_dir,
                              run_id=run_id, log=progress.log, inventory=inventory, placement=placement,
                              kind=loaded.kind, auth=loaded.auth)
        if probed is not None:
            probed.result()
    net = None
    try:
        net = DockerNet(cluster, seed=seed, log=progress.log)
        yield net
    finally:
        try:
            if net is not None:
                net.heal_all()
        finally:
            live = clusters.load(run_id) if _exists(run_id) else cluster
            try:
                clusters.stop(live.run_id)
            finally:
                _save_logs(live)
                pool = background.enter_context(ThreadPoolExecutor(max_workers=1, thread_name_prefix="down"))
                background.callback(pool.submit(clusters.down, live.run_id).result)


@contextmanager
def _sim_net(loaded: Loaded, run_id: str, runs_dir: Path, seed: int, progress: Progress,
             background: ExitStack, hosts: Hosts = None) -> Iterator[Net]:
    """A simulated cluster; its history is written at the end, also when a step failed."""
    from chaos.net.sim import SimNet

    if hosts is not None:
        raise UsageError("the simulator runs on no host: --inventory is for runs on containers")
    net = SimNet(loaded.scenario.node_names, loaded.node_env(), run_id, runs_dir / run_id, seed, time.time(),
                 auth=loaded.auth)
    try:
        yield net
    finally:
        net.close()


BACKENDS = {"docker": _docker_net, "sim": _sim_net}


def run(loaded: Loaded, *, backend: str = "docker", seed: int | None = None, out: Path | str | None = None,
        progress: Progress | None = None, spark: Any = None, report: bool = True, analyze: bool = True,
        replay_of: str | None = None, hosts: Hosts = None,
        on_verdict: Callable[[Verdict], None] | None = None) -> RunResult:
    """Run `loaded` on `backend` ("docker": real containers, "sim": the simulator) and judge it; `on_verdict` is
    called with the verdict as soon as the analysis's checks are done, before its tables and report. See the
    module docstring."""
    check_backend(loaded, backend)
    progress = progress or Progress()
    scenario = loaded.scenario
    seed = scenario.seed if seed is None else seed
    started = time.monotonic()
    runs_dir = Path(out).resolve() if out else clusters.runs_root()
    run_id = new_run_id()
    where = "in the simulator" if backend == "sim" else f"{scenario.cluster.nodes} node(s)"
    title = f"{scenario.name or loaded.doc.source} [{loaded.label}]"
    progress.say(f"[bold]{escape(title)}[/bold]: {where}, seed {seed}, run {run_id}")
    schedule = Schedule(scenario=loaded.doc.data, source=str(loaded.path or loaded.doc.source),
                        variant=loaded.variant, seed=seed, backend=backend, run_id=run_id, sets=loaded.sets,
                        replay_of=replay_of)
    with ExitStack() as background:  # the cluster's removal runs beside the analysis; joined on the way out
        states: dict[str, dict[str, Any] | None] = {}
        timeline_states: dict[str, dict[str, Any] | None] = {}
        target: actions.Target | None = None
        with BACKENDS[backend](loaded, run_id, runs_dir, seed, progress, background, hosts) as net:
            run_dir = net.run_dir
            try:
                clock = net.clock(progress.wait)
                schedule.started_ts = clock.now_ts()
                schedule.save(run_dir)
                target = actions.Target(net)
                Timeline(scenario, StepBackend(target, clock, schedule, progress), schedule).run()
                timeline_states = _states(net, only=list(target.workloads))
                progress.say("final heal: every fault removed")
                heal_start = clock.now_ts()
                net.heal_all()
                schedule.final_heal = {"applied_ts": heal_start, "done_ts": clock.now_ts()}
                clock.pass_time(clock.now_s() + scenario.settle_s, "settling after the heal")
                states = _states(net)
                schedule.finished = True
            finally:
                (run_dir / "final_state.json").write_text(json.dumps(states, indent=1, default=str))
                (run_dir / "timeline_end_state.json").write_text(json.dumps(timeline_states, indent=1, default=str))
        schedule.add_effective_times(_controller_events(run_dir))
        schedule.save(run_dir)
        if backend == "sim":
            progress.say(f"simulated {clock.now_s():.1f} s of virtual time in {time.monotonic() - started:.1f} s")
        return finish(loaded, run_dir, run_id, seed, schedule, target.workloads, states, timeline_states, progress,
                      spark, report, analyze, started, on_verdict)


def _exists(run_id: str) -> bool:
    return any(r.run_id == run_id for r in clusters.ps())


def _controller_events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events" / "controller.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def finish(loaded: Loaded, run_dir: Path, run_id: str, seed: int, schedule: Schedule,
           workloads: dict[str, list[dict[str, Any]]], states: dict[str, dict[str, Any] | None],
           timeline_states: dict[str, dict[str, Any] | None], progress: Progress, spark: Any, report: bool,
           analyze: bool, started: float, on_verdict: Callable[[Verdict], None] | None = None) -> RunResult:
    """Analyse a finished run, judge it, write verdict.json (shared by the container and simulator runs);
    `on_verdict(verdict)` as soon as the checks are done (without an analysis: at the end)."""
    expectations = loaded.expectations()
    harness = {}
    if workloads or WORKLOADS in expectations:
        harness[WORKLOADS] = workloads_check(workloads, states)
    if workloads or UNBLOCKED in expectations:
        harness[UNBLOCKED] = unblocked_check(workloads, timeline_states)
    summary = None
    if analyze:
        from pipeline.api import analyze as analyse_run

        write_expectation(run_dir, loaded.scenario.name, loaded.variant, expected_statuses(expectations),
                          {name: (status, reason) for name, (status, reason, _) in harness.items()})

        summary = analyse_run(run_dir, params=check_params(expectations), spark=spark, report=report,
                              steps=progress.analysis_step,
                              on_verdict=None if on_verdict is None else
                              lambda early: on_verdict(judge(expectations, early, harness)))
    verdict = judge(expectations, summary, harness) if analyze else Verdict(True, [], "analysis skipped")
    if not analyze and on_verdict is not None:
        on_verdict(verdict)
    result = RunResult(run_id, run_dir, loaded.variant, seed, verdict, summary, schedule,
                       time.monotonic() - started)
    write_verdict(result, loaded, harness)
    return result


def write_verdict(result: RunResult, loaded: Loaded, harness: dict[str, Any]) -> Path:
    data = {"format": "splitlab-verdict/1", "scenario": loaded.scenario.name, "source": result.schedule.source,
            "variant": result.variant, "seed": result.seed, "run_id": result.run_id, "run_dir": str(result.run_dir),
            "backend": result.schedule.backend, "elapsed_s": round(result.elapsed_s, 3),
            **result.verdict.to_dict(),
            "harness_checks": {name: {"status": s, "reason": r, "details": d} for name, (s, r, d) in harness.items()},
            "summary": str(result.summary_json), "report": str(result.report_html)}
    path = result.run_dir / VERDICT_FILE
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    return path


__all__ = ["RunResult", "finish", "run"]
