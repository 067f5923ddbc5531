"""The PySpark analysis of splitlab run histories (package `pipeline`).

Public API: `analyze(run_dir, master=None, params=None) -> Summary` (see `pipeline.api`), the `Summary` it
returns (`pipeline.summary`); `splitlab analyze` (chaos/cli/analysis.py) is its command line. The history
format and summary.json are documented in pipeline/SCHEMA.md. Importing this package does not load Spark;
the names below load on first use.
"""
from __future__ import annotations

from typing import Any

__all__ = ["analyze", "Summary", "CHECKS"]


def __getattr__(name: str) -> Any:
    if name == "analyze":
        from pipeline.api import analyze
        return analyze
    if name == "Summary":
        from pipeline.summary import Summary
        return Summary
    if name == "CHECKS":
        from pipeline.checks import CHECKS
        return CHECKS
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
