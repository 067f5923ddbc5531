"""Heartbeats (sans-IO): peers become heard on their first heartbeat and silent after the threshold."""
from node.core import Emit, Received, Send, SetTimer, TimerFired
from node.liveness import Liveness
from node.stack import Stack
from node.wire import Heartbeat, Ping, Pong


def emitted(effects, type_):
    return [e.fields for e in effects if isinstance(e, Emit) and e.type == type_]


def test_heartbeats_go_to_every_other_member_on_a_timer():
    layer = Liveness("n1", ["n1", "n2", "n3"], heartbeat_ms=100, silence_ms=300)
    effects = layer.start(0.0)
    assert sorted(e.dst for e in effects if isinstance(e, Send)) == ["n2", "n3"]
    assert SetTimer("beat", 0.1) in effects


def test_heard_then_silent_then_heard_again():
    layer = Liveness("n1", ["n1", "n2", "n3"], heartbeat_ms=100, silence_ms=300)
    layer.start(0.0)
    assert emitted(layer.handle(0.05, Received("n2", Heartbeat(1))), "peer_heard") == [{"peer": "n2"}]
    assert layer.handle(0.15, Received("n2", Heartbeat(2))) == []
    assert layer.hears() == ["n2"]
    assert emitted(layer.handle(0.3, TimerFired("beat")), "peer_silent") == []
    silent = emitted(layer.handle(0.5, TimerFired("beat")), "peer_silent")
    assert silent == [{"peer": "n2", "silent_ms": 350}]
    assert layer.hears() == []
    assert emitted(layer.handle(0.6, Received("n2", Heartbeat(3))), "peer_heard") == [{"peer": "n2"}]
    state = layer.state(0.7)
    assert state["n2"] == {"heard": True, "heartbeats": 3, "last_heard_ago_ms": 100}
    assert state["n3"]["last_heard_ago_ms"] is None


def test_stack_routes_by_message_type_and_namespaces_timers():
    from node.ping import PingWorkload
    stack = Stack({"liveness": Liveness("n1", ["n1", "n2"]), "ping": PingWorkload("n1", ["n1", "n2"])})
    effects = stack.start(0.0)
    assert SetTimer(("liveness", "beat"), 0.25) in effects
    assert stack.received(0.1, "n2", Ping(7)) == [Send("n2", Pong(7))]
    assert emitted(stack.timer(0.25, ("liveness", "beat")), "peer_silent") == []
    effects = stack.request(1.0, "ping", "ping", {"to": "n2", "count": 2, "interval_ms": 5})
    assert SetTimer(("ping", ("next", 1)), 1.005) in effects
    assert emitted(stack.received(1.002, "n2", Pong(1)), "pong_rx")[0]["rtt_ms"] == 2.0
