"""The scenario suite's one fixture over splitlab's pytest plugin: `run_variants(name, variants=None, seed=None,
sets=())` runs this repository's `scenarios/<name>.yaml` under each variant (default: all it defines), side by
side on real containers, and returns {variant: RunResult} (`splitlab_scenario.variants`, which also prints every
run of a failed test), after checking that no container or network of those runs is left (the removal runs
beside the analysis and must be over when a run returns)."""
from __future__ import annotations

import pytest

from chaos.cluster import lifecycle as clusters
from scenario_helpers import scenario_path


@pytest.fixture
def run_variants(splitlab_scenario):
    def run(name: str, variants: list[str] | None = None, seed: int | None = None, sets: tuple[str, ...] = ()):
        runs = splitlab_scenario.variants(scenario_path(name), variants, seed=seed, sets=sets)
        left = {r.run_id for r in clusters.ps()} & {r.run_id for r in runs.values()}
        assert not left, f"containers or networks of runs {sorted(left)} are left after the runs returned"
        return runs

    return run
