"""The realised schedule of a run: the scenario as run (after --set, with its variant and seed) and, per step,
when it was planned, when it was applied and when it took effect. Saved as `<run_dir>/schedule.json`.

`replay_document` turns a saved schedule back into a scenario whose steps happen at their realised times, so
`splitlab replay RUN_DIR` runs what really happened rather than what was planned.
"""
from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from node.errors import UsageError

FORMAT = "splitlab-schedule/1"
FILE = "schedule.json"


@dataclass
class RealisedStep:
    """One step as it happened; times `*_at_s` are seconds since the timeline started, `*_ts` unix seconds."""

    index: int
    action: str
    args: Any
    at_s: float
    applied_at_s: float | None = None
    done_at_s: float | None = None
    applied_ts: float | None = None
    effective_ts: float | None = None
    fault_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def late_s(self) -> float | None:
        return None if self.applied_at_s is None else max(0.0, self.applied_at_s - self.at_s)


@dataclass
class Schedule:
    """What `schedule.json` holds."""

    scenario: dict[str, Any]
    source: str
    variant: str | None
    seed: int
    backend: str
    run_id: str
    sets: list[str] = field(default_factory=list)
    started_ts: float | None = None
    steps: list[RealisedStep] = field(default_factory=list)
    final_heal: dict[str, Any] = field(default_factory=dict)
    finished: bool = False
    replay_of: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["format"] = FORMAT
        for step, raw in zip(self.steps, out["steps"]):
            raw["late_s"] = step.late_s
        return out

    def save(self, run_dir: Path) -> Path:
        """Write `run_dir/schedule.json` atomically (it is rewritten as the run goes on)."""
        path = Path(run_dir) / FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, default=str) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    def add_effective_times(self, controller_events: list[dict[str, Any]]) -> None:
        """Fill `effective_ts` of steps from the controller's `fault_start` events (matched by fault id)."""
        by_id = {e.get("fault_id"): e for e in controller_events if e.get("type") == "fault_start"}
        for step in self.steps:
            event = by_id.get(step.fault_id)
            if event is not None and step.effective_ts is None:
                step.effective_ts = event.get("effective_ts")


def load(run_dir: Path | str) -> Schedule:
    """Read a saved schedule. Raises `UsageError` when the directory has none or it is not readable."""
    path = Path(run_dir) / FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{run_dir} has no {FILE}: not a run of 'splitlab run', 'sim' or 'torture'",
                         hint="give a run directory, e.g. runs/<run-id>") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if data.get("format") != FORMAT:
        raise UsageError(f"{path}: unknown format {data.get('format')!r}, expected {FORMAT}")
    steps = [RealisedStep(**{k: v for k, v in s.items() if k != "late_s"}) for s in data.get("steps", [])]
    return Schedule(scenario=data["scenario"], source=data["source"], variant=data.get("variant"),
                    seed=int(data["seed"]), backend=data.get("backend", "docker"), run_id=data["run_id"],
                    sets=list(data.get("sets", [])), started_ts=data.get("started_ts"), steps=steps,
                    final_heal=data.get("final_heal", {}), finished=bool(data.get("finished")),
                    replay_of=data.get("replay_of"))


def replay_document(schedule: Schedule) -> dict[str, Any]:
    """The scenario with each applied step at its realised time (steps never applied are left out)."""
    doc = copy.deepcopy(schedule.scenario)
    steps = doc.get("steps") or []
    realised = {s.index: s for s in schedule.steps if s.applied_at_s is not None}
    kept = []
    last = 0.0
    for index, raw in enumerate(steps):
        step = realised.get(index)
        if step is None:
            continue
        last = max(last, round(step.applied_at_s, 3))
        kept.append({**raw, "at_s": last})
    doc["steps"] = kept
    if doc.get("duration_s") is not None:
        doc["duration_s"] = max(float(doc["duration_s"]), last)
    return doc
