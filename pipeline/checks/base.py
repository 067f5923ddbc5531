"""What a check is and how one runs: a named function over the run's tables with parameters and defaults.

A check returns a `Verdict` (ok / fail / unknown, a one-line reason, details for the report; pipeline.outcome).
`run_check` turns any exception inside a check into an `unknown` verdict carrying the reason, so one broken check
never stops the analysis.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from pyspark.sql import SparkSession

from pipeline.outcome import FAIL, OK, STATUSES, UNKNOWN, CheckResult, Verdict
from pipeline.reader import HistoryStats
from pipeline.tables import Tables

_ERROR_CHARS = 500
__all__ = ["FAIL", "OK", "STATUSES", "UNKNOWN", "Check", "CheckContext", "CheckResult", "Verdict", "over",
           "run_check", "unrecorded"]


@dataclass
class CheckContext:
    """What every check may read: the Spark session, the derived tables and the reader's statistics."""

    spark: SparkSession
    tables: Tables
    history: HistoryStats


@dataclass(frozen=True)
class Check:
    """A named check: `func(ctx, params) -> Verdict`, its parameters' `defaults` and a one-line `summary`.

    A parameter whose default is None is an optional number (a threshold that is off by default). `needs`: the
    protocol events (beyond the node contract's minimum) the check reads; on a run whose nodes do not record
    them (`node_start.config.records`, NODE_CONTRACT.md) it answers `unknown` saying so, never a vacuous `ok`.
    """

    name: str
    summary: str
    defaults: Mapping[str, Any]
    func: Callable[[CheckContext, dict[str, Any]], Verdict]
    needs: frozenset[str] = frozenset()


def unrecorded(check: Check, history: HistoryStats) -> str | None:
    """Why `check` cannot judge this run (which node does not record which events it needs), or None."""
    for node, (kind, records) in sorted(history.records.items()):
        missing = sorted(check.needs - records)
        if missing:
            return (f"{node} ({kind}) does not record {', '.join(missing)}, which this check reads "
                    f"(NODE_CONTRACT.md)")
    return None


def run_check(check: Check, ctx: CheckContext, params: dict[str, Any]) -> CheckResult:
    """Run `check`; an exception inside it becomes an `unknown` result whose reason names the error, and so
    does a run whose nodes do not record what the check needs."""
    why = unrecorded(check, ctx.history) if check.needs else None
    if why is not None:
        return CheckResult(name=check.name, status=UNKNOWN, reason=why, details={"unrecorded": True},
                           params=dict(params))
    try:
        verdict = check.func(ctx, dict(params))
    except Exception as exc:  # a crashing check yields `unknown`, never a crash of the analysis
        first_line = (str(exc).strip().splitlines() or [""])[0][:_ERROR_CHARS]
        return CheckResult(name=check.name, status=UNKNOWN,
                           reason=f"the check raised {type(exc).__name__}: {first_line}",
                           details={"error_type": type(exc).__name__}, params=dict(params))
    if verdict.status not in STATUSES:
        return CheckResult(name=check.name, status=UNKNOWN,
                           reason=f"the check returned an invalid status {verdict.status!r}",
                           details=verdict.details, params=dict(params))
    return CheckResult(name=check.name, status=verdict.status, reason=verdict.reason, details=verdict.details,
                       params=dict(params))


def over(value: float | int, limit: float | int | None) -> bool:
    """True when the optional `limit` is set and `value` exceeds it."""
    return limit is not None and value > limit
