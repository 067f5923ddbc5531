"""What a check answers, as plain data without Spark: the statuses, a check's `Verdict` and the summary's
`CheckResult`. The summary (pipeline.summary) and a client of the analysis service read them without loading
Spark; pipeline.checks.base runs the checks that make them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"
STATUSES = (OK, FAIL, UNKNOWN)


@dataclass
class Verdict:
    """A check's answer: `status` (ok, fail, unknown), a one-line `reason` and JSON-serialisable `details`."""

    status: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckResult:
    """The outcome of one check in the summary: status, reason, details and the parameters it ran with."""

    name: str
    status: str
    reason: str
    details: dict[str, Any]
    params: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "details": self.details, "params": self.params}
