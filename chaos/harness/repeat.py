"""Reproduction statistics: one scenario variant run N times on fresh clusters (`splitlab run FILE --repeat N`),
and per check how often it held, with a 95 % Wilson score interval, the seeds of the failing runs, and the
judgement of the rate the scenario expects (`expect: {legacy: {rate: ">= 0.95"}}`; without one, every run must
hold, as for a single run).

Run i uses seed `base + i` (base: `--seed`, else the scenario's), so `splitlab run FILE --variant V --seed S`
reproduces any one of them. `jobs` runs that many clusters side by side (threads of this process; each run has
its own cluster, namespaces, ledger and directory); `until_fail` schedules no further run once one did not hold
(the runs already under way finish and count). `wilson`, `parse_rate` and `Tally` are plain computations;
`repeat` drives a given run function.
"""
from __future__ import annotations

import math
import operator
import re
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from chaos.harness.expect import Verdict
from chaos.harness.schema import RATE_PATTERN
from node.errors import UsageError

Z_95 = 1.959963984540054  # the standard normal quantile of 97.5 %: a two-sided 95 % interval
MAX_RUNS = 10_000
_OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le, ">": operator.gt,
                                                   "<": operator.lt, "==": operator.eq}


def wilson(held: int, runs: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `held`/`runs` ((0, 1) for no runs): unlike the normal
    approximation it stays inside [0, 1] and is not empty at 0 or `runs` successes."""
    if runs <= 0:
        return 0.0, 1.0
    if not 0 <= held <= runs:
        raise ValueError(f"{held} successes out of {runs} runs")
    p = held / runs
    z2 = z * z
    denominator = 1 + z2 / runs
    centre = (p + z2 / (2 * runs)) / denominator
    half = z * math.sqrt(p * (1 - p) / runs + z2 / (4 * runs * runs)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Rate:
    """An expected rate, e.g. `>= 0.95`: the share of runs whose expectations held, compared with `value`."""

    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"

    def holds(self, held: int, runs: int) -> bool:
        return runs > 0 and _OPS[self.op](held / runs, self.value)


EVERY_RUN = Rate("==", 1.0)


def parse_rate(text: str) -> Rate:
    """A `Rate` from text like '>= 0.95' (an operator among >=, <=, >, <, == and a number in [0, 1]). Raises
    `UsageError`."""
    match = re.match(RATE_PATTERN, str(text))
    if match is None:
        raise UsageError(f"rate {text!r}: expected an operator (>=, <=, >, <, ==) and a number from 0 to 1, "
                         f"e.g. '>= 0.95'")
    return Rate(match.group(1), float(match.group(2)))


@dataclass
class Tally:
    """The runs of one variant: how many held, per check how many held, the seeds of those that did not."""

    variant: str | None
    runs: int = 0
    held: int = 0
    checks: dict[str, list[int]] = field(default_factory=dict)  # check -> [held, runs]
    failing: dict[int, str] = field(default_factory=dict)  # seed -> run directory
    elapsed_s: list[float] = field(default_factory=list)

    def add(self, seed: int, verdict: Verdict, run_dir: str, elapsed_s: float) -> None:
        self.runs += 1
        self.held += verdict.held
        self.elapsed_s.append(elapsed_s)
        for outcome in verdict.outcomes:
            counts = self.checks.setdefault(outcome.check, [0, 0])
            counts[0] += outcome.held
            counts[1] += 1
        if not verdict.held:
            self.failing[seed] = run_dir

    def judged(self, expected: Rate | None) -> bool:
        """Whether the share of runs that held meets `expected` (every run, when None)."""
        return (expected or EVERY_RUN).holds(self.held, self.runs)

    def to_dict(self, expected: Rate | None) -> dict[str, Any]:
        def share(held: int, runs: int) -> dict[str, Any]:
            low, high = wilson(held, runs)
            return {"held": held, "runs": runs, "rate": held / runs if runs else None,
                    "wilson95": [round(low, 4), round(high, 4)]}

        return {"variant": self.variant, **share(self.held, self.runs),
                "expected_rate": str(expected or EVERY_RUN), "judged": self.judged(expected),
                "checks": {name: share(*counts) for name, counts in self.checks.items()},
                "failing_seeds": sorted(self.failing), "failing_runs": {str(s): d for s, d in
                                                                       sorted(self.failing.items())},
                "elapsed_s": [round(s, 2) for s in self.elapsed_s]}


RunOne = Callable[[int], Any]  # seed -> a runner.RunResult (verdict, run_dir, elapsed_s)
MAX_SEED = 2**63 - 1  # a scenario's seed range (chaos.harness.schema)


def check_counts(runs: int, jobs: int, base_seed: int) -> None:
    """Refuse a repeat that cannot run: no runs, too many, no jobs, or seeds past the scenario seed range.
    Raises `UsageError`."""
    if not 1 <= runs <= MAX_RUNS:
        raise UsageError(f"--repeat {runs}: expected 1 to {MAX_RUNS} runs")
    if not 1 <= jobs <= 64:
        raise UsageError(f"--jobs {jobs}: expected 1 to 64 clusters at once")
    if not 0 <= base_seed <= MAX_SEED - (runs - 1):
        raise UsageError(f"seeds {base_seed}..{base_seed + runs - 1} leave the seed range 0..{MAX_SEED}")


def repeat(variant: str | None, runs: int, base_seed: int, run_one: RunOne, *, jobs: int = 1,
           until_fail: bool = False, on_result: Callable[[int, Any], None] = lambda seed, result: None) -> Tally:
    """`run_one(base_seed + i)` for i in 0..runs-1, `jobs` at a time; `on_result(seed, result)` as each ends.
    Raises `UsageError` for bad counts (`check_counts`); an error of a run is raised once the runs under way
    have ended."""
    check_counts(runs, jobs, base_seed)
    tally = Tally(variant)
    seeds = iter(range(base_seed, base_seed + runs))
    stop = False
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="repeat") as pool:
        pending: dict[Future[Any], int] = {}
        while True:
            while not stop and len(pending) < jobs and (seed := next(seeds, None)) is not None:
                pending[pool.submit(run_one, seed)] = seed
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=pending.__getitem__):
                seed = pending.pop(future)
                try:
                    result = future.result()
                except BaseException:
                    stop = True
                    wait(pending)
                    raise
                tally.add(seed, result.verdict, str(result.run_dir), result.elapsed_s)
                on_result(seed, result)
                stop = stop or (until_fail and not result.verdict.held)
    return tally
