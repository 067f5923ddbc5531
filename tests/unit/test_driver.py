"""The driver of one node's stack (node/driver.py) without asyncio, sockets or the simulator: the receive path
(counted drops by reason, the incarnation gate, a restarted peer, unclaimed messages), the effects (timers through
the host, deliveries, records, views, the outbox) and bundling within the codec's limits."""
from __future__ import annotations

from typing import Any, Hashable

import pytest

from node.core import CancelTimer, Deliver, Emit, InstallView, Protocol, Send, SetTimer, make_payload
from node.driver import MAX_DROP_EVENTS_PER_REASON, Driver
from node.errors import UsageError
from node.incarnation import LIFE_TIMEOUT_S, MAX_CLOCK_SKEW_MS
from node.stack import Stack
from node.wire import (MAX_DATAGRAM_BYTES, MAX_MESSAGES, Heartbeat, Ping, Pong, decode_datagram_from,
                       encode_datagram, encode_message)

CID = 0x00C0FFEE
BOOT = 1_700_000_000_000      # the driven node's incarnation
WALL = BOOT + 5_000           # its unix clock when the tests feed datagrams
PEER_BOOT = BOOT - 60_000     # the peer's incarnation
MEMBERS = ("a", "b")


class Echo(Protocol):
    """Claims Ping only: answers with a Pong, delivers a payload named after the ping, records what it saw."""

    MESSAGES = (Ping,)

    def __init__(self) -> None:
        self.log: list[tuple] = []

    def on_received(self, now_s: float, src: str, msg: Any) -> list:
        self.log.append(("rx", src, msg.ping_id))
        return [Send(src, Pong(msg.ping_id)), Deliver(src, make_payload(f"{src}.1.{msg.ping_id}", 32)),
                Emit("echo_rx", {"from": src, "id": msg.ping_id})]

    def on_request(self, now_s: float, op: str, args: dict[str, Any]) -> list:
        if op == "ping":
            return [Send(args["to"], Ping(i)) for i in range(args["count"])]
        if op == "multicast":  # one message object to several peers, as NAKACK4 sends
            msg = Ping(args["id"])
            return [Send(dst, msg) for dst in args["to"]]
        if op == "timer":
            return [SetTimer(args["key"], args["at_s"])]
        if op == "cancel":
            return [CancelTimer(args["key"])]
        if op == "view":
            return [InstallView(args["view_id"], args["members"])]
        raise UsageError(f"echo: no op {op!r}")

    def on_timer(self, now_s: float, key: Hashable) -> list:
        self.log.append(("timer", now_s, key))
        return []

    def on_view(self, now_s: float, view_id: tuple[str, int], members: tuple[str, ...]) -> list:
        self.log.append(("view", view_id, members))
        return []

    def on_peer_restarted(self, now_s: float, peer: str) -> list:
        self.log.append(("restarted", peer))
        return []


class Host:
    """Records what the driver asks of its host."""

    def __init__(self) -> None:
        self.timers: dict[Hashable, float] = {}
        self.events: list[dict[str, Any]] = []
        self.ready = 0
        self.delivered: list[tuple[str, bytes, str]] = []

    def set_timer(self, key: Hashable, at_s: float) -> None:
        self.timers[key] = at_s

    def cancel_timer(self, key: Hashable) -> None:
        self.timers.pop(key, None)

    def record(self, type_: str, fields: dict[str, Any]) -> None:
        self.events.append({"type": type_, **fields})

    def outbox_ready(self) -> None:
        self.ready += 1

    def deliver(self, src: str, payload: bytes, kind: str) -> None:
        self.delivered.append((src, payload, kind))

    def of(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == type_]


def make(bundle_max_bytes: int = 8192, name: str = "b") -> tuple[Driver, Host, Echo]:
    host, echo = Host(), Echo()
    driver = Driver(name, Stack({"echo": echo}), CID, BOOT, bundle_max_bytes, frozenset(MEMBERS),
                    set_timer=host.set_timer, cancel_timer=host.cancel_timer, record=host.record,
                    outbox_ready=host.outbox_ready, deliver=host.deliver)
    driver.start(0.0)
    return driver, host, echo


def datagram(msgs: list, sender: str = "a", incarnation: int = PEER_BOOT, cluster_id: int = CID) -> bytes:
    return encode_datagram(cluster_id, sender, msgs, incarnation)


def feed(driver: Driver, data: bytes, now_s: float = 1.0) -> None:
    driver.receive(now_s, WALL + int(now_s * 1000), data, "10.0.0.9")


# --- wire input: counted drops, never an exception ---------------------------------------------------------------
_GOOD = datagram([Ping(1)])
MALFORMED = {
    "truncated": b"SL\x02",
    "foreign": b"XX" + _GOOD[2:],                                  # another magic
    "version": _GOOD[:2] + b"\x7f" + _GOOD[3:],
    "unknown-type": _GOOD[:-11] + b"\xff\x00\x08" + b"\0" * 8,      # a message type nobody registered
}


@pytest.mark.parametrize("reason", sorted(MALFORMED))
def test_a_malformed_datagram_is_a_counted_drop_with_its_reason(reason: str) -> None:
    driver, host, echo = make()
    feed(driver, MALFORMED[reason])
    assert driver.dropped == {reason: 1}
    [event] = host.of("datagram_dropped")
    assert event["reason"] == reason and event["src_ip"] == "10.0.0.9" and event["detail"]
    assert echo.log == [] and driver.outbox == {} and driver.counters["datagrams_received"] == 1


def test_a_datagram_of_another_cluster_is_dropped_as_foreign() -> None:
    driver, host, echo = make()
    feed(driver, datagram([Ping(1)], cluster_id=CID ^ 1))
    assert driver.dropped == {"foreign": 1} and echo.log == []
    assert "cluster id" in host.of("datagram_dropped")[0]["detail"]


def test_drop_events_are_bounded_per_reason_but_every_drop_is_counted() -> None:
    driver, host, _ = make()
    for _ in range(MAX_DROP_EVENTS_PER_REASON + 50):
        feed(driver, MALFORMED["truncated"])
    feed(driver, MALFORMED["version"])
    assert driver.dropped == {"truncated": MAX_DROP_EVENTS_PER_REASON + 50, "version": 1}
    reasons = [e["reason"] for e in host.of("datagram_dropped")]
    assert reasons == ["truncated"] * MAX_DROP_EVENTS_PER_REASON + ["version"]


def test_drops_without_a_recorder_are_still_counted() -> None:
    driver, host, _ = make()
    driver.record = None
    feed(driver, MALFORMED["truncated"])
    feed(driver, datagram([Ping(1)], sender="mallory"))
    assert driver.dropped == {"truncated": 1, "unknown-sender": 1} and host.events == []


# --- the incarnation gate ------------------------------------------------------------------------------------------
def test_a_datagram_of_a_non_member_is_dropped_before_any_layer() -> None:
    driver, host, echo = make()
    feed(driver, datagram([Ping(1)], sender="mallory"))
    assert driver.dropped == {"unknown-sender": 1} and echo.log == []
    assert host.of("datagram_dropped")[0]["reason"] == "unknown-sender"


def test_an_incarnation_far_ahead_of_the_clock_is_dropped() -> None:
    driver, _, echo = make()
    feed(driver, datagram([Ping(1)], incarnation=WALL + 1000 + MAX_CLOCK_SKEW_MS + 1), now_s=1.0)
    assert driver.dropped == {"future-incarnation": 1} and echo.log == []


def test_another_incarnation_while_the_current_life_talks_is_dropped() -> None:
    driver, host, echo = make()
    feed(driver, datagram([Ping(1)]), now_s=1.0)
    feed(driver, datagram([Ping(2)], incarnation=PEER_BOOT - 1), now_s=1.1)   # a leftover of an older life
    feed(driver, datagram([Ping(3)], incarnation=PEER_BOOT + 1), now_s=1.2)   # a newer life, not confirmed
    assert driver.dropped == {"old-incarnation": 1, "unconfirmed-incarnation": 1}
    assert echo.log == [("rx", "a", 1)] and host.of("peer_restarted") == []


def test_a_restarted_peer_is_announced_to_every_layer_before_its_new_lifes_messages() -> None:
    driver, host, echo = make()
    feed(driver, datagram([Ping(1)]), now_s=1.0)
    new_life = PEER_BOOT + 70_000
    feed(driver, datagram([Ping(7), Ping(8)], incarnation=new_life), now_s=1.0 + LIFE_TIMEOUT_S + 0.1)
    assert host.of("peer_restarted") == [{"type": "peer_restarted", "peer": "a", "incarnation": new_life,
                                          "previous": PEER_BOOT}]
    assert echo.log == [("rx", "a", 1), ("restarted", "a"), ("rx", "a", 7), ("rx", "a", 8)]
    assert driver.dropped == {}
    feed(driver, datagram([Ping(9)]), now_s=2.3)                               # the old life is over now
    assert driver.dropped == {"old-incarnation": 1}


# --- routing -------------------------------------------------------------------------------------------------------
def test_a_message_no_layer_claims_is_counted_and_the_rest_of_the_datagram_is_fed() -> None:
    driver, host, echo = make()
    feed(driver, datagram([Heartbeat(1), Ping(5), Heartbeat(2)]))
    assert driver.dropped == {"unhandled-type": 2}
    assert echo.log == [("rx", "a", 5)]
    assert driver.counters["messages_received"] == 3 and host.of("datagram_dropped") == []


# --- effects -------------------------------------------------------------------------------------------------------
def test_deliveries_are_counted_handed_to_the_host_and_recorded_with_their_msg_id() -> None:
    driver, host, _ = make()
    feed(driver, datagram([Ping(4), Ping(5)]))
    assert host.delivered == [("a", make_payload("a.1.4", 32), "unicast"), ("a", make_payload("a.1.5", 32), "unicast")]
    assert host.of("app_deliver") == [{"type": "app_deliver", "msg_id": "a.1.4", "kind": "unicast", "from": "a"},
                                      {"type": "app_deliver", "msg_id": "a.1.5", "kind": "unicast", "from": "a"}]
    assert driver.counters["delivered"] == 2
    assert [e["id"] for e in host.of("echo_rx")] == [4, 5]                    # Emit: recorded as it is


def test_timers_are_set_and_cancelled_through_the_host_and_fire_into_their_layer() -> None:
    driver, host, echo = make()
    driver.request(0.0, "echo", "timer", {"key": "t", "at_s": 2.0})
    driver.request(0.0, "echo", "timer", {"key": "u", "at_s": 3.0})
    assert host.timers == {("echo", "t"): 2.0, ("echo", "u"): 3.0}            # namespaced by the stack
    driver.request(0.0, "echo", "cancel", {"key": "u"})
    assert host.timers == {("echo", "t"): 2.0}
    driver.timer(2.0, ("echo", "t"))
    assert echo.log == [("timer", 2.0, "t")]


def test_requests_return_their_effects_and_raise_before_any() -> None:
    driver, host, _ = make()
    effects = driver.request(0.0, "echo", "ping", {"to": "a", "count": 2})
    assert effects == [Send("a", Ping(0)), Send("a", Ping(1))]
    with pytest.raises(UsageError):
        driver.request(0.0, "echo", "nope", {})
    with pytest.raises(UsageError):
        driver.request(0.0, "nolayer", "ping", {})
    assert driver.take_outbox() == {"a": [Ping(0), Ping(1)]}


def test_the_outbox_collects_per_destination_and_tells_the_host_once_per_fill() -> None:
    driver, host, _ = make()
    feed(driver, datagram([Ping(1), Ping(2)]))
    driver.request(1.0, "echo", "ping", {"to": "a", "count": 1})
    driver.request(1.0, "echo", "ping", {"to": "c", "count": 1})
    assert host.ready == 1                                  # the runtime schedules one flush per loop turn
    assert driver.take_outbox() == {"a": [Pong(1), Pong(2), Ping(0)], "c": [Ping(0)]} and driver.outbox == {}
    feed(driver, datagram([Ping(3)]))
    assert host.ready == 2 and driver.take_outbox() == {"a": [Pong(3)]}


def test_views_are_remembered_recorded_and_given_to_every_layer() -> None:
    driver, host, echo = make()
    driver.request(0.0, "echo", "view", {"view_id": ("a", 2), "members": ("a", "b")})   # a layer's InstallView
    assert driver.view == (("a", 2), ("a", "b")) and ("view", ("a", 2), ("a", "b")) in echo.log
    driver.install_view(1.0, ("b", 3), ("b",))                                          # from outside the stack
    assert driver.view == (("b", 3), ("b",)) and echo.log[-1] == ("view", ("b", 3), ("b",))
    assert [(e["view_id"], e["members"]) for e in host.of("view")] == [(["a", 2], ["a", "b"]), (["b", 3], ["b"])]
    assert driver.state(1.0)["view"] == {"view_id": ["b", 3], "members": ["b"]}


# --- bundling ------------------------------------------------------------------------------------------------------
def decoded(driver: Driver, datagrams: list[bytes]) -> list[list]:
    out = []
    for data in datagrams:
        sender, incarnation, msgs = decode_datagram_from(data, driver.cluster_id)
        assert (sender, incarnation) == (driver.name, driver.incarnation)
        out.append(msgs)
    return out


def test_more_messages_than_a_datagram_may_carry_are_split_within_the_message_cap() -> None:
    """A large bundle_max_bytes and more than MAX_MESSAGES queued to one peer: several datagrams, each decodable
    (the runtime once packed them all into one datagram its peers could not decode)."""
    driver, _, _ = make(bundle_max_bytes=65_000)
    count = 3 * MAX_MESSAGES + 5
    driver.request(0.0, "echo", "ping", {"to": "a", "count": count})
    datagrams = driver.datagrams(driver.take_outbox()["a"])
    batches = decoded(driver, datagrams)
    assert len(batches) == 4 and max(len(b) for b in batches) == MAX_MESSAGES
    assert [m.ping_id for b in batches for m in b] == list(range(count))
    assert all(len(d) <= MAX_DATAGRAM_BYTES for d in datagrams)
    assert driver.counters["datagrams_sent"] == 4 and driver.counters["messages_sent"] == count


def test_bundles_keep_to_bundle_max_bytes_and_zero_means_one_message_each() -> None:
    driver, _, _ = make(bundle_max_bytes=1_000)
    driver.request(0.0, "echo", "ping", {"to": "a", "count": 500})
    msgs = driver.take_outbox()["a"]
    datagrams = driver.datagrams(msgs)
    assert all(len(d) <= 1_000 for d in datagrams) and len(datagrams) > 1
    assert len(datagrams) <= -(-500 * 11 // (1_000 - 64))                      # as few as the limit allows
    assert [m.ping_id for b in decoded(driver, datagrams) for m in b] == list(range(500))
    unbundled, _, _ = make(bundle_max_bytes=0)
    assert [len(b) for b in decoded(unbundled, unbundled.datagrams(msgs[:3]))] == [1, 1, 1]


def test_what_one_node_bundles_another_driver_receives() -> None:
    a, _, _ = make(name="a")
    a.incarnation = PEER_BOOT
    b, host, echo = make()
    a.request(0.0, "echo", "ping", {"to": "b", "count": 3})
    for data in a.datagrams(a.take_outbox()["b"]):
        feed(b, data)
    assert echo.log == [("rx", "a", 0), ("rx", "a", 1), ("rx", "a", 2)] and b.dropped == {}
    assert b.counters["datagrams_received"] == 1 and len(host.delivered) == 3


def test_one_flush_encodes_a_message_sent_to_several_peers_once() -> None:
    """Each message object is encoded once per flush, into the flush's `encoded` dict, and every destination's
    datagram takes its bytes from there (shown by bytes planted in the dict: no destination encodes again). The
    test watches the dict, not the encoder: the compiled build's calls cannot be patched."""
    def flush(planted: bool) -> tuple[dict[int, bytes], dict[str, list]]:
        driver, _, _ = make()
        driver.request(0.0, "echo", "multicast", {"id": 7, "to": ["a", "c", "d"]})
        driver.request(0.0, "echo", "ping", {"to": "a", "count": 1})
        outbox = driver.take_outbox()
        encoded: dict[int, bytes] = {}
        if planted:  # each message as another Ping's bytes
            encoded = {id(m): encode_message(Ping(m.ping_id + 100)) for msgs in outbox.values() for m in msgs}
        sent = {dst: decoded(driver, driver.datagrams(msgs, encoded)) for dst, msgs in outbox.items()}
        assert driver.counters["messages_sent"] == 4
        return encoded, sent

    encoded, sent = flush(planted=False)
    assert sorted(encoded.values()) == sorted([encode_message(Ping(7)), encode_message(Ping(0))])  # 2 of 4 sends
    assert sent == {"a": [[Ping(7), Ping(0)]], "c": [[Ping(7)]], "d": [[Ping(7)]]}
    _, sent = flush(planted=True)
    assert sent == {"a": [[Ping(107), Ping(100)]], "c": [[Ping(107)]], "d": [[Ping(107)]]}


def test_state_has_the_layers_counters_and_drops() -> None:
    driver, _, _ = make()
    feed(driver, MALFORMED["truncated"])
    assert set(driver.state(1.0)) == {"view", "layers", "counters", "dropped"}
    assert driver.state(1.0)["dropped"] == {"truncated": 1}
