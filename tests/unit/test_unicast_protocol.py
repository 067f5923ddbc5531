"""The unicast layer's API: factory, config, requests, state(), timers, and the seqno windows."""
from __future__ import annotations

import json

import pytest

from node.core import AppRequest, Received, Send, SetTimer, TimerFired, ViewInstalled
from node.errors import ConfigError, UsageError
from node.stack import Stack
from node.unicast import MAX_PAYLOAD_BYTES, TIMER_KEY, VARIANTS, UnicastConfig, make_unicast
from node.unicast.connid import (GEN_MASK, STREAM_MAX, conn_older, first_conn_id, next_generation, next_stream,
                                 same_stream, stream_start)
from node.unicast.window import BELOW_WINDOW, DUPLICATE, NEW, OUTSIDE_WINDOW, ReceiveWindow, SendWindow
from node.wire import UnicastAck, UnicastData, UnicastSync

VARIANT_NAMES = list(VARIANTS)


# --- factory and config ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_factory_builds_each_variant(variant: str) -> None:
    proto = make_unicast(variant, "a", UnicastConfig(), members=["a", "b"])
    assert proto.NAME == variant and proto.local == "a" and proto.members == ("a", "b")
    assert UnicastData in proto.MESSAGES


def test_unknown_variant_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError) as info:
        make_unicast("unicast4", "a", UnicastConfig())
    assert "unicast3" in str(info.value) and "unicast2" in str(info.value) and "unicast1" in str(info.value)


def test_config_defaults_and_validation() -> None:
    config = UnicastConfig()
    assert config.xmit_interval_ms == 100 and config.conn_close_timeout_ms == 10_000
    assert config.as_dict()["ack_threshold"] == config.ack_threshold
    for bad in ({"xmit_interval_ms": 0}, {"ack_threshold": -1}, {"max_retransmit_time_ms": -5},
                {"conn_id_start": 0}, {"sync_timeout_ms": 1.5}, {"xmit_interval_ms": True}):
        with pytest.raises(ConfigError):
            UnicastConfig(**bad)
    assert UnicastConfig(max_retransmit_time_ms=0).max_retransmit_time_ms == 0
    assert UnicastConfig.from_mapping({"xmit_interval_ms": 50}).xmit_interval_ms == 50
    with pytest.raises(ConfigError) as info:
        UnicastConfig.from_mapping({"xmit_intervall_ms": 50})
    assert "xmit_intervall_ms" in str(info.value)


# --- requests ----------------------------------------------------------------------------------------------
def _send(proto, to="b", payload=b"x", now_s=0.0):
    return proto.handle(now_s, AppRequest("send", {"to": to, "payload": payload}))


@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_send_returns_send_and_emit_and_arms_the_timer_once(variant: str) -> None:
    proto = make_unicast(variant, "a", UnicastConfig(), ["a", "b"])
    effects = _send(proto)
    sends = [e for e in effects if isinstance(e, Send)]
    assert len(sends) == 1 and sends[0].dst == "b" and sends[0].msg.seqno == 1
    assert [e.type for e in effects if hasattr(e, "type")].count("data_tx") == 1
    assert [e for e in effects if isinstance(e, SetTimer)] == [SetTimer(TIMER_KEY, 0.1)]
    assert not [e for e in _send(proto, now_s=0.01) if isinstance(e, SetTimer)]   # already armed
    assert not any(type(e).__name__ == "Deliver" for e in effects)


@pytest.mark.parametrize("variant", VARIANT_NAMES)
@pytest.mark.parametrize("op, args", [
    ("send", {"to": "b"}), ("send", {"to": "b", "payload": "text"}), ("send", {"payload": b"x"}),
    ("send", {"to": "a", "payload": b"x"}), ("send", {"to": "b", "payload": b"x" * (MAX_PAYLOAD_BYTES + 1)}),
    ("close", {}), ("remove_receive", {"peer": 3}), ("frobnicate", {}),
])
def test_bad_requests_raise_usage_error(variant: str, op: str, args: dict) -> None:
    proto = make_unicast(variant, "a", UnicastConfig(), ["a", "b"])
    with pytest.raises(UsageError):
        proto.handle(0.0, AppRequest(op, args))


def test_largest_payload_fits_one_datagram() -> None:
    from node.wire import decode_datagram, encode_datagram
    proto = make_unicast("unicast3", "a", UnicastConfig())
    [send] = [e for e in _send(proto, payload=b"x" * MAX_PAYLOAD_BYTES) if isinstance(e, Send)]
    data = encode_datagram(1, "n" * 64, [send.msg])
    assert decode_datagram(data, 1)[1] == [send.msg]


@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_state_is_json_and_describes_both_directions(variant: str) -> None:
    a = make_unicast(variant, "a", UnicastConfig(), ["a", "b"])
    b = make_unicast(variant, "b", UnicastConfig(), ["a", "b"])
    for n in range(3):
        [send] = [e for e in _send(a, payload=b"p%d" % n) if isinstance(e, Send)]
        if n != 1:
            b.handle(0.0, Received("a", send.msg))
    state_a, state_b = a.state(0.5), b.state()
    json.dumps(state_a), json.dumps(state_b)
    assert state_a["proto"] == variant and state_a["members"] == ["a", "b"]
    send_entry = state_a["peers"]["b"]["send"]
    assert state_a["peers"]["b"]["recv"] is None
    assert {"conn_id", "state", "low", "highest_sent", "unacked", "counters"} <= set(send_entry)
    assert (send_entry["highest_sent"], send_entry["unacked"], send_entry["state"]) == (3, 3, "open")
    recv = state_b["peers"]["a"]["recv"]
    assert {"conn_id", "state", "low", "highest_delivered", "highest_received", "counters"} <= set(recv)
    assert (recv["highest_delivered"], recv["highest_received"], recv["missing"], recv["buffered"]) == (1, 3, 1, 1)
    assert recv["conn_id"] == send_entry["conn_id"]


def test_close_and_remove_receive() -> None:
    a = make_unicast("unicast3", "a", UnicastConfig(), ["a", "b"])
    b = make_unicast("unicast3", "b", UnicastConfig(), ["a", "b"])
    [send] = [e for e in _send(b, to="a") if isinstance(e, Send)]
    a.handle(0.0, Received("b", send.msg))
    _send(a)
    effects = a.handle(0.0, AppRequest("remove_receive", {"peer": "b"}))
    assert [e.fields["dir"] for e in effects] == ["recv"] and "b" in a.send_entries
    effects = a.handle(0.0, AppRequest("close", {"peer": "b"}))  # JGroups' closeConnection: CLOSING, kept
    assert [e.fields["state"] for e in effects] == ["closing"] and a.send_entries["b"].state == "closing"
    effects = a.handle(0.0, AppRequest("remove", {"peer": "b"}))  # removeConnection: gone at once
    assert [e.fields["state"] for e in effects] == ["removed"] and a.send_entries == {}


def test_timer_disarms_when_idle_and_unknown_timer_keys_are_ignored() -> None:
    a = make_unicast("unicast3", "a", UnicastConfig(), ["a", "b"])
    b = make_unicast("unicast3", "b", UnicastConfig(), ["a", "b"])
    [send] = [e for e in _send(a) if isinstance(e, Send)]
    b_effects = b.handle(0.0, Received("a", send.msg))
    assert [e for e in b_effects if isinstance(e, SetTimer)]          # an ack is owed
    b_effects = b.handle(0.1, TimerFired(TIMER_KEY))
    [ack] = [e.msg for e in b_effects if isinstance(e, Send)]
    assert isinstance(ack, UnicastAck) and ack.seqno == 1
    assert not [e for e in b_effects if isinstance(e, SetTimer)]      # nothing left: not re-armed
    a.handle(0.1, Received("b", ack))
    assert not [e for e in a.handle(0.1, TimerFired(TIMER_KEY)) if isinstance(e, SetTimer)]
    assert a.handle(0.2, TimerFired(("other", "key"))) == []


def test_view_installed_is_remembered() -> None:
    a = make_unicast("unicast3", "a", UnicastConfig())
    assert a.members is None and a.is_member("anyone")
    a.handle(0.0, ViewInstalled(("a", 2), ("a", "b")))
    assert a.view_id == ("a", 2) and not a.is_member("c")
    assert a.state()["view_id"] == ["a", 2]


def test_runs_as_a_stack_layer() -> None:
    stack = Stack({"unicast": make_unicast("unicast3", "a", UnicastConfig(), ["a", "b"])})
    effects = stack.request(0.0, "unicast", "send", {"to": "b", "payload": b"x"})
    assert SetTimer(("unicast", TIMER_KEY), 0.1) in effects
    assert stack.received_batch(0.0, "b", [UnicastAck(1, 1, 1)])[1] == 0  # claimed: none unclaimed
    assert stack.start(0.0) == []


# --- connection ids ----------------------------------------------------------------------------------------
def test_conn_ids_carry_stream_and_generation_and_order_serially() -> None:
    first = first_conn_id(5)
    synced = next_generation(first)
    assert first != 0 and same_stream(first, synced) and not same_stream(first, first_conn_id(6))
    assert conn_older(first, synced) and not conn_older(synced, first) and not conn_older(first, first)
    assert conn_older(synced, first_conn_id(6))               # a newer stream beats any sync of an older one
    assert conn_older(first_conn_id(STREAM_MAX), first_conn_id(2))   # across the stream wrap
    last_gen = first | GEN_MASK
    assert next_generation(last_gen) == first | 1 and conn_older(last_gen, next_generation(last_gen))
    assert next_stream(STREAM_MAX) == 1 and stream_start(0) == 1


def test_protocol_allocates_a_new_stream_per_connection_and_a_generation_per_sync() -> None:
    proto = make_unicast("unicast3", "a", UnicastConfig(conn_id_start=first_conn_id(STREAM_MAX)))
    ids = [proto._new_conn_id() for _ in range(3)]
    assert ids == [first_conn_id(STREAM_MAX), first_conn_id(1), first_conn_id(2)]
    [send] = [e for e in _send(proto) if isinstance(e, Send)]
    effects = proto.handle(0.0, Received("b", UnicastSync()))
    [sync_ok] = [e.msg for e in effects if isinstance(e, Send)]
    assert sync_ok.conn_id == next_generation(send.msg.conn_id) and same_stream(sync_ok.conn_id, send.msg.conn_id)


# --- windows -----------------------------------------------------------------------------------------------
def test_send_window_purge_remove_and_lowest() -> None:
    w = SendWindow(capacity=100)
    assert [w.append(b"%d" % n) for n in range(1, 6)] == [1, 2, 3, 4, 5]
    assert w.lowest() == 1 and len(w) == 5
    assert w.remove(2) and not w.remove(2)
    assert w.lowest() == 1 and w.low == 0
    assert w.remove(1)
    assert w.low == 2 and w.lowest() == 3           # low moves over individually removed seqnos
    assert w.purge_to(99) == 3                       # capped at highest_sent
    assert (w.low, w.lowest(), len(w)) == (5, None, 0)
    assert w.purge_to(3) == 0 and w.low == 5         # never moves back


def test_receive_window_add_drain_missing_rebase() -> None:
    w = ReceiveWindow(capacity=100, highest_delivered=10)
    assert w.add(10, b"old") == BELOW_WINDOW
    assert w.add(13, b"13") == NEW and w.add(13, b"13") == DUPLICATE
    assert w.add(11, b"11") == NEW
    assert w.drain() == [(11, b"11")]
    assert w.missing(10) == [12] and w.has_gaps()
    w.add(16, b"16")
    assert w.missing(10) == [12, 14, 15] and w.missing(2) == [12, 14]
    assert w.rebase(14) == 1                         # 13 dropped, 12 and 14 given up
    assert w.drain() == [] and w.missing(10) == [15]
    w.add(15, b"15")
    assert w.drain() == [(15, b"15"), (16, b"16")] and not w.has_gaps()


def test_absurd_seqnos_stay_outside_the_bounded_windows() -> None:
    w = ReceiveWindow(capacity=100)
    assert w.add(2**64 - 1, b"far") == OUTSIDE_WINDOW and w.add(101, b"edge+1") == OUTSIDE_WINDOW
    assert w.missing(10_000) == [] and not w.buffered
    assert w.add(100, b"edge") == NEW and len(w.missing(10_000)) == 99
    assert w.rebase(2**64 - 1) == 1 and not w.buffered      # a forged SYNC-OK low: O(buffered), nothing kept
    s = SendWindow(capacity=3)
    assert [s.append(b"x") for _ in range(3)] == [1, 2, 3] and not s.has_room()
    assert s.purge_to(2**64 - 1) == 3 and s.has_room()      # an absurd ack is capped at highest_sent


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_full_send_window_refuses_sends_until_acks_free_room(variant: str) -> None:
    """Back-pressure: the send that fills the window emits window_full, the next one raises WindowFull (nothing
    taken), and the ack that frees room emits window_unblocked."""
    from node.errors import WindowFull
    from node.sim import send_many, unicast_sim

    sim = unicast_sim(variant, ("a", "b"), seed=4, config=UnicastConfig(window_capacity=5))
    sim.drop_matching("b", "a", None)  # no acks (nor anything else) reach a for now
    sent = send_many(sim, "a", "b", 5, "m")
    assert sim.emitted("window_full", node="a", peer="b", capacity=5)
    with pytest.raises(WindowFull):
        sim.request("a", "unicast", "send", {"to": "b", "payload": b"one too many"})
    assert len(sim.layer("a", "unicast").send_entries["b"].window) == 5
    sim.clear_faults()
    assert sim.run_until_quiet(30), sim.repro()
    assert sim.delivered("b", "a") == sent, sim.repro()
    assert sim.emitted("window_unblocked", node="a", peer="b"), sim.repro()
    assert send_many(sim, "a", "b", 1, "after")  # room again
