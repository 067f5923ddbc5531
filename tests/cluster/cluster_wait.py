"""`wait_for`: the one polling helper of the cluster tests (a condition on live nodes, with a deadline)."""
from __future__ import annotations

import time
from typing import Callable

from node.errors import EnvironmentProblem


def wait_for(predicate: Callable[[], bool], timeout_s: float = 15.0, what: str = "condition",
             poll_s: float = 0.2, while_restarting: bool = False) -> None:
    """Poll `predicate` until it is true; fail the test saying `what` did not happen within `timeout_s`. With
    `while_restarting`, a control API that does not answer (a node restarting) counts as "not yet"."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if predicate():
                return
        except EnvironmentProblem:
            if not while_restarting:
                raise
        assert time.monotonic() < deadline, f"timed out waiting for {what} ({timeout_s:g} s)"
        time.sleep(poll_s)
