"""A JGroups node's liveness (jgnode.liveness): heard within the silence threshold, silent after it, strangers
recorded once and bounded."""
from __future__ import annotations

from jgnode.liveness import Liveness


def test_heard_then_silent_then_heard_again_with_one_event_each():
    now = [100.0]
    events: list[tuple[str, dict]] = []
    live = Liveness("n1", ("n1", "n2", "n3"), 1500, lambda t, f: events.append((t, f)), clock=lambda: now[0])
    live.heard("n2")
    live.heard("n2")
    assert live.state() == {"n2": {"heard": True, "last_heard_ms_ago": 0.0}, "n3": {"heard": False,
                                                                                      "last_heard_ms_ago": None}}
    now[0] += 1.4
    live.tick()
    assert events == [("peer_heard", {"peer": "n2"})]
    now[0] += 0.2
    live.tick()
    assert events[-1] == ("peer_silent", {"peer": "n2", "silent_ms": 1600.0})
    assert live.state()["n2"]["heard"] is False
    live.heard("n2")
    assert events[-1] == ("peer_heard", {"peer": "n2"}) and len(events) == 3


def test_itself_is_never_a_peer_and_strangers_are_recorded_once_up_to_a_bound():
    events: list[tuple[str, dict]] = []
    live = Liveness("n1", ("n1", "n2"), 1500, lambda t, f: events.append((t, f)))
    live.heard("n1")
    for i in range(200):
        live.heard(f"x{i}")
        live.heard(f"x{i}")
    assert events == [("stranger_heard", {"peer": f"x{i}"}) for i in range(64)]
    assert set(live.state()) == {"n2"}
