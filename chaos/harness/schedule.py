"""The realised schedule of a run: the scenario as run (after --set, with its variant and seed) and, per step,
when it was planned, when it was applied and when it took effect. Saved as `<run_dir>/schedule.json`.

`replay_document` turns a saved schedule back into a scenario whose steps happen at their realised times, so
`splitlab replay RUN_DIR` runs what really happened rather than what was planned: relative steps (`after`)
become `at_s` steps at the time they fired, a fault's `duration_s` becomes an `end` step at the time the fault
really ended, and a delayed restart keeps the delay it really had. `replay --sign` makes every inject step sign
its datagram with the new run's key (the loader refuses it for a run of the open wire).
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
    """One step as it happened; times `*_at_s` are seconds since the run's first step (`started_ts`), `*_ts` unix
    seconds. `at_s` is when it was planned: after the opening, its scenario time plus `Schedule.opening_s`."""

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
    after: str | None = None                  # the condition of a relative step
    condition_met_at_s: float | None = None   # when it held (the step fired delay_s later)
    end_applied_at_s: float | None = None     # when what the step left for later began: its fault's end
    ended_at_s: float | None = None           # (duration_s) or the restarted node's start (restart delay_s),
    ended_ts: float | None = None             # and when it was done
    end_detail: dict[str, Any] = field(default_factory=dict)
    opening: bool = False                     # one of the steps at t=0 that lead the list (chaos.harness.timeline)

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
    opening_s: float = 0.0  # how long the opening took: the timeline's t=0 is this far after `started_ts`

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
                    replay_of=data.get("replay_of"), opening_s=float(data.get("opening_s") or 0.0))


RELATIVE_KEYS = ("after", "delay_s", "timeout_s")


def replay_document(schedule: Schedule, sign: bool = False) -> dict[str, Any]:
    """The scenario with each applied step at its realised time (steps never applied are left out, with the
    `end` steps of their faults); relative steps become absolute, a fault's realised `duration_s` an `end` step.
    `sign`: every inject step signs its datagram (`inject.sign`). Times count from the end of the opening, as the
    run's did (`chaos.harness.timeline`): the opening's steps stay at 0, every other time loses `opening_s`."""
    doc = copy.deepcopy(schedule.scenario)
    steps = doc.get("steps") or []
    realised = {s.index: s for s in schedule.steps if s.applied_at_s is not None}
    ids = {raw.get("id") for raw in steps if isinstance(raw, dict)}
    dropped_ids = set()
    entries: list[tuple[float, int, int, dict[str, Any]]] = []
    for index, raw in enumerate(steps):
        step = realised.get(index)
        if step is None:
            if isinstance(raw, dict) and raw.get("id") is not None:
                dropped_ids.add(raw["id"])
            continue
        if raw.get("end") in dropped_ids:
            continue
        kept = {k: v for k, v in raw.items() if k not in RELATIVE_KEYS and k != "duration_s"}
        kept["at_s"] = 0.0 if step.opening else round(max(0.0, step.applied_at_s - schedule.opening_s), 3)
        if sign and isinstance(kept.get("inject"), dict):
            kept["inject"] = {**kept["inject"], "sign": True}
        ended_s = step.end_applied_at_s if step.end_applied_at_s is not None else step.ended_at_s
        end_at_s = None if ended_s is None else max(0.0, ended_s - schedule.opening_s)
        if raw.get("duration_s") is not None and end_at_s is not None and not step.end_detail.get("already_ended"):
            fault_id = raw.get("id")
            if fault_id is None:
                fault_id = next(f"step{index}{suffix}" for suffix in ("", *map(str, range(1, 1000)))
                                if f"step{index}{suffix}" not in ids)
                ids.add(fault_id)
                kept["id"] = fault_id
            entries.append((round(end_at_s, 3), index, 1,
                            {"at_s": round(end_at_s, 3), "end": fault_id,
                             "note": f"duration_s of steps[{index}] ran out"}))
        restart = raw.get("restart")
        delayed_from_s = schedule.opening_s if step.opening else step.done_at_s  # (the opening's: from its end)
        if isinstance(restart, dict) and ended_s is not None and delayed_from_s is not None:
            kept["restart"] = {**restart, "delay_s": round(max(0.0, ended_s - delayed_from_s), 3)}
        entries.append((kept["at_s"], index, 0, kept))
    entries.sort(key=lambda e: e[:3])
    last = 0.0
    kept_steps = []
    ended: set[str] = set()
    for at_s, _, _, raw in entries:
        if raw.get("end") is not None:
            if raw["end"] in ended:
                continue  # the other end of the same fault came first: this one was a no-op
            ended.add(raw["end"])
        last = max(last, at_s)
        kept_steps.append({**raw, "at_s": last})
    doc["steps"] = kept_steps
    if doc.get("duration_s") is not None:
        doc["duration_s"] = max(float(doc["duration_s"]), last)
    return doc
