"""A run's verdict: whether every check answered what its scenario expected.

A scenario run (chaos.harness.runner) writes `expectation.json` into its run directory before the analysis: the
scenario, the variant, the status each check must answer, and the harness's own checks (which the pipeline does
not run). The analysis judges its checks against it (`judge`) and puts the verdict into summary.json and the
report's headline, so the report answers the question the run was made for: a run of a variant whose bug was
supposed to show is "as expected" when its delivery check fails. Without the file (a run analysed on its own),
there is no verdict and the report shows the plain status. The harness judges with the same function.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from node.errors import HistoryError

EXPECTATION_FILE = "expectation.json"
EXPECTATION_FORMAT = "splitlab-expectation/1"


@dataclass
class Outcome:
    """One expectation against what the run gave."""

    check: str
    expected: str
    actual: str
    reason: str

    @property
    def held(self) -> bool:
        return self.expected == self.actual


@dataclass
class Verdict:
    """The run's verdict: whether every expectation held, and each outcome."""

    held: bool
    outcomes: list[Outcome] = field(default_factory=list)
    note: str = ""

    @property
    def exit_code(self) -> int:
        return 0 if self.held else 1

    def to_dict(self) -> dict[str, Any]:
        return {"held": self.held, "note": self.note,
                "outcomes": [{**asdict(o), "held": o.held} for o in self.outcomes]}


def judge(expected: Mapping[str, str], actual: Mapping[str, tuple[str, str]], analysed: bool = True) -> Verdict:
    """Compare the expected statuses `{check: status}` with the `actual` `{check: (status, reason)}`; with no
    expectation every check must pass. `analysed`: False when the analysis did not run (its checks are missing)."""
    if not expected:
        wanted = {name: "ok" for name in actual}
        note = "no expectations for this variant: every check must pass"
    else:
        wanted = dict(expected)
        note = ""
    outcomes = []
    for name, status in wanted.items():
        got, reason = actual.get(name, ("unknown", "no result" if analysed else "the analysis did not run"))
        outcomes.append(Outcome(name, status, got, reason))
    return Verdict(all(o.held for o in outcomes), outcomes, note)


def write_expectation(run_dir: Path, scenario: str, variant: str, expected: Mapping[str, str],
                      harness: Mapping[str, tuple[str, str]]) -> Path:
    """Write what the run's checks must answer (and the harness checks' results) for its analysis."""
    path = run_dir / EXPECTATION_FILE
    data = {"format": EXPECTATION_FORMAT, "scenario": scenario, "variant": variant, "expected": dict(expected),
            "harness": {name: {"status": s, "reason": r} for name, (s, r) in harness.items()}}
    try:
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise HistoryError(f"cannot write {path}: {exc}", hint="the run directory must be writable") from None
    return path


def read_expectation(run_dir: Path) -> dict[str, Any] | None:
    """The run's expectation (None: the run was not made by a scenario); raises `HistoryError` for a file that
    is not one."""
    path = run_dir / EXPECTATION_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HistoryError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != EXPECTATION_FORMAT \
            or not isinstance(data.get("expected"), dict) or not isinstance(data.get("harness"), dict):
        raise HistoryError(f"{path} is not a {EXPECTATION_FORMAT} file")
    return data


def run_verdict(expectation: Mapping[str, Any], checks: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    """The verdict of the analysed `checks` `{check: (status, reason)}` and the harness checks against
    `expectation` (`read_expectation`), with the scenario, the variant and what was expected."""
    actual = {name: (h["status"], h["reason"]) for name, h in expectation["harness"].items()}
    actual.update(checks)
    verdict = judge(expectation["expected"], actual)
    return {"scenario": expectation["scenario"], "variant": expectation["variant"],
            "expected": expectation["expected"], **verdict.to_dict()}
