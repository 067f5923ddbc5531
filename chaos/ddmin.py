"""Zeller's delta debugging (`ddmin`), generic over what is shrunk: the datagrams of `splitlab fuzz --shrink`
(chaos.fuzz.shrink) and the fault units of `splitlab shrink` (chaos.harness.shrink). It imports nothing of
splitlab, so every room of `chaos/` may use it.
"""
from __future__ import annotations

from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
MAX_TRIALS = 60


def ddmin(cases: Sequence[T], breaks: Callable[[list[T]], bool],
          max_trials: int = MAX_TRIALS) -> tuple[list[T], bool]:
    """The smallest subsequence of `cases` (which break) found to still break, trying chunks, then their
    complements, at finer and finer granularity; stops after `max_trials` calls of `breaks`. Returns (cases,
    whether the search ended at a 1-minimal set). The empty subsequence is never tried."""
    cases = list(cases)
    trials = 0
    n = 2
    while len(cases) >= 2:
        size = -(-len(cases) // n)
        chunks = [cases[i:i + size] for i in range(0, len(cases), size)]
        reduced = False
        for candidates in (chunks, [cases[:i * size] + cases[(i + 1) * size:] for i in range(len(chunks))]
                           if len(chunks) > 2 else []):
            for candidate in candidates:
                if trials >= max_trials:
                    return cases, False
                trials += 1
                if breaks(candidate):
                    cases, reduced = candidate, True
                    n = 2 if candidates is chunks else max(n - 1, 2)
                    break
            if reduced:
                break
        if not reduced:
            if n >= len(cases):
                return cases, True
            n = min(2 * n, len(cases))
    return cases, True
