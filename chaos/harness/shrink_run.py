"""`splitlab shrink RUN_DIR`: the trials of the search in `chaos.harness.shrink`, run on a backend, and the
smallest failing schedule written as a scenario file.

- The schedule is the run's realised one (`schedule.replay_document`: every step at the time it was applied),
  with its variant (the only one left in the file) and seed.
- The target: the checks given (`checks`), else the checks that failed against the run's expectations, else
  those that failed as expected (a reproduction), else every check that failed (`targets`). A trial "fails the
  same check" when every target's status is `fail` (`unknown` is not). The trials' expectations are exactly
  that, with the run's check parameters, and so are the written file's.
- The backend: the simulator when it can express the schedule (`runner.check_backend`) and reproduces the
  failure with the full schedule, else containers (a fresh cluster per trial) when the run was on containers.
  With `confirm`, the smallest schedule found in the simulator is run once more on containers and the answer
  printed.
- The analysis: trials need it unless every target is a harness check (`workloads`, `unblocked`); they share
  one Spark session (or the warm analysis service when it is up) and write no HTML report.
- Each trial is a run directory under `<RUN_DIR>/shrink/`; only the last failing one is kept.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from chaos.harness import runner, schedule as schedules
from chaos.harness.errors import ScenarioError, StepError
from chaos.harness.expect import HARNESS
from chaos.harness.load import DEFAULT, from_data, load_scenario
from chaos.harness.progress import Progress
from chaos.harness.shrink import Shrunk, shrink
from node.errors import UsageError

Log = Callable[[str], None]
FAIL = "fail"
TRIALS_DIR = "shrink"
OUT_FILE = "shrunk.yaml"


def statuses(run_dir: Path) -> dict[str, str]:
    """Every check's status in a finished run: the harness's (verdict.json) and the analysis's (summary.json,
    when the analysis ran)."""
    out: dict[str, str] = {}
    verdict = _json(run_dir / runner.VERDICT_FILE)
    for name, item in (verdict.get("harness_checks") or {}).items():
        out[name] = item["status"]
    summary_path = run_dir / "report" / "summary.json"
    if summary_path.exists():
        for name, item in (_json(summary_path).get("checks") or {}).items():
            out[name] = item["status"]
    return out


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path.parent} has no {path.name}: the run did not finish",
                         hint="give the directory of a finished run of 'splitlab run', 'sim' or 'torture'") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def targets(run_dir: Path, checks: list[str]) -> list[str]:
    """The checks to keep failing (see the module docstring). Raises `UsageError` when a check given did not fail
    in the run, or none did."""
    found = statuses(run_dir)
    outcomes = _json(run_dir / runner.VERDICT_FILE).get("outcomes") or []
    if checks:
        wrong = [c for c in checks if found.get(c, next((o["actual"] for o in outcomes if o["check"] == c), None))
                 != FAIL]
        if wrong:
            raise UsageError(f"check(s) {', '.join(wrong)} did not fail in {run_dir}",
                             hint=f"failing: {', '.join(n for n, s in found.items() if s == FAIL) or 'none'}")
        return list(checks)
    tiers = [[o["check"] for o in outcomes if o["actual"] == FAIL and not o["held"]],
             [o["check"] for o in outcomes if o["actual"] == FAIL],
             [name for name, status in found.items() if status == FAIL]]
    for tier in tiers:
        if tier:
            return tier
    raise UsageError(f"no check failed in {run_dir}: nothing to shrink",
                     hint="give the directory of a run whose verdict names a failing check")


def failing_document(saved: schedules.Schedule, checks: list[str], source: str) -> dict[str, Any]:
    """The realised schedule as a scenario that states `checks` fail under the run's variant (their parameters as
    the run had them), with the run's seed and its variant alone."""
    original = from_data(saved.scenario, source, saved.variant).expectations()
    doc = schedules.replay_document(saved)
    doc["seed"] = saved.seed
    if saved.variant is not None:
        doc["variants"] = {saved.variant: (doc.get("variants") or {})[saved.variant]}
    wanted: dict[str, Any] = {}
    for check in checks:
        params = {k: v for k, v in original.get(check, {}).items() if k != "status"}
        wanted[check] = {"status": FAIL, **params} if params else FAIL
    doc["expect"] = {saved.variant or DEFAULT: wanted}
    return doc


class Trials:
    """The trial function of the search on one backend: run the document, tell whether every target failed."""

    def __init__(self, backend: str, saved: schedules.Schedule, checks: list[str], out: Path, source: str,
                 log: Log) -> None:
        self.backend, self.saved, self.checks, self.out, self.source, self.log = \
            backend, saved, checks, out, source, log
        self.analyze = any(c not in HARNESS for c in checks)
        self._spark: Any = None
        self._spark_ready = False
        self.last_failing: Path | None = None  # the run directory of the last trial that failed

    def spark(self) -> Any:
        """One session for every trial (None: the warm analysis service serves them, or no analysis needed): a
        short-lived JVM (C1 only, the serial collector), as a test session's, for many small analyses."""
        if self.analyze and not self._spark_ready:
            from pipeline import service_client
            from pipeline.session import spark_session

            self._spark = None if service_client.status() is not None else spark_session(short_lived=True)
            self._spark_ready = True
        return self._spark

    def __call__(self, doc: dict[str, Any]) -> bool:
        try:
            loaded = from_data(doc, self.source, self.saved.variant)
        except ScenarioError as exc:
            self.log(f"  (not a valid scenario, counted as passing: {exc.problems[0] if exc.problems else exc})")
            return False
        try:
            result = runner.run(loaded, backend=self.backend, seed=self.saved.seed, out=self.out,
                                progress=Progress(quiet=True), spark=self.spark(), report=False,
                                analyze=self.analyze)
        except StepError as exc:
            self.log(f"  (a step could not be carried out, counted as passing: {exc})")
            return False
        found = statuses(result.run_dir)
        failed = all(found.get(check) == FAIL for check in self.checks)
        # only the run of the smallest failing schedule so far is kept (the trials would pile up otherwise)
        drop, self.last_failing = ((self.last_failing, result.run_dir) if failed else
                                   (result.run_dir, self.last_failing))
        if drop is not None:
            shutil.rmtree(drop)
        return failed


@dataclass
class Outcome:
    """What `shrink_run` did: the file written (None: the failure did not reproduce) and how."""

    out: Path | None
    backend: str | None
    checks: list[str]
    shrunk: Shrunk | None
    confirmed: bool | None = None  # on containers, when asked (None: not asked, or the trials ran there)

    @property
    def exit_code(self) -> int:
        return 0 if self.out is not None else 1


def shrink_run(run_dir: Path | str, *, checks: list[str] | None = None, out: Path | str | None = None,
               max_trials: int = 60, backend: str | None = None, confirm: bool = False,
               log: Log = print) -> Outcome:
    """Shrink the failing schedule of `run_dir` (see the module docstring); `backend` "sim" or "docker" forces
    one. Raises `UsageError` for bad input, `EnvironmentProblem` when the containers are needed and cannot run."""
    run_dir = Path(run_dir).resolve()
    if max_trials < 1:
        raise UsageError(f"--max-trials must be at least 1, got {max_trials}")
    saved = schedules.load(run_dir)
    wanted = targets(run_dir, list(checks or []))
    source = f"{run_dir / schedules.FILE} (shrinking)"
    doc = failing_document(saved, wanted, source)
    loaded = from_data(doc, source, saved.variant)
    # a simulator run's failure is the simulator's: containers are tried only for a run that had them
    candidates = [backend] if backend else ["sim"] if saved.backend == "sim" else ["sim", "docker"]
    if "sim" in candidates:
        try:
            runner.check_backend(loaded, "sim")
        except ScenarioError as exc:
            if backend == "sim":
                raise
            log(f"the simulator cannot run this schedule ({exc.problems[0].text}): trials on containers")
            candidates.remove("sim")
    log(f"shrinking {saved.run_id} (variant {saved.variant or DEFAULT}, seed {saved.seed}): check(s) "
        f"{', '.join(wanted)} must fail; at most {max_trials} trial(s)")
    spent = 0
    for name in candidates:
        trial = Trials(name, saved, wanted, run_dir / TRIALS_DIR, source, log)
        spent += 1
        where = "in the simulator" if name == "sim" else "on containers"
        if trial(doc):
            log(f"trial {spent}/{max_trials}: the full schedule {where}: still fails")
            break
        log(f"trial {spent}/{max_trials}: the full schedule {where}: passes (the failure does not reproduce there)")
        if spent >= max_trials:
            return Outcome(None, None, wanted, None)
    else:
        return Outcome(None, None, wanted, None)
    shrunk = shrink(doc, trial, max_trials=max_trials, spent=spent, log=log)
    path = Path(out) if out else run_dir / OUT_FILE
    write_scenario(path, shrunk, saved, run_dir, wanted, name)
    load_scenario(path, variant=saved.variant)  # what `splitlab run FILE` will do with it
    confirmed = None
    if confirm and name == "sim":
        log("confirming the smallest schedule on containers")
        confirmed = Trials("docker", saved, wanted, run_dir / TRIALS_DIR, str(path), log)(shrunk.doc)
        log(f"on containers it {'still fails' if confirmed else 'passes: the simulator-only result'}")
    return Outcome(path, name, wanted, shrunk, confirmed)


def write_scenario(path: Path, shrunk: Shrunk, saved: schedules.Schedule, run_dir: Path, checks: list[str],
                   backend: str) -> None:
    """The smallest document as a scenario file, with a header saying where it came from."""
    doc = {"name": f"{saved.scenario.get('name') or saved.run_id}-shrunk",
           "description": f"shrunk from run {saved.run_id}: {', '.join(checks)} must fail"}
    order = ("seed", "cluster", "variants", "steps", "duration_s", "settle_s", "expect")
    doc.update({k: shrunk.doc[k] for k in order if k in shrunk.doc})
    doc.update({k: v for k, v in shrunk.doc.items() if k not in doc})
    where = "the simulator" if backend == "sim" else "containers"
    command = f"splitlab sim {path} --seed {saved.seed}" if backend == "sim" else f"splitlab run {path}"
    header = [f"# Shrunk by 'splitlab shrink' from {run_dir} (run {saved.run_id}, source {saved.source}).",
              f"# Variant {saved.variant or DEFAULT}, seed {saved.seed}: check(s) {', '.join(checks)} fail.",
              f"# {shrunk.trials} trial(s) on {where}: {shrunk.units_before} fault unit(s) -> {shrunk.units_after}, "
              f"{shrunk.nodes_before} node(s) -> {shrunk.nodes_after}"
              f"{'' if shrunk.complete else ' (' + '; '.join(shrunk.notes) + ')'}.",
              f"#   {command}"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(header) + "\n" + yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
