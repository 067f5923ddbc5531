"""The torture schedule generator: one seed gives one schedule, every fault episode ends before the timeline
does, the document is a valid scenario, and a short torture run in the simulator keeps the invariants."""
from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cli.main import main as splitlab
from chaos.harness import torture
from chaos.harness.torture import EPISODES, SIM_EPISODES, generate, load_generated
from node.config import MAX_NODES
from node.errors import UsageError

ENDS = {"partition": "heal", "flaky": "fast", "slow": "fast", "pause": "resume"}


@pytest.mark.parametrize("seed", [1, 2, 3, 99])
def test_one_seed_one_schedule_and_a_valid_scenario(seed: int) -> None:
    doc = generate(seed, 60.0, 3)
    assert doc == generate(seed, 60.0, 3)
    assert doc != generate(seed + 1, 60.0, 3)
    loaded = load_generated(doc, seed)
    assert loaded.scenario.cluster.nodes == 3 and loaded.scenario.seed == seed
    assert loaded.expectations()["delivery"] == {"status": "ok"}


@pytest.mark.parametrize("seed", range(20))
def test_every_episode_ends_before_the_timeline_and_one_runs_at_a_time(seed: int) -> None:
    doc = generate(seed, 45.0, 4)
    faults = [s for s in doc["steps"] if "workload" not in s]
    assert faults, f"seed {seed} drew no fault"
    open_kind = None
    for step in faults:
        (action,) = [k for k in step if k != "at_s"]
        assert step["at_s"] <= doc["duration_s"], (seed, step)
        if open_kind is None:
            assert action in ENDS, (seed, step)
            open_kind = action
        else:
            assert action == ENDS[open_kind], (seed, step)
            open_kind = None
    assert open_kind is None, f"seed {seed}: the last episode never ends"


def test_the_mix_draws_every_kind_of_fault_over_many_seeds() -> None:
    seen = set()
    for seed in range(30):
        for step in generate(seed, 60.0, 3)["steps"]:
            seen |= set(step) - {"at_s"}
            if "partition" in step:
                seen.add("one-way" if "<-" in step["partition"] else "split")
            if "slow" in step and "duplicate_pct" in step["slow"]:
                seen.add("duplication")
    assert {"partition", "one-way", "split", "flaky", "slow", "duplication", "pause"} <= seen, seen


def test_simulator_episodes_leave_out_pauses() -> None:
    assert "pause" in EPISODES and "pause" not in SIM_EPISODES
    for seed in range(10):
        assert not any("pause" in s for s in generate(seed, 60.0, 3, SIM_EPISODES)["steps"])


def test_bad_sizes_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="--duration-s must be at least"):
        generate(1, 5.0)
    with pytest.raises(UsageError, match=f"--nodes must be within 2..{MAX_NODES}, got 1"):
        generate(1, 30.0, 1)
    with pytest.raises(UsageError, match=f"--nodes must be within 2..{MAX_NODES}, got {MAX_NODES + 1}"):
        generate(1, 30.0, MAX_NODES + 1)
    assert splitlab(["torture", "--seed", "1", "--duration-s", "3"]) == 2


def test_print_shows_the_generated_scenario(capsys) -> None:
    assert splitlab(["torture", "--seed", "4", "--duration-s", "20", "--print"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("name: torture-4\n") and "workload:" in out


def test_a_short_torture_in_the_simulator_keeps_the_invariants(tmp_path: Path) -> None:
    from chaos.harness.progress import Progress

    seed = 11
    result = torture.run(seed, 20.0, 3, simulate=True, out=tmp_path, progress=Progress(quiet=True), report=False)
    bad = [f"{o.check}: {o.reason}" for o in result.verdict.outcomes if not o.held]
    assert result.verdict.held, (f"torture seed {seed} broke invariants: {bad}; reproduce with "
                                 f"'splitlab torture --seed {seed} --duration-s 20 --sim' or "
                                 f"'splitlab replay {result.run_dir}'")
    assert (result.run_dir / "scenario.yaml").exists() and (result.run_dir / "schedule.json").exists()
