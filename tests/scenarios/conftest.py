"""The scenario suite's one fixture over splitlab's pytest plugin: `run_variants(name, variants=None, seed=None,
sets=())` runs this repository's `scenarios/<name>.yaml` under each variant (default: all it defines), side by
side on real containers, and returns {variant: RunResult} (`splitlab_scenario.variants`, which also prints every
run of a failed test)."""
from __future__ import annotations

import pytest

from scenario_helpers import scenario_path


@pytest.fixture
def run_variants(splitlab_scenario):
    def run(name: str, variants: list[str] | None = None, seed: int | None = None, sets: tuple[str, ...] = ()):
        return splitlab_scenario.variants(scenario_path(name), variants, seed=seed, sets=sets)

    return run
