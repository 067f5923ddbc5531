"""Torture on real containers: a minute (BENCH_QUICK=1: 25 s) of generated partitions, loss, delay,
duplication, reordering and pauses per seed (seeds 1..3; quick: seed 1) on 3 nodes with the workload running.
Printed per seed: whether every invariant held after the final heal, and the run's wall time against its
timeline (`duration_s` + `settle_s`): the baseline of the same run. Nothing is asserted; a broken invariant is
printed with its reproduce command."""
from __future__ import annotations

from pathlib import Path

from chaos.harness import torture
from chaos.harness.progress import Progress

RUNS = Path(__file__).resolve().parent.parent / "runs" / "bench"


def run(quick: bool) -> list[dict]:
    from pipeline.session import spark_session

    duration_s = 25.0 if quick else 60.0
    spark = spark_session(None)
    rows = []
    for seed in ((1,) if quick else (1, 2, 3)):
        result = torture.run(seed, duration_s, 3, out=RUNS, progress=Progress(quiet=True), spark=spark, report=False)
        doc = torture.generate(seed, duration_s, 3)  # what torture.run ran: the same seed, the same schedule
        timeline_s = doc["duration_s"] + doc.get("settle_s", 0)
        bad = [o.check for o in result.verdict.outcomes if not o.held]
        rows += [
            {"name": f"seed {seed}: invariants held", "value": 100.0 if result.verdict.held else 0.0, "unit": "%",
             "baseline": None, "ratio": None, "better": "higher",
             "note": "all" if not bad else f"broken: {', '.join(bad)}; splitlab replay {result.run_dir}"},
            {"name": f"seed {seed}: wall time", "value": result.elapsed_s, "unit": "s", "baseline": timeline_s,
             "ratio": result.elapsed_s / timeline_s, "better": "lower",
             "note": "baseline = the timeline (duration_s + settle_s)"},
        ]
    return rows
