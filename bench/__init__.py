"""splitlab's benchmarks: each `bench_*.py` module has `run(quick: bool) -> list[dict]`; `python -m bench` runs
them all and prints one table of rows {bench, name, value, unit, baseline, ratio}. Targets are printed, never
asserted."""
from __future__ import annotations

import time
from typing import Callable


def wait_until(done: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.05) -> None:
    """Poll `done` until it is true. Raises `TimeoutError` saying `what` did not happen within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s:g} s")
        time.sleep(poll_s)
