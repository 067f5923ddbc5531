"""`up`'s wait for a run to be ready (chaos.cluster.lifecycle._wait_all_hear), on fake nodes and a stepped clock:
every node hears every other one; for a kind that is ready on its view, one view of all that has held for
`VIEW_HOLD_S` (a merge right after the start installs a new one, and that one must hold)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from chaos.cluster import lifecycle
from node.errors import EnvironmentProblem

NAMES = ["n1", "n2"]


class SteppedTime:
    """`time` as the wait uses it: sleeping moves the clock, nothing else does."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def monotonic(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


@dataclass
class Info:
    name: str


class Nodes:
    """Two nodes that hear each other from the start; their view is ('n1', 1) until `merged_at_s`, then ('n1', 2)
    (or each its own singleton view until then, `singletons`)."""

    def __init__(self, clock: SteppedTime, merged_at_s: float, singletons: bool = False) -> None:
        self.clock, self.merged_at_s, self.singletons = clock, merged_at_s, singletons
        self.names, self.nodes, self.run_id = NAMES, [Info(n) for n in NAMES], "r"

    def client(self, name: str) -> Any:
        nodes = self

        class Client:
            def state(self) -> dict[str, Any]:
                merged = nodes.clock.now_s >= nodes.merged_at_s
                view = {"view_id": ["n1", 2 if merged else 1], "members": NAMES}
                if nodes.singletons and not merged:
                    view = {"view_id": [name, 1], "members": [name]}
                return {"view": view, "layers": {"liveness": {p: {"heard": True} for p in NAMES if p != name}}}
        return Client()


@pytest.fixture
def clock(monkeypatch) -> SteppedTime:
    stepped = SteppedTime()
    monkeypatch.setattr(lifecycle, "time", stepped)
    return stepped


@pytest.mark.parametrize("singletons", [False, True])
def test_a_kind_ready_on_its_view_waits_until_one_view_of_all_has_held(clock, singletons: bool) -> None:
    lifecycle._wait_all_hear(None, Nodes(clock, merged_at_s=0.5, singletons=singletons), 30, lambda _: None,
                             one_view=True)
    assert 0.5 + lifecycle.VIEW_HOLD_S <= clock.now_s <= 0.5 + lifecycle.VIEW_HOLD_S + 2 * lifecycle.READY_POLL_S


def test_a_kind_ready_when_its_nodes_hear_each_other_does_not_wait_for_views(clock) -> None:
    lifecycle._wait_all_hear(None, Nodes(clock, merged_at_s=10, singletons=True), 30, lambda _: None)
    assert clock.now_s == 0.0


def test_views_that_never_agree_are_an_error_naming_them(clock) -> None:
    with pytest.raises(EnvironmentProblem, match=r"the nodes hear each other but hold no one view of all within 5 s"):
        lifecycle._wait_all_hear(None, Nodes(clock, merged_at_s=1e9, singletons=True), 5, lambda _: None,
                                 one_view=True)
