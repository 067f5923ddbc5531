"""The analysis summary: what the harness asserts on, written as `report/summary.json` (see SCHEMA.md).

`Summary.status` is `fail` if any check failed, else `unknown` if any check could not decide, else `ok`.
Floats are rounded to microsecond precision and non-finite numbers written as null, so two analyses of the same
history on different Spark masters write the same checks and counts.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node.errors import HistoryError
from pipeline.outcome import FAIL, OK, UNKNOWN, CheckResult

SUMMARY_FORMAT = "splitlab-summary/1"


def overall_status(results: dict[str, CheckResult]) -> str:
    statuses = {r.status for r in results.values()}
    if FAIL in statuses:
        return FAIL
    if UNKNOWN in statuses:
        return UNKNOWN
    return OK


def clean(value: Any) -> Any:
    """JSON-ready copy: floats rounded to 6 decimals, NaN/inf as None, tuples and sets as lists, keys as text."""
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(clean(v) for v in value)
    return value


@dataclass
class Summary:
    """The result of `pipeline.analyze`: per-check results, counts, history statistics and output paths."""

    run_id: str
    run_dir: str
    checks: dict[str, CheckResult]
    counts: dict[str, Any]
    history: dict[str, Any]
    analysis: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    verdict: dict[str, Any] | None = None  # against the scenario's expectations (pipeline.verdict), if a scenario

    @property
    def status(self) -> str:
        return overall_status(self.checks)

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def exit_code(self) -> int:
        """0 when every check passed, 1 otherwise (a failed or an undecided check)."""
        return 0 if self.ok else 1

    def statuses(self) -> dict[str, str]:
        return {name: r.status for name, r in self.checks.items()}

    def failed(self) -> list[str]:
        return [name for name, r in self.checks.items() if r.status == FAIL]

    def to_dict(self) -> dict[str, Any]:
        return clean({
            "format": SUMMARY_FORMAT,
            "run_id": self.run_id,
            "run_dir": self.run_dir,
            "status": self.status,
            "checks": {name: r.to_dict() for name, r in self.checks.items()},
            "counts": self.counts,
            "history": self.history,
            "analysis": self.analysis,
            "outputs": self.outputs,
            **({"verdict": self.verdict} if self.verdict is not None else {}),
        })

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Summary":
        """The summary `to_dict()` gave (as read back from summary.json or the analysis service)."""
        if data.get("format") != SUMMARY_FORMAT:
            raise HistoryError(f"not a {SUMMARY_FORMAT} summary (format {data.get('format')!r})")
        checks = {name: CheckResult(name=name, status=c["status"], reason=c["reason"], details=c["details"],
                                    params=c["params"]) for name, c in data["checks"].items()}
        return cls(run_id=data["run_id"], run_dir=data["run_dir"], checks=checks, counts=data["counts"],
                   history=data["history"], analysis=data["analysis"], outputs=data["outputs"],
                   verdict=data.get("verdict"))

    def write(self, path: Path) -> None:
        """Write the summary as JSON; raises `HistoryError` if the file cannot be written."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n", encoding="utf-8")
            tmp.replace(path)
        except OSError as exc:
            raise HistoryError(f"cannot write the summary {path}: {exc}",
                               hint="the run directory must be writable") from None
