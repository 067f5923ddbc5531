"""A short torture on real containers (3 nodes, unicast3 / nakack4, seed 11, 15 s): partitions one-way and
symmetric, delay and pauses with the workload running; after the final heal every invariant holds. On failure
the realised schedule is in the run directory for `splitlab replay`. The minute and longer runs are in
`make bench` (bench/bench_torture.py)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.splitlab_cluster, pytest.mark.slow]
SEED = 11
DURATION_S = 15.0  # seed 11 schedules partitions, pauses and delay within 15 s (seed 1 needed 25 s)


def test_a_short_torture_keeps_every_invariant(splitlab_scenario, splitlab_runs_dir, splitlab_spark) -> None:
    from chaos.harness import torture
    from chaos.harness.progress import Progress

    result = splitlab_scenario.track(torture.run(SEED, DURATION_S, 3, out=splitlab_runs_dir,
                                                 progress=Progress(quiet=True), spark=splitlab_spark, report=False))
    bad = [f"{o.check}: {o.reason}" for o in result.verdict.outcomes if not o.held]
    assert result.verdict.held, (f"torture seed {SEED} broke invariants: {bad}\nreproduce: splitlab torture --seed "
                                 f"{SEED} --duration-s {DURATION_S:g} --nodes 3, or splitlab replay {result.run_dir}")
    kinds = {s.action for s in result.schedule.steps}
    assert {"partition", "pause"} <= kinds and kinds & {"flaky", "slow"}, kinds
