"""Hostile input against the unicast layer: every variant (unicast1, unicast2, unicast3) is fed arbitrary decoded
messages of every type it claims (`MESSAGES`), from members, from itself and from strangers, with fields drawn
around its current windows and connection ids (+/- 1, 0, 1, 2**32-1, 2**64-1), interleaved with time advancing
(its timers fire), application sends / close / remove_receive / sync, views and PeerRestarted events.

Properties (see test_property_harness): (a) nothing raises (UsageError of a bad request excepted); (b) bounded
work per event, bounded effects per event (a function of max_xmit_req_seqnos and what is buffered), effects the
runtime can carry out, a receive window never holds a seqno outside (highest delivered, + capacity], state kept
for at most TRACKED_STRANGERS_MAX non-members; (c) unicast3 only (its docstring promises it, the legacy variants
are the seeds' failures): within one receive connection (one receive entry), deliveries are exactly once and in
increasing seqno order.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_property_harness import (HOSTILE_SETTINGS, LAYER_LOCAL, LAYER_MEMBERS, LAYER_NAMES, STRANGERS, Driver, Edges,
                                   LayerTarget, UnboundedMemory, any_value, draw_message, hostile_examples,
                                   message_strategy, payload_for, run_steps, shared_step)

from node.errors import UsageError, WindowFull
from node.unicast import VARIANTS, UnicastConfig, make_unicast
from node.unicast.connid import GEN_BITS, STREAM_MAX, first_conn_id, next_generation

LOCAL, MEMBERS, NAMES = LAYER_LOCAL, LAYER_MEMBERS, LAYER_NAMES
# The receive window capacity the bound is checked against if UnicastConfig has no `window_capacity` (DESIGN.md:
# "memory per peer is bounded").
DEFAULT_RECEIVE_CAPACITY = 16_384
EXAMPLES = hostile_examples(150)
STEPS = 30
SMALL = dict(xmit_interval_ms=100, ack_threshold=4, conn_close_timeout_ms=1_000, sync_min_interval_ms=400,
             sync_timeout_ms=2_000, max_retransmit_time_ms=2_500, max_xmit_req_seqnos=16)
if "window_capacity" in {f.name for f in fields(UnicastConfig)}:
    SMALL["window_capacity"] = 32  # small enough that application sends and forged seqnos reach its edges
CONFIG = UnicastConfig(**SMALL)


def receive_capacity(config: UnicastConfig) -> int:
    """The configured receive window capacity (`window_capacity`), or DEFAULT_RECEIVE_CAPACITY without one."""
    return getattr(config, "window_capacity", DEFAULT_RECEIVE_CAPACITY)


def buffered_total(layer: Any) -> int:
    return sum(len(e.window.buffered) for e in layer.recv_entries.values())


def effect_bound(driver: Driver) -> int:
    """Per event: per peer an ack, XMIT_REQs, a sync, a CLOSE and up to max_xmit_req_seqnos resends (each with
    its history event), and what is buffered may be delivered."""
    layer = driver.target.layer
    peers = len(set(layer.send_entries) | set(layer.recv_entries) | set(getattr(layer, "_rx_sync", ()))) + 1
    return 32 + peers * (4 * layer.config.max_xmit_req_seqnos + 32) + 4 * (buffered_total(layer) + 1)


def bounds(driver: Driver) -> None:
    """Every receive window holds only seqnos in (highest delivered, highest delivered + capacity]."""
    layer = driver.target.layer
    capacity = receive_capacity(layer.config)
    for peer, entry in layer.recv_entries.items():
        w = entry.window
        outside = [s for s in w.buffered if not w.highest_delivered < s <= w.highest_delivered + capacity]
        if len(w.buffered) > capacity or outside:
            raise UnboundedMemory(f"receive window for {peer!r} holds {len(w.buffered)} messages, "
                                  f"{len(outside)} outside (highest delivered {w.highest_delivered}, "
                                  f"+ capacity {capacity}), e.g. seqno {max(outside, default=None)}")


def edges_for(layer: Any, src: str, ordered: bool) -> Edges:
    """Fields around what `layer` holds for `src`: its windows' edges and its connection ids."""
    capacity = receive_capacity(layer.config)
    seqnos: list[int] = [capacity, capacity + 1]
    conn_ids: list[int] = [first_conn_id(1), first_conn_id(STREAM_MAX), first_conn_id(layer._stream)]
    recv = layer.recv_entries.get(src)
    if recv is not None:
        w = recv.window
        seqnos += [w.highest_delivered, w.highest_received, w.highest_delivered + capacity, *sorted(w.buffered)[:3]]
        stream = recv.conn_id >> GEN_BITS
        conn_ids += [*recv.lineage, next_generation(recv.conn_id), first_conn_id((stream + 1) & STREAM_MAX),
                     first_conn_id((stream - 1) & STREAM_MAX), first_conn_id((stream + (1 << 19)) & STREAM_MAX)]
    send = layer.send_entries.get(src)
    if send is not None:
        seqnos += [send.window.low, send.window.highest_sent]
        conn_ids += [*send.conn_ids, next_generation(send.conn_id)]

    def payload(sender: str, values: dict[str, Any]) -> st.SearchStrategy[bytes]:
        tag = values.get("conn_id", 0) >> GEN_BITS  # the stream: unicast3's windows follow one stream
        return st.just(payload_for(sender, tag, values.get("seqno", 0)))

    return Edges(src=src, names=NAMES, seqnos=tuple(seqnos), conn_ids=tuple(conn_ids), payload=payload)


def unicast_driver(variant: str, ordered: bool) -> Driver:
    layer = make_unicast(variant, LOCAL, CONFIG, MEMBERS)
    return Driver(LayerTarget(layer), LOCAL, MEMBERS, NAMES, effect_bound=effect_bound,
                  bounds=None if ordered else bounds,
                  ordered_kinds=("unicast",) if ordered else (),
                  epoch_of=lambda kind, src: layer.recv_entries.get(src), check_memory=not ordered,
                  request_errors=(UsageError, WindowFull))


STEP_KINDS = ["msg"] * 8 + ["advance"] * 3 + ["send", "send", "close", "remove", "remove_receive", "sync", "view",
                                                "restart", "stale_timer"]


def step(data: st.DataObject, driver: Driver, ordered: bool, sources: tuple[str, ...] = NAMES) -> None:
    """One event of a hostile history."""
    layer = driver.target.layer
    kind = data.draw(st.sampled_from(STEP_KINDS))
    if kind == "msg":
        src = data.draw(st.sampled_from(sources))
        cls = data.draw(st.sampled_from(layer.MESSAGES))
        driver.receive(src, draw_message(data, cls, edges_for(layer, src, ordered)))
    elif kind == "send":
        to = data.draw(st.sampled_from(NAMES))
        driver.request("send", {"to": to, "payload": payload_for(LOCAL, 0, driver.steps)})
    elif kind in ("close", "remove", "remove_receive", "sync"):
        driver.request(kind, {"peer": data.draw(st.sampled_from(NAMES))})
    else:
        shared_step(data, driver, kind)


def run_history(data: st.DataObject, variant: str, ordered: bool, sources: tuple[str, ...] = NAMES) -> Driver:
    driver = unicast_driver(variant, ordered)
    return run_steps(data, driver, STEPS, lambda: step(data, driver, ordered, sources))


@settings(max_examples=EXAMPLES, **HOSTILE_SETTINGS)
@given(data=st.data())
def test_unicast3_survives_hostile_messages_within_bounds(data: st.DataObject) -> None:
    run_history(data, "unicast3", ordered=False)


@settings(max_examples=EXAMPLES, **HOSTILE_SETTINGS)
@given(data=st.data())
def test_unicast3_delivers_exactly_once_in_order_per_connection_whatever_arrives(data: st.DataObject) -> None:
    run_history(data, "unicast3", ordered=True)


@settings(max_examples=EXAMPLES // 2, **HOSTILE_SETTINGS)
@given(data=st.data())
def test_unicast3_keeps_no_state_for_strangers(data: st.DataObject) -> None:
    """Every message type from names outside the membership only (the bound is easier to reach than among the
    mixed sources above): at most TRACKED_STRANGERS_MAX of them may leave state behind."""
    run_history(data, "unicast3", ordered=False, sources=STRANGERS)


@settings(max_examples=EXAMPLES // 2, **HOSTILE_SETTINGS)
@given(data=st.data())
def test_unicast2_survives_hostile_messages_within_bounds(data: st.DataObject) -> None:
    run_history(data, "unicast2", ordered=False)


@settings(max_examples=EXAMPLES // 2, **HOSTILE_SETTINGS)
@given(data=st.data())
def test_unicast1_survives_hostile_messages_within_bounds(data: st.DataObject) -> None:
    run_history(data, "unicast1", ordered=False)


def test_every_variant_claims_the_messages_the_strategies_cover() -> None:
    """The strategies build every type each variant claims (a new message type needs a field rule)."""
    for variant in VARIANTS:
        layer = make_unicast(variant, LOCAL, CONFIG, MEMBERS)
        for cls in layer.MESSAGES:
            msg = any_value(message_strategy(cls, edges_for(layer, "n2", False)))
            assert type(msg) is cls
