"""Run a scenario on real containers: a fresh cluster, the timeline, a final heal, a settling time, the nodes'
final state and logs, `down`, the analysis, and the verdict against the scenario's expectations.

Everything lands in the run directory `runs/<run-id>/` (or `--out DIR/<run-id>/`):
    schedule.json      the realised schedule (chaos.harness.schedule), rewritten after every step
    verdict.json       expectations and outcomes, with the paths of the report
    report/summary.json, report/report.html   the analysis (pipeline)
    logs/<node>.log    each container's output;  final_state.json   each node's /state after the settle
    events/, ledger.jsonl, docker-compose.yml  as every run has

The cluster is removed and every fault healed whatever happens (failure, Ctrl-C). Raises `UsageError` for bad
input and `EnvironmentProblem` when the machine cannot run it; a verdict that does not hold is not an error.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
from rich.markup import escape

from chaos import cluster as clusters
from chaos.harness import actions
from chaos.harness.expect import UNBLOCKED, WORKLOADS, Verdict, check_params, judge, unblocked_check, workloads_check
from chaos.harness.load import Loaded
from chaos.harness.progress import Progress
from chaos.harness.schedule import RealisedStep, Schedule
from chaos.naming import new_run_id
from chaos.net import ControllerHistory, Net
from node.errors import EnvironmentProblem

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
    """Each container's output into run_dir/logs/ (the containers are removed next)."""
    client = clusters.docker_client()
    logs = cluster.run_dir / "logs"
    logs.mkdir(exist_ok=True)
    for node in cluster.nodes:
        try:
            text = client.containers.get(node.container).logs().decode(errors="replace")
        except docker.errors.DockerException as exc:
            text = f"(no logs: {exc})\n"
        (logs / f"{node.name}.log").write_text(text)


def _final_states(cluster: clusters.Cluster, only: list[str] | None = None) -> dict[str, dict[str, Any] | None]:
    """Each node's /state (None when it does not answer: killed or paused); `only` limits the nodes asked."""
    out: dict[str, dict[str, Any] | None] = {}
    for name in (cluster.names if only is None else only):
        try:
            out[name] = cluster.client(name).state()
        except EnvironmentProblem:
            out[name] = None  # killed or paused at the end: the workloads check says so
    return out


class Timeline:
    """Applies the steps at their times and records what happened into the schedule."""

    def __init__(self, loaded: Loaded, target: actions.Target, schedule: Schedule, progress: Progress) -> None:
        self.loaded = loaded
        self.target = target
        self.schedule = schedule
        self.progress = progress
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def run(self) -> None:
        steps = self.loaded.scenario.steps
        self.schedule.started_ts = time.time()
        for index, step in enumerate(steps):
            self.progress.wait(step.at_s - self.elapsed(), f"next: step {index + 1} at t={step.at_s:g} s")
            realised = RealisedStep(index=index, action=step.action,
                                    args=step.model_dump(mode="json", by_alias=True)[_key(step)], at_s=step.at_s,
                                    applied_at_s=self.elapsed(), applied_ts=time.time())
            self.progress.step(index, len(steps), step.at_s, realised.applied_at_s, actions.describe(step))
            result = actions.apply(step, self.target)
            realised.done_at_s = self.elapsed()
            realised.fault_id = result.get("fault_id")
            realised.detail = result.get("detail", {})
            self.schedule.steps.append(realised)
            self.schedule.save(self.target.cluster.run_dir)
        self.progress.wait(self.loaded.scenario.timeline_s - self.elapsed(), "end of the timeline")


def _key(step: Any) -> str:
    return "msg-fault" if step.action == "msg_fault" else step.action


def run(loaded: Loaded, *, seed: int | None = None, out: Path | str | None = None,
        progress: Progress | None = None, spark: Any = None, report: bool = True, analyze: bool = True,
        replay_of: str | None = None) -> RunResult:
    """Run `loaded` on real containers and judge it. See the module docstring."""
    progress = progress or Progress()
    scenario = loaded.scenario
    seed = scenario.seed if seed is None else seed
    started = time.monotonic()
    runs_dir = Path(out).resolve() if out else clusters.runs_root()
    run_id = new_run_id()
    title = f"{scenario.name or loaded.doc.source} [{loaded.label}]"
    progress.say(f"[bold]{escape(title)}[/bold]: seed {seed}, {scenario.cluster.nodes} node(s), run {run_id}")
    cluster = clusters.up(scenario.cluster.nodes, node_env=loaded.node_env(), runs_dir=runs_dir, run_id=run_id,
                          log=progress.log)
    schedule = Schedule(scenario=loaded.doc.data, source=str(loaded.path or loaded.doc.source),
                        variant=loaded.variant, seed=seed, backend="docker", run_id=run_id, sets=loaded.sets,
                        replay_of=replay_of)
    schedule.save(cluster.run_dir)
    states: dict[str, dict[str, Any] | None] = {}
    timeline_states: dict[str, dict[str, Any] | None] = {}
    workloads: dict[str, list[dict[str, Any]]] = {}
    healed = False
    net: Net | None = None
    try:
        net = Net(cluster, seed=seed, log=progress.log)
        target = actions.Target(cluster, net, ControllerHistory(cluster.run_dir, run_id))
        Timeline(loaded, target, schedule, progress).run()
        timeline_states = _final_states(target.cluster, only=list(target.workloads))
        progress.say("final heal: every fault removed")
        heal_start = time.time()
        net.heal_all()
        healed = True
        schedule.final_heal = {"applied_ts": heal_start, "done_ts": time.time()}
        progress.wait(scenario.settle_s, "settling after the heal")
        states = _final_states(target.cluster)
        workloads = target.workloads
        schedule.finished = True
    finally:
        try:
            if net is not None and not healed:
                net.heal_all()
        finally:
            live = clusters.load(run_id) if _exists(run_id) else cluster
            _save_logs(live)
            (cluster.run_dir / "final_state.json").write_text(json.dumps(states, indent=1, default=str))
            (cluster.run_dir / "timeline_end_state.json").write_text(json.dumps(timeline_states, indent=1,
                                                                                default=str))
            clusters.down(live.run_id)
            schedule.add_effective_times(_controller_events(cluster.run_dir))
            schedule.save(cluster.run_dir)
    return finish(loaded, cluster.run_dir, run_id, seed, schedule, workloads, states, timeline_states, progress,
                  spark, report, analyze, started)


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
           analyze: bool, started: float) -> RunResult:
    """Analyse a finished run, judge it, write verdict.json (shared by the container and simulator runs)."""
    expectations = loaded.expectations()
    harness = {}
    if workloads or WORKLOADS in expectations:
        harness[WORKLOADS] = workloads_check(workloads, states)
    if workloads or UNBLOCKED in expectations:
        harness[UNBLOCKED] = unblocked_check(workloads, timeline_states)
    summary = None
    if analyze:
        from pipeline.api import analyze as analyse_run

        summary = analyse_run(run_dir, params=check_params(expectations), spark=spark, report=report,
                              steps=progress.analysis_step)
    verdict = judge(expectations, summary, harness) if analyze else Verdict(True, [], "analysis skipped")
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
