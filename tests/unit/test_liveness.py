"""Heartbeats (sans-IO): peers become heard on their first heartbeat and silent after the threshold."""
from node.config import from_env
from node.core import Emit, Received, Send, SetTimer, TimerFired
from node.layers import build_stack
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


def _beats_to(layer, peer, beats, heard_at_s=None, heartbeat_s=0.1):
    """Which of `beats` beats (numbered from 1) send `peer` a heartbeat; `peer` is heard just before `heard_at_s`."""
    got = []
    for i in range(beats):
        now_s = i * heartbeat_s
        if heard_at_s is not None and abs(now_s - heard_at_s) < 1e-9:
            layer.handle(now_s - 0.01, Received(peer, Heartbeat(1)))
        effects = layer.start(now_s) if i == 0 else layer.handle(now_s, TimerFired("beat"))
        if Send(peer, Heartbeat(i + 1)) in effects:
            got.append(i + 1)
    return got


def test_a_member_never_heard_gets_every_strideth_beat_the_first_among_them_and_a_heard_one_every_beat():
    """A member not up yet costs a heartbeat every `unheard_stride` beats, not every beat (issue 34: most of the
    CPU of starting 100 nodes); from the moment it is heard it gets every one."""
    layer = Liveness("n1", ["n1", "n2", "n3"], heartbeat_ms=100, silence_ms=600)  # gap 300 ms: every 3rd beat
    assert layer.unheard_stride == 3
    assert _beats_to(layer, "n3", 10) == [1, 4, 7, 10]
    layer = Liveness("n1", ["n1", "n2", "n3"], heartbeat_ms=100, silence_ms=600)
    assert _beats_to(layer, "n2", 10, heard_at_s=0.5) == [1, 4, 6, 7, 8, 9, 10]


def test_a_silent_member_keeps_the_full_rate():
    """Silence after being heard (a partition, a pause) is not "never heard": the heal is seen within a beat."""
    layer = Liveness("n1", ["n1", "n2"], heartbeat_ms=100, silence_ms=600)
    layer.start(0.0)
    layer.handle(0.05, Received("n2", Heartbeat(1)))
    sent = [Send("n2", Heartbeat(n)) in layer.handle(n / 10 - 0.1, TimerFired("beat")) for n in range(2, 20)]
    assert layer.hears() == []  # silent long since
    assert all(sent), sent


def test_the_gap_to_a_member_never_heard_stays_within_the_bound():
    for heartbeat_ms, silence_ms, quiet_ms in ((250, 1500, None), (990, 3960, None), (100, 300, None),
                                               (250, 1500, 800), (250, 1500, 200), (50, 10_000, None)):
        layer = Liveness("n1", ["n1", "n2"], heartbeat_ms=heartbeat_ms, silence_ms=silence_ms, quiet_ms=quiet_ms)
        bound_ms = (silence_ms if quiet_ms is None else quiet_ms) // 2
        got = _beats_to(layer, "n2", 240, heartbeat_s=heartbeat_ms / 1000)
        gaps_ms = {(b - a) * heartbeat_ms for a, b in zip(got, got[1:])}
        assert got[0] == 1 and max(gaps_ms) <= max(bound_ms, heartbeat_ms), (heartbeat_ms, silence_ms, quiet_ms, got)


def test_the_node_bounds_the_gap_by_the_shorter_of_silence_and_suspicion():
    """A member this one reaches but never hears (a one-way cut since this one started) must not be suspected between
    two heartbeats: the node passes half the shorter of the liveness silence and the membership's timeout."""
    base = {"SPLITLAB_NODE": "n1", "SPLITLAB_RUN": "r1", "SPLITLAB_MEMBERS": "n1,n2,n3", "SPLITLAB_TOKEN": "t",
            "SPLITLAB_HEARTBEAT_MS": "100", "SPLITLAB_SILENCE_MS": "1200"}
    liveness = build_stack(from_env(base)).layers["liveness"]
    assert liveness.unheard_stride == 6  # half of 1200 (the membership's default timeout, 1500, is longer)
    short = build_stack(from_env({**base, "SPLITLAB_MEMBERSHIP_SUSPECT_TIMEOUT_MS": "400"})).layers["liveness"]
    assert short.unheard_stride == 2
