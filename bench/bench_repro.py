"""Reproduction of the seed bugs: how often the legacy variant shows the bug and the fixed one stays clean over
repeated runs on real containers (20 per scenario; 3 with BENCH_QUICK=1), and how long one reproduction takes
(cluster start, timeline, heal, settling, analysis), and the time to the first failure (the legacy runs' time
until the first that showed the bug). Baseline, measured in the same run: the same scenario in
the seeded simulator over as many seeds (rate and time per run). The same median run time is also printed
against the scenario's timeline (`timeline_s` + `settle_s`): what a run costs beyond the time it is told to take
(goal: at most 1.3x).

Each container repetition runs the legacy and the fixed variant side by side (two clusters at once) with the
scenario's own seed; the simulator repetitions use seeds 1..N. Nothing here is asserted: the rows are printed.
`BENCH_REPRO_SCENARIOS=jgrp1873,tipc_bcast_race` picks the scenarios (default: every scenario under
scenarios/ with a legacy and a fixed variant; quick mode: jgrp1873 only).
"""
from __future__ import annotations

import os
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chaos.harness import runner
from chaos.harness.load import load_scenario
from chaos.harness.repeat import wilson
from chaos.harness.progress import Progress
from node.errors import UsageError

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "scenarios"
RUNS = REPO / "runs" / "bench"
QUIET = Progress(quiet=True)


def _scenarios(quick: bool) -> list[str]:
    chosen = os.environ.get("BENCH_REPRO_SCENARIOS")
    if chosen:
        return [n.strip() for n in chosen.split(",") if n.strip()]
    if quick:
        return ["jgrp1873"]
    names = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        variants = load_scenario(path).scenario.variants
        if "legacy" in variants and "fixed" in variants:
            names.append(path.stem)
    return names


def _pair_on_containers(name: str, spark) -> tuple[bool, bool, float, float]:
    """One legacy and one fixed run side by side: (bug shown, fixed clean, legacy seconds, fixed seconds)."""
    path = SCENARIOS / f"{name}.yaml"

    def one(variant: str):
        return runner.run(load_scenario(path, variant=variant), out=RUNS, progress=QUIET, spark=spark, report=False)

    with ThreadPoolExecutor(max_workers=2) as pool:
        legacy, fixed = pool.map(one, ["legacy", "fixed"])
    return legacy.verdict.held, fixed.verdict.held, legacy.elapsed_s, fixed.elapsed_s


def _in_simulator(name: str, seed: int, spark) -> tuple[bool, bool, float] | None:
    """The same pair in the simulator, or None when the scenario has steps the simulator cannot run."""
    path = SCENARIOS / f"{name}.yaml"
    try:
        legacy = runner.run(load_scenario(path, variant="legacy"), backend="sim", seed=seed, out=RUNS, progress=QUIET, spark=spark,
                            report=False)
    except UsageError:
        return None
    fixed = runner.run(load_scenario(path, variant="fixed"), backend="sim", seed=seed, out=RUNS, progress=QUIET, spark=spark,
                       report=False)
    return legacy.verdict.held, fixed.verdict.held, legacy.elapsed_s


def run(quick: bool) -> list[dict]:
    from pipeline.session import spark_session

    repeats = 3 if quick else 20
    spark = spark_session(None)
    rows = []
    for name in _scenarios(quick):
        pairs = [_pair_on_containers(name, spark) for _ in range(repeats)]
        sims = [_in_simulator(name, seed, spark) for seed in range(1, repeats + 1)]
        sims = [s for s in sims if s is not None]
        shown = sum(p[0] for p in pairs) / repeats * 100
        clean = sum(p[1] for p in pairs) / repeats * 100
        sim_shown = sum(s[0] for s in sims) / len(sims) * 100 if sims else None
        sim_clean = sum(s[1] for s in sims) / len(sims) * 100 if sims else None
        seconds = statistics.median(p[2] for p in pairs)
        first = next((i for i, p in enumerate(pairs) if p[0]), None)  # the first legacy run that showed the bug
        to_first_s = sum(p[2] for p in pairs[:first + 1]) if first is not None else None
        scenario = load_scenario(SCENARIOS / f"{name}.yaml").scenario
        timeline_s = scenario.timeline_s + scenario.settle_s
        sim_seconds = statistics.median(s[2] for s in sims) if sims else None
        note = f"{repeats} runs; baseline = simulator, seeds 1..{repeats}" if sims else \
            f"{repeats} runs; no simulator baseline (steps only containers can run)"
        intervals = {kind: "95 %% Wilson interval %.0f..%.0f %%" % tuple(100 * x for x in wilson(count, repeats))
                     for kind, count in (("shown", sum(p[0] for p in pairs)), ("clean", sum(p[1] for p in pairs)))}
        rows += [
            {"name": f"{name}: legacy shows the bug", "value": shown, "unit": "%", "baseline": sim_shown,
             "ratio": None, "better": "higher", "note": f"{note}; {intervals['shown']}"},
            {"name": f"{name}: fixed passes", "value": clean, "unit": "%", "baseline": sim_clean, "ratio": None,
             "better": "higher", "note": f"{note}; {intervals['clean']}"},
            {"name": f"{name}: time per reproduction", "value": seconds, "unit": "s", "baseline": sim_seconds,
             "ratio": (seconds / sim_seconds) if sim_seconds else None, "better": "lower",
             "note": "median; cluster, timeline, heal, settle and analysis; ratio = times slower than simulated"},
            {"name": f"{name}: time to first failure (legacy)", "value": to_first_s, "unit": "s",
             "baseline": seconds, "ratio": (to_first_s / seconds) if to_first_s is not None else None,
             "better": "lower", "note": f"the legacy runs' time until the first that showed the bug (none: never "
                                        f"in {repeats}); baseline = one run; goal <= 15 s per run, 19/20 shown"},
            {"name": f"{name}: run wall time / timeline", "value": seconds, "unit": "s", "baseline": timeline_s,
             "ratio": seconds / timeline_s, "better": "lower",
             "note": "goal <= 1.3x; median legacy run (its fixed twin runs beside it); baseline = timeline_s + "
                     "settle_s"},
        ]
    return rows
