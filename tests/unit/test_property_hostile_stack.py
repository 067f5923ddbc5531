"""Hostile input against a whole node `Stack` as `node.__main__.build_stack` assembles it -- liveness, ping,
unicast3, membership (gms) and multicast (nakack4, tipc) -- fed arbitrary decoded messages of every type the stack
routes, from members, from the node itself and from strangers, with fields drawn around each layer's own state
(the per-layer strategies of test_property_hostile_*), interleaved with time advancing (every layer's timers
fire; views the membership layer installs reach every layer), unicast and multicast sends, pings, views and
PeerRestarted events.

Properties (see test_property_harness): (a) nothing raises (UsageError / WindowFull of a request excepted); (b)
bounded work and effects per event, effects the runtime can carry out, each layer's memory bounds, state kept
for at most TRACKED_STRANGERS_MAX non-members in any layer, views installed only of configured members; (c)
unicast (unicast3) and multicast (nakack4) deliveries exactly once and in order per sender and per connection
epoch (receive entry / window), across layers.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import test_property_hostile_group as group
import test_property_hostile_multicast as mcast
import test_property_hostile_unicast as ucast
from hypothesis import given, settings
from hypothesis import strategies as st
from test_property_harness import (HOSTILE_SETTINGS, Driver, StackTarget, advance_steps, any_value, draw_message,
                                   hostile_examples, message_strategy, payload_for, run_driver)

from node.errors import UsageError, WindowFull
from node.liveness import Liveness
from node.membership import Membership
from node.multicast import Nakack4
from node.ping import PingWorkload
from node.stack import Stack
from node.unicast import make_unicast
from node.wire import Heartbeat

LOCAL = group.LOCAL
MEMBERS = group.MEMBERS
NAMES = group.NAMES
EXAMPLES = hostile_examples(120)
STEPS = 40


def node_stack() -> Stack:
    """The layers of a node with every layer on (build_stack's order), with the small test configurations."""
    liveness = Liveness(LOCAL, list(MEMBERS), heartbeat_ms=250, silence_ms=1_000)
    return Stack({
        "liveness": liveness,
        "ping": PingWorkload(LOCAL, list(MEMBERS)),
        "unicast": make_unicast("unicast3", LOCAL, ucast.CONFIG, MEMBERS),
        "membership": Membership(LOCAL, MEMBERS, group.CONFIG, liveness),
        "multicast": Nakack4(LOCAL, mcast.CONFIG, MEMBERS, "tipc"),
    })


def shim(driver: Driver, name: str) -> Any:
    """`driver` as the single-layer tests see it, for the layer `name` of the stack."""
    return SimpleNamespace(target=SimpleNamespace(layer=driver.target.layers[name]), lives=driver.lives,
                           installed=driver.installed)


def effect_bound(driver: Driver) -> int:
    """Each layer's bound, twice: an event may install a view, which every layer then reacts to."""
    per_layer = (ucast.effect_bound(shim(driver, "unicast")) + mcast.effect_bound(shim(driver, "multicast"))
                 + group.effect_bound(driver))
    return 2 * per_layer


def bounds(driver: Driver) -> None:
    ucast.bounds(shim(driver, "unicast"))
    mcast.bounds(shim(driver, "multicast"))
    group.bounds(driver)


def epoch_of(driver_box: list[Driver]) -> Any:
    def of(kind: str, src: str) -> Any:
        layers = driver_box[0].target.layers
        if kind == "unicast":
            return layers["unicast"].recv_entries.get(src)
        return layers["multicast"].windows.get(src)
    return of


def edges_for(driver: Driver, layer: str, src: str) -> Any:
    if layer == "unicast":
        return ucast.edges_for(driver.target.layers["unicast"], src, False)
    if layer == "multicast":
        return mcast.edges_for(shim(driver, "multicast"), src)
    return group.edges_for(driver, src)


STEP_KINDS = (["msg"] * 10 + ["heartbeat"] * 3 + ["advance"] * 4 + ["usend", "usend", "msend", "msend", "uadmin",
                                                                      "ping", "view", "restart"])


def step(data: st.DataObject, driver: Driver) -> None:
    """One event of a hostile history."""
    stack = driver.target.stack
    kind = data.draw(st.sampled_from(STEP_KINDS))
    if kind == "msg":
        src = data.draw(st.sampled_from(NAMES))
        cls = data.draw(st.sampled_from(sorted(stack._by_message, key=lambda c: c.TYPE)))
        driver.receive(src, draw_message(data, cls, edges_for(driver, stack._by_message[cls], src)))
    elif kind == "heartbeat":
        driver.receive(data.draw(st.sampled_from(MEMBERS)), Heartbeat(driver.steps))
    elif kind == "advance":
        driver.advance(data.draw(advance_steps()))
    elif kind == "usend":
        driver.request("send", {"to": data.draw(st.sampled_from(MEMBERS)),
                                "payload": payload_for(LOCAL, 0, driver.steps)}, layer="unicast")
    elif kind == "msend":
        driver.request("send", {"payload": payload_for(LOCAL, 0, driver.steps)}, layer="multicast")
    elif kind == "uadmin":
        op = data.draw(st.sampled_from(["close", "remove", "remove_receive", "sync"]))
        driver.request(op, {"peer": data.draw(st.sampled_from(NAMES))}, layer="unicast")
    elif kind == "ping":
        driver.request("ping", {"to": data.draw(st.sampled_from(MEMBERS)), "count": 2, "interval_ms": 10},
                       layer="ping")
    elif kind == "view":
        others = data.draw(st.lists(st.sampled_from(MEMBERS), unique=True, max_size=4))
        driver.view(tuple(dict.fromkeys((*others, LOCAL))), n=data.draw(st.integers(1, 3)))
    elif kind == "restart":
        driver.restarted(data.draw(st.sampled_from(NAMES)))


def run_history(data: st.DataObject, ordered: bool) -> None:
    box: list[Driver] = []
    driver = Driver(StackTarget(node_stack()), LOCAL, MEMBERS, NAMES, effect_bound=effect_bound,
                    bounds=None if ordered else bounds, ordered_kinds=("unicast", "multicast") if ordered else (),
                    epoch_of=epoch_of(box), check_memory=not ordered, request_errors=(UsageError, WindowFull))
    box.append(driver)

    def body() -> None:
        driver.start()
        for _ in range(data.draw(st.integers(1, STEPS))):
            step(data, driver)

    run_driver(body)


@settings(max_examples=EXAMPLES, **HOSTILE_SETTINGS)
@given(data=st.data())
def test_a_node_stack_survives_hostile_messages_within_bounds(data: st.DataObject) -> None:
    run_history(data, ordered=False)


@settings(max_examples=EXAMPLES, **HOSTILE_SETTINGS)
@given(data=st.data())
def test_a_node_stack_delivers_exactly_once_in_order_whatever_arrives(data: st.DataObject) -> None:
    run_history(data, ordered=True)


def test_the_stack_routes_every_registered_message_and_the_strategies_build_them() -> None:

    from node.wire import message_types
    stack = node_stack()
    assert set(stack._by_message) == set(message_types().values())
    driver = Driver(StackTarget(stack), LOCAL, MEMBERS, NAMES, effect_bound=effect_bound)
    for cls, layer in stack._by_message.items():
        assert type(any_value(message_strategy(cls, edges_for(driver, layer, "n1")))) is cls
