"""A minute of torture on real containers (3 nodes, unicast3 / nakack4, seed 1): partitions one-way and
symmetric, loss, delay, duplication, reordering and pauses with the workload running; after the final heal every
invariant holds. On failure the realised schedule is in the run directory for `splitlab replay`."""
from __future__ import annotations

import pytest

from scenario_helpers import TEST_RUNS, print_run, require_cluster_machine

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
SEED = 1
DURATION_S = 60.0


def test_a_minute_of_torture_keeps_every_invariant(spark) -> None:
    from chaos import torture
    from chaos.harness.progress import Progress

    require_cluster_machine()
    result = torture.run(SEED, DURATION_S, 3, out=TEST_RUNS, progress=Progress(quiet=True), spark=spark,
                         report=False)
    if not result.verdict.held:
        print_run(result)
    bad = [f"{o.check}: {o.reason}" for o in result.verdict.outcomes if not o.held]
    assert result.verdict.held, (f"torture seed {SEED} broke invariants: {bad}\nreproduce: splitlab torture --seed "
                                 f"{SEED} --duration {DURATION_S:g} --nodes 3, or splitlab replay {result.run_dir}")
    kinds = {s.action for s in result.schedule.steps}
    assert {"partition", "pause"} <= kinds and kinds & {"flaky", "slow"}, kinds
