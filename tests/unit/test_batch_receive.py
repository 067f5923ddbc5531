"""A datagram's messages reach the stack together (`Stack.received_batch`, called by the driver once per
datagram): a layer with `handle_batch` (unicast, NAKACK4) takes a run of them in one call, any other layer one
by one, and either way the effects are those of feeding the same messages one at a time. The property test
feeds twin stacks the same random datagrams (duplicates, gaps, reordering, acks that unblock a full window) and
compares them datagram by datagram; the receive window's in-order shortcut (`ReceiveWindow.take`) is checked
against `add` then `drain`."""
from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.config import from_env
from node.core import Emit, InstallView, Protocol, Send, SetTimer, make_payload
from node.errors import WindowFull
from node.layers import build_stack
from node.stack import Stack
from node.unicast.window import NEW, ReceiveWindow
from node.wire import Heartbeat, Nakack4Msg, Ping, Pong, UnicastAck, UnicastData


class Batcher(Protocol):
    """Claims Ping; answers each with a Pong, and logs how it was fed."""

    MESSAGES = (Ping,)

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[int]]] = []

    def on_received(self, now_s: float, src: str, msg: Any) -> list:
        self.calls.append(("one", [msg.ping_id]))
        return [Send(src, Pong(msg.ping_id))]

    def handle_batch(self, now_s: float, src: str, msgs: list[Any]) -> list:
        self.calls.append(("batch", [m.ping_id for m in msgs]))
        return [Send(src, Pong(m.ping_id)) for m in msgs]


class Installer(Protocol):
    """Claims Pong (no `handle_batch`): each Pong installs a view named after it; logs the views it saw when a
    Pong arrived."""

    MESSAGES = (Pong,)

    def __init__(self) -> None:
        self.view_n = 0
        self.seen: list[tuple[int, int]] = []

    def on_received(self, now_s: float, src: str, msg: Any) -> list:
        self.seen.append((msg.ping_id, self.view_n))
        return [InstallView(("a", msg.ping_id), ("a", "b"))]

    def on_view(self, now_s: float, view_id: tuple[str, int], members: tuple[str, ...]) -> list:
        self.view_n = view_id[1]
        return []


def test_a_run_of_messages_goes_to_a_batch_layer_in_one_call_and_unclaimed_ones_are_counted() -> None:
    batcher = Batcher()
    stack = Stack({"b": batcher, "i": Installer()})
    msgs = [Ping(1), Ping(2), Ping(3), Heartbeat(9), Ping(4), Pong(7), Ping(5), Ping(6)]
    effects, unclaimed = stack.received_batch(0.0, "a", msgs)
    assert unclaimed == 1  # the Heartbeat: no layer of this stack claims it
    assert batcher.calls == [("batch", [1, 2, 3, 4]), ("batch", [5, 6])]  # the unclaimed one does not split a run
    pongs = [e.msg.ping_id for e in effects if type(e) is Send]
    assert pongs == [1, 2, 3, 4, 5, 6]
    assert [e.view_id for e in effects if type(e) is InstallView] == [("a", 7)]


def test_a_layer_without_handle_batch_sees_each_message_after_the_view_the_one_before_installed() -> None:
    installer = Installer()
    stack = Stack({"b": Batcher(), "i": installer})
    stack.received_batch(0.0, "a", [Pong(3), Pong(5), Pong(8)])
    assert installer.seen == [(3, 0), (5, 3), (8, 5)]


# --- twin stacks, fed one message at a time and one datagram at a time -------------------------------------------
PEER, LOCAL = "n1", "n2"
CONN_ID = 4097
SENT = 6  # messages the local node sends to PEER first: a window of 4 fills, acks in the datagrams unblock it


def _stack() -> Stack:
    env = {"SPLITLAB_NODE": LOCAL, "SPLITLAB_RUN": "r", "SPLITLAB_MEMBERS": f"{PEER},{LOCAL}", "SPLITLAB_TOKEN": "t",
           "SPLITLAB_RUN_DIR": "/nonexistent", "SPLITLAB_MEMBERSHIP": "none", "SPLITLAB_UNICAST_WINDOW_CAPACITY": "4",
           "SPLITLAB_UNICAST_ACK_THRESHOLD": "3", "SPLITLAB_UNICAST_CONN_ID_START": "8192"}
    stack = build_stack(from_env(env))
    stack.start(0.0)
    stack.view(0.0, (PEER, 1), (PEER, LOCAL))
    for n in range(SENT):
        try:
            stack.request(0.0, "unicast", "send", {"to": PEER, "payload": make_payload(f"{LOCAL}.1.{n}", 20)})
        except WindowFull:  # the window of 4 is full; the acks in the datagrams make room
            break
    return stack


def _datagrams(rng: random.Random) -> list[list[Any]]:
    """Random DATA (seqnos 1..24: gaps, duplicates, reordering), NAKACK4 messages and cumulative acks of what
    the local node sent, cut into datagrams of 1 to 6 messages."""
    msgs: list[Any] = []
    if rng.random() < 0.8:  # mostly the stream's first message first: a connection that then delivers
        msgs.append(UnicastData(1, CONN_ID, True, make_payload(f"{PEER}.1.1", 20)))
    for _ in range(rng.randint(1, 40)):
        kind = rng.random()
        if kind < 0.6:
            seqno = rng.randint(1, 24)
            msgs.append(UnicastData(seqno, CONN_ID, seqno == 1, make_payload(f"{PEER}.1.{seqno}", 20)))
        elif kind < 0.85:
            seqno = rng.randint(1, 24)
            msgs.append(Nakack4Msg(seqno, make_payload(f"{PEER}.m.{seqno}", 20)))
        else:
            msgs.append(("ack", rng.randint(0, SENT)))  # made into an ack on the twin's own connection id
    out = []
    while msgs:
        size = rng.randint(1, 6)
        out.append(msgs[:size])
        msgs = msgs[size:]
    return out


def _bookkeeping(effect: Any) -> bool:
    """Effects that `handle_batch` may emit once after its batch instead of after the message that caused them."""
    return type(effect) is SetTimer or (type(effect) is Emit and effect.type == "window_unblocked")


def _what_counts(effect: Any) -> str:
    """A bookkeeping effect without what it reports of the state after the batch (a window's `low`)."""
    if type(effect) is Emit:
        return repr({k: v for k, v in effect.fields.items() if k != "low"})
    return repr(effect)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_a_datagram_at_once_gives_what_its_messages_one_at_a_time_give(seed: int) -> None:
    rng = random.Random(seed)
    one, whole = _stack(), _stack()
    send_conn = one.layers["unicast"].send_entries[PEER].conn_id
    for index, datagram in enumerate(_datagrams(rng)):
        now_s = 0.01 * (index + 1)
        msgs = [UnicastAck(m[1], send_conn, index) if type(m) is tuple else m for m in datagram]
        singly: list[Any] = []
        for msg in msgs:
            singly += one.received(now_s, PEER, msg)
        batched, unclaimed = whole.received_batch(now_s, PEER, msgs)
        assert unclaimed == 0
        why = f"datagram {index} {msgs!r} (seed {seed})"
        assert [e for e in batched if not _bookkeeping(e)] == [e for e in singly if not _bookkeeping(e)], why
        assert sorted(map(_what_counts, filter(_bookkeeping, batched))) == \
            sorted(map(_what_counts, filter(_bookkeeping, singly))), why
    for name in ("unicast", "multicast"):
        assert whole.layers[name].state(1.0) == one.layers[name].state(1.0), f"{name} state (seed {seed})"


@given(st.lists(st.integers(1, 30), max_size=60), st.integers(1, 12))
def test_the_in_order_shortcut_of_take_is_add_then_drain(seqnos: list[int], capacity: int) -> None:
    shortcut, plain = ReceiveWindow(capacity), ReceiveWindow(capacity)
    for seqno in seqnos:
        payload = b"%d" % seqno
        result = plain.add(seqno, payload)
        ready = plain.drain() if result == NEW else []
        assert shortcut.take(seqno, payload) == (result, ready)
        assert (shortcut.highest_delivered, shortcut.highest_received, shortcut.buffered) == \
            (plain.highest_delivered, plain.highest_received, plain.buffered)
