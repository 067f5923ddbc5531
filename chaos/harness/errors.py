"""Scenario errors: a `UsageError` (exit code 2) carrying every problem found, each as `file:line: field: what`;
and `StepError` (exit code 1), a step that could not be carried out while the scenario ran.

`Problem` is one finding at a path of the document; `ScenarioError` formats the list (one line per problem, the
first one also as the summary) so the command line prints them all and tests can match one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from node.errors import SplitlabError, UsageError


def dotted(path: Iterable[Any]) -> str:
    """`("steps", 3, "workload", "count")` -> `steps[3].workload.count`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


@dataclass(frozen=True)
class Problem:
    """One finding: where (`file:line` or `--set key`), the field path, and what is wrong / was expected."""

    location: str
    path: tuple[Any, ...]
    text: str

    def __str__(self) -> str:
        return f"{self.location}: {dotted(self.path)}: {self.text}"


class ScenarioError(UsageError):
    """A scenario file (or a --set override, or a saved schedule) is not valid. Exit code 2."""

    def __init__(self, problems: list[Problem], hint: str | None = None) -> None:
        self.problems = list(problems)
        lines = [str(p) for p in self.problems]
        super().__init__("\n".join(lines) if lines else "invalid scenario",
                         hint or "see scenarios/README.md for the scenario format")


class StepError(SplitlabError):
    """A step could not be carried out on the running cluster: its condition did not come within its timeout,
    the node it needs did not come back, or what it aims at (a live connection) is not there. Exit code 1; the
    run stops, its faults are healed and what happened so far is in the realised schedule."""
