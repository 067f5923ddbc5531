"""The real JGroups 2.12.2 on containers (node kind `jgroups`): how often each scenario of scenarios/jgroups/ shows its
bug, per variant, against the rate the scenario expects, and what one run costs; and how long a JGroups node takes
to start next to a splitlab node, measured in the same run.

Each variant runs N times (20; 2 with BENCH_QUICK=1; `BENCH_JGROUPS_RUNS=N` overrides) on fresh clusters, one at a
time (the JVMs are heavy on 2 cores), with seeds SEED..SEED+N-1 (SEED: the scenario's). A run "shows the bug" when
every check its variant expects to `fail` failed; for a negative control (a variant that expects no check to fail)
when some check it expects `ok` failed. The rate of those runs is printed with its 95 % Wilson interval, and judged
against the scenario's `rate:` as `splitlab run --repeat` reads it: the share of runs whose expectations held (a
bug: it showed; a control: it did not), with the seeds of the runs that went against it. The wall time of a run is
the clock around `runner.run`: cluster start, timeline, heal, settle, analysis and the cluster's removal (goal: <=
30 s a run); the bench's first run also warms up the shared analysis JVM (some 20 s: its scenario's max shows it).

The start time is `chaos.cluster.lifecycle.up(2, kind=...)` until every node hears the other (and, for jgroups, both
hold one view of both), then `down`, 5 times per kind (2 with BENCH_QUICK=1), the kinds taking turns. Nothing here
is asserted: the rows are printed.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from chaos.cluster import lifecycle as clusters
from chaos.harness import runner
from chaos.harness.load import Loaded, load_scenario
from chaos.harness.progress import Progress
from chaos.harness.repeat import Rate, parse_rate, wilson
from node.errors import EnvironmentProblem

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "scenarios" / "jgroups"
RUNS = REPO / "runs" / "bench"
QUIET = Progress(quiet=True)
RUN_GOAL_S = 30.0
START_NODES = 2


def _runs(quick: bool) -> int:
    chosen = os.environ.get("BENCH_JGROUPS_RUNS")
    runs = int(chosen) if chosen else (2 if quick else 20)
    if runs < 1:
        raise ValueError(f"BENCH_JGROUPS_RUNS={chosen}: expected at least 1 run")
    return runs


def _variants() -> list[Loaded]:
    """Every variant of every scenario under scenarios/jgroups/, loaded (a scenario without variants once)."""
    loaded = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        variants = load_scenario(path).scenario.variants
        loaded += [load_scenario(path, variant=v) for v in variants] if variants else [load_scenario(path)]
    return loaded


@dataclass
class Tally:
    """The runs of one variant: which seeds showed the bug, which could not be judged or did not run, the times."""

    expected_fail: list[str]  # the checks the variant expects to fail; empty: a negative control
    shown: list[int] = field(default_factory=list)
    clean: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)  # the runs whose expectations held (what `rate:` counts)
    unknown: list[int] = field(default_factory=list)  # an expected check had no status (the analysis failed)
    errors: dict[int, str] = field(default_factory=dict)  # seed -> why the run could not run
    wall_s: list[float] = field(default_factory=list)

    @property
    def control(self) -> bool:
        return not self.expected_fail

    @property
    def runs(self) -> int:
        return len(self.shown) + len(self.clean)

    def add(self, seed: int, result: runner.RunResult, wall_s: float) -> None:
        self.wall_s.append(wall_s)
        outcomes = result.verdict.outcomes
        if self.control:
            shown = any(o.expected == "ok" and o.actual == "fail" for o in outcomes)
        else:
            shown = all(result.status(check) == "fail" for check in self.expected_fail)
        (self.shown if shown else self.clean).append(seed)
        if result.verdict.held:
            self.held.append(seed)
        if any(o.actual == "unknown" for o in outcomes):
            self.unknown.append(seed)

    def against(self) -> list[int]:
        """The seeds of the runs whose expectations did not hold."""
        return sorted(set(self.shown + self.clean) - set(self.held))


def _repeat(loaded: Loaded, runs: int, spark) -> Tally:
    expected_fail = sorted(c for c, item in loaded.expectations().items() if item["status"] == "fail")
    tally = Tally(expected_fail)
    for seed in range(loaded.scenario.seed, loaded.scenario.seed + runs):
        started = time.monotonic()
        try:
            result = runner.run(loaded, seed=seed, out=RUNS, progress=QUIET, spark=spark, report=False)
        except EnvironmentProblem as exc:  # the cluster did not come up, say: counted apart, not as a clean run
            tally.errors[seed] = (exc.message.splitlines() or [""])[0]
            continue
        tally.add(seed, result, time.monotonic() - started)
    return tally


def _expected(loaded: Loaded) -> Rate:
    """The share of runs whose expectations must hold: the scenario's `rate:`, else every run."""
    text = loaded.expected_rate()
    return parse_rate(text) if text is not None else Rate("==", 1.0)


def _seeds(seeds: list[int]) -> str:
    return ", ".join(map(str, seeds)) if seeds else "none"


def _scenario_rows(loaded: Loaded, runs: int, spark) -> list[dict]:
    tally = _repeat(loaded, runs, spark)
    label = f"{loaded.path.stem} ({loaded.label})"  # not [..]: the table reads it as markup
    first = loaded.scenario.seed
    expected = _expected(loaded)
    what = "a control: some expected-ok check fails" if tally.control else \
        f"{', '.join(tally.expected_fail)} fail"
    errors = "" if not tally.errors else "; did not run: " + "; ".join(
        f"seed {s}: {why}" for s, why in sorted(tally.errors.items()))
    unknown = f"; an expected check without status: seeds {_seeds(tally.unknown)}" if tally.unknown else ""
    rows = []
    if tally.runs:
        low, high = wilson(len(tally.shown), tally.runs)
        goal = "met" if expected.holds(len(tally.held), tally.runs) else "NOT met"
        note = (f"bug = {what}; {len(tally.shown)}/{tally.runs} runs, seeds {first}..{first + runs - 1}; 95 % "
                f"Wilson interval {100 * low:.0f}..{100 * high:.0f} %; {len(tally.held)}/{tally.runs} as expected, "
                f"expected {expected}: {goal}; against the expectation: seeds {_seeds(tally.against())}{unknown}{errors}")
        rows.append({"name": f"{label}: runs showing the bug", "value": 100 * len(tally.shown) / tally.runs,
                     "unit": "%", "baseline": None, "ratio": None,
                     "better": "lower" if tally.control else "higher", "note": note})
    else:
        rows.append({"name": f"{label}: runs showing the bug", "value": None, "unit": "%", "baseline": None,
                     "ratio": None, "better": "lower" if tally.control else "higher",
                     "note": f"no run completed{errors}"})
        return rows
    median_s, max_s = statistics.median(tally.wall_s), max(tally.wall_s)
    planned_s = loaded.scenario.timeline_s + loaded.scenario.settle_s
    rows += [
        {"name": f"{label}: wall time per run (median)", "value": median_s, "unit": "s", "baseline": planned_s,
         "ratio": median_s / planned_s, "better": "lower",
         "note": f"goal <= {RUN_GOAL_S:g} s a run: {'met' if median_s <= RUN_GOAL_S else 'NOT met'}; {tally.runs} "
                 f"run(s); start, timeline, heal, settle, analysis, removal; baseline = timeline_s + settle_s"},
        {"name": f"{label}: wall time per run (max)", "value": max_s, "unit": "s", "baseline": None, "ratio": None,
         "better": "lower",
         "note": f"goal <= {RUN_GOAL_S:g} s a run: {'met' if max_s <= RUN_GOAL_S else 'NOT met'}; slowest of "
                 f"{tally.runs}"},
    ]
    return rows


def _start(kind: str) -> tuple[float, float]:
    """Seconds of `up` of a 2-node cluster of `kind` to all-hear-all (and one view, for jgroups), and of its
    `down`."""
    started = time.monotonic()
    cluster = clusters.up(START_NODES, kind=kind, runs_dir=RUNS)
    up_s = time.monotonic() - started
    started = time.monotonic()
    clusters.down(cluster.run_id)
    return up_s, time.monotonic() - started


def _start_rows(quick: bool) -> list[dict]:
    rounds = 2 if quick else 5
    times: dict[str, list[tuple[float, float]]] = {"jgroups": [], "splitlab": []}
    for _ in range(rounds):  # the kinds take turns, so a busy moment of the machine lands on both
        for kind in times:
            times[kind].append(_start(kind))
    rows = []
    for index, label, what in ((0, f"up of {START_NODES} nodes to all-hear-all, jgroups / splitlab",
                                "up until all hear all (jgroups: and one view of both)"),
                               (1, f"down of {START_NODES} nodes, jgroups / splitlab", "down")):
        ours = statistics.median(t[index] for t in times["jgroups"])
        base = statistics.median(t[index] for t in times["splitlab"])
        rows.append({"name": label, "value": ours, "unit": "s", "baseline": base, "ratio": ours / base,
                     "better": "lower",
                     "note": f"median of {rounds}, {what}; value = jgroups, baseline = splitlab's own node, "
                             f"same run, the kinds taking turns"})
    return rows


def run(quick: bool) -> list[dict]:
    from pipeline.session import spark_session

    runs = _runs(quick)
    spark = spark_session(None)
    rows = []
    for loaded in _variants():
        rows += _scenario_rows(loaded, runs, spark)
    return rows + _start_rows(quick)
