"""Helpers of the scenario tests: where a scenario of this repository is, and assertion messages."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"


def scenario_path(name: str) -> Path:
    """`scenarios/<name>.yaml` of this repository."""
    return SCENARIOS / f"{name}.yaml"


def held(runs: dict) -> str:
    """An assertion message: which expectations did not hold, and where to look."""
    lines = []
    for variant, result in runs.items():
        bad = [o for o in result.verdict.outcomes if not o.held]
        lines += [f"{variant}: {o.check} expected {o.expected}, got {o.actual} ({o.reason})" for o in bad]
        lines.append(f"{variant}: {result.run_dir} (seed {result.seed}; splitlab replay {result.run_dir})")
    return "\n".join(lines)
