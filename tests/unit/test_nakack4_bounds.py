"""Bounded work per datagram in NAKACK4 (node/multicast/bounds.py): a forged datagram with absurd seqnos, counts
or flags is dropped, counted by reason and emitted, and no single message costs more than O(capacity) ring
operations or leaves state behind for a sender outside the view.

Each case injects one forged message into a quiet member whose ring operations are counted (`ring_budget`): a
handler that walked the seqno distance instead of the ring (the old `skip_to` with `BcastState(low_seqno=2**64-1)`
looped for good) exceeds the budget at once and fails the test instead of hanging it.
"""
from __future__ import annotations

import pytest

from node.core import make_payload
from node.multicast import Nakack4Config
from node.multicast.bounds import SEQNO_MAX
from node.multicast.ring import ReceiveWindow, Ring
from node.multicast.sim import multicast, multicast_sim, nak
from node.wire import BcastState, BcastStateReq, Nakack4Ack, Nakack4Highest, Nakack4Msg, Nakack4XmitReq

CAPACITY = 8
CONFIG = Nakack4Config(capacity=CAPACITY, ack_threshold=1, retain_departed_ms=500, sync_interval_ms=200)
GROUP = ("a", "b")
BIG = 2**64 - 1


class BudgetExceeded(AssertionError):
    pass


@pytest.fixture
def ring_budget(monkeypatch):
    """Count Ring operations while `budget.armed`; more than `budget.limit` raises at once."""

    class Budget:
        armed = False
        limit = 0
        used = 0

    budget = Budget()

    def counted(name):
        original = getattr(Ring, name)

        def wrapper(self, *args):
            if budget.armed:
                budget.used += 1
                if budget.used > budget.limit:
                    raise BudgetExceeded(f"more than {budget.limit} ring operations for one message")
            return original(self, *args)
        monkeypatch.setattr(Ring, name, wrapper)

    for name in ("put", "get", "has", "pop"):
        counted(name)
    return budget


def quiet_pair(seed: int):
    """a and b in one view (x: a cluster node outside it); a has sent and b delivered 1..5, all acked."""
    sim = multicast_sim(GROUP + ("x",), seed=seed, config=CONFIG, with_membership=False,
                        initial={"a": GROUP, "b": GROUP, "x": ("x",)})
    for n in range(1, 6):
        multicast(sim, "a", make_payload(f"a.m.{n}", 16))
    assert sim.run_until_quiet(5.0), sim.repro()
    assert nak(sim, "b").windows["a"].window.low == 5 and nak(sim, "a").send.low == 5
    return sim


def inject_counted(sim, budget, src: str, dst: str, msg, limit: int = 4 * CAPACITY) -> None:
    """Deliver one forged message with the ring budget armed."""
    budget.used, budget.limit, budget.armed = 0, limit, True
    try:
        sim.inject(src, dst, msg)
        sim.run_for(0.001)
    finally:
        budget.armed = False


@pytest.mark.parametrize("msg, reason", [
    (BcastState(5, BIG, 1), "low_above_next"),             # the freeze of the issue: skip_to(2**64-2)
    (BcastState(BIG, BIG, 1), "absurd_seqno"),
    (BcastState(2**63, 6, 1), "absurd_seqno"),
    (BcastState(0, 0, 1), "zero_seqno"),
    (BcastState(9, 10, 1), "low_above_next"),
])
def test_an_absurd_bcast_state_is_dropped_counted_and_emitted(ring_budget, msg, reason: str) -> None:
    sim = quiet_pair(1)
    inject_counted(sim, ring_budget, "a", "b", msg)
    window = nak(sim, "b").windows["a"].window
    assert (window.low, window.high) == (5, 5), sim.repro()
    assert nak(sim, "b").counters[f"states_{reason}"] == 1
    assert nak(sim, "b").state(sim.now_s)["counters"][f"states_{reason}"] == 1   # shown in /state
    [event] = sim.emitted("bcast_state_rx", node="b", action="discarded")
    assert event["reason"] == reason and str(msg.low_seqno) in event["detail"]
    assert not sim.emitted("ack_tx", node="b", to="a")[5:], "an absurd state is not acknowledged"


def test_a_far_skip_costs_one_ring_walk_not_the_seqno_distance(ring_budget) -> None:
    """A state far ahead cannot be told from a long absence: taken, in O(capacity)."""
    sim = quiet_pair(2)
    inject_counted(sim, ring_budget, "a", "b", BcastState(2**62, 2**62, 1))
    window = nak(sim, "b").windows["a"].window
    assert window.low == 2**62 - 1 and window.high == 2**62 - 1
    assert ring_budget.used <= 2 * CAPACITY + 2, ring_budget.used
    [skip] = sim.emitted("bcast_skip", node="b")
    assert skip["lost"] == 2**62 - 1 - 5


def test_skip_to_holds_what_it_had_and_walks_only_the_ring(ring_budget) -> None:
    window = ReceiveWindow(CAPACITY, low=10)
    for seqno in (12, 14, 18):
        window.add(seqno, f"m{seqno}".encode())
    ring_budget.limit, ring_budget.armed = CAPACITY, True
    held, lost = window.skip_to(10 + 10**15)
    ring_budget.armed = False
    assert held == [(12, b"m12"), (14, b"m14"), (18, b"m18")] and lost == 10**15 - 3
    assert (window.low, window.high, window.buffered) == (10 + 10**15, 10 + 10**15, 0)
    assert window.skip_to(5) == ([], 0) and window.low == 10 + 10**15  # a skip never moves a window down


def test_rewind_to_reopens_a_skip_walking_only_the_ring(ring_budget) -> None:
    """Taking back a far skip (nakack4.py, "Skips the sender contradicts") costs O(capacity) too; held messages
    that fit the lower window stay, the others go (they are asked for again), and high is the highest held."""
    window = ReceiveWindow(CAPACITY, low=10)
    window.skip_to(10**15)
    for seqno in (10**15 + 1, 10**15 + 3):
        window.add(seqno, f"m{seqno}".encode())
    ring_budget.limit, ring_budget.armed = 3 * CAPACITY, True
    assert window.rewind_to(10) == 10**15 - 10
    ring_budget.armed = False
    assert (window.low, window.high, window.buffered) == (10, 10, 0) and not window.missing(CAPACITY)
    near = ReceiveWindow(CAPACITY, low=10)
    near.skip_to(14)
    for seqno in (16, 20, 22):
        near.add(seqno, f"m{seqno}".encode())
    assert near.rewind_to(12) == 2 and (near.low, near.high, near.buffered) == (12, 20, 2)   # 22 > 12 + 8: gone
    assert near.add(13, b"m13") == "new" and near.add(14, b"m14") == "new" and near.add(15, b"m15") == "new"
    assert [s for s, _ in near.drain()] == [13, 14, 15, 16] and near.rewind_to(20) == 0   # never up


def test_an_xmit_req_for_seqnos_never_sent_is_discarded_whole(ring_budget) -> None:
    sim = quiet_pair(3)
    inject_counted(sim, ring_budget, "b", "a", Nakack4XmitReq("a", (6, BIG)))  # a sent 1..5: never by this life
    assert not sim.emitted("data_tx", node="a", resend=True), "nothing is resent for a forged request"
    [event] = sim.emitted("xmit_req_rx", node="a")
    assert event["action"] == "discarded" and event["reason"] == "above_sent"
    assert all(s <= SEQNO_MAX for s in event["seqnos"])      # the history stays within Spark's long
    assert nak(sim, "a").counters["xmit_reqs_above_sent"] == 1


@pytest.mark.parametrize("seqnos, reason", [((3, BIG), "above_sent"), ((0, 3), "zero_seqno")])
def test_an_xmit_req_serves_what_was_sent_and_ignores_seqnos_never_sent(ring_budget, seqnos, reason: str) -> None:
    """A window whose high a forged HIGHEST raised asks for real seqnos and for ones never sent in one request:
    the real ones are looked up and served (here no longer held: the requester is sent a's state), the window
    does not wait behind the others; those are ignored and counted."""
    sim = quiet_pair(3)
    inject_counted(sim, ring_budget, "b", "a", Nakack4XmitReq("a", seqnos))
    [event] = sim.emitted("xmit_req_rx", node="a")
    assert "action" not in event and event["seqnos"] == [3] and event["found"] + event["missing"] == [3]
    assert (event["ignored"], event["reason"]) == (1, reason)
    assert nak(sim, "a").counters[f"xmit_reqs_{reason}"] == 1


def test_an_xmit_req_is_served_for_at_most_a_capacity_of_seqnos(ring_budget) -> None:
    sim = quiet_pair(4)
    big = Nakack4XmitReq("a", tuple([1, 2, 3, 4, 5] * 1600))   # 8000 seqnos, all sent and (still) held
    nak(sim, "a").send.release(0)
    inject_counted(sim, ring_budget, "b", "a", big)
    resent = sim.emitted("data_tx", node="a", resend=True)
    assert len(resent) <= CAPACITY, len(resent)
    [event] = sim.emitted("xmit_req_rx", node="a")
    assert len(event["seqnos"]) == CAPACITY and event["over_limit"] == 8000 - CAPACITY
    assert nak(sim, "a").counters["xmit_seqnos_over_limit"] == 8000 - CAPACITY


def test_an_xmit_req_naming_another_sender_is_discarded_and_emitted(ring_budget) -> None:
    sim = quiet_pair(5)
    inject_counted(sim, ring_budget, "b", "a", Nakack4XmitReq("b", (1, 2)))
    [event] = sim.emitted("xmit_req_rx", node="a")
    assert event["action"] == "discarded" and event["reason"] == "not_original_sender"
    assert nak(sim, "a").counters["xmit_reqs_for_others"] == 1


def test_highest_seqno_far_ahead_raises_the_window_by_a_capacity_at_most(ring_budget) -> None:
    sim = quiet_pair(6)
    inject_counted(sim, ring_budget, "a", "b", Nakack4Highest(2**40))
    window = nak(sim, "b").windows["a"].window
    assert window.high == 5 + CAPACITY
    inject_counted(sim, ring_budget, "a", "b", Nakack4Highest(BIG))
    [event] = sim.emitted("msg_dropped", node="b")
    assert (event["msg"], event["reason"]) == ("Nakack4Highest", "absurd_seqno")
    assert nak(sim, "b").counters["highest_absurd_seqno"] == 1
    # the retransmit task then asks for a capacity of seqnos at most, in O(capacity)
    ring_budget.used, ring_budget.limit, ring_budget.armed = 0, 4 * CAPACITY, True
    sim.run_for(0.35)
    ring_budget.armed = False
    asked = [s for e in sim.emitted("xmit_req_tx", node="b") for s in e["seqnos"]]
    assert asked and max(asked) <= 5 + CAPACITY


def test_an_ack_above_what_was_sent_is_discarded_with_its_reason_and_a_readable_seqno(ring_budget) -> None:
    sim = quiet_pair(7)
    inject_counted(sim, ring_budget, "b", "a", Nakack4Ack(BIG, 1))
    [event] = [e for e in sim.emitted("ack_rx", node="a") if e["action"] == "discarded"]
    assert event["reason"] == "above_sent" and event["seqno"] == SEQNO_MAX and str(BIG) in event["detail"]
    assert nak(sim, "a").acks["b"] == 5 and nak(sim, "a").counters["acks_above_sent"] == 1


def test_a_message_far_outside_the_window_costs_nothing(ring_budget) -> None:
    sim = quiet_pair(8)
    inject_counted(sim, ring_budget, "a", "b", Nakack4Msg(BIG, b"far"), limit=2)
    assert [e["action"] for e in sim.emitted("data_rx", node="b")][-1] == "outside_window"
    assert sim.emitted("data_rx", node="b")[-1]["seqno"] == SEQNO_MAX


def test_nothing_grows_for_a_node_never_in_the_view() -> None:
    """x is a node of the cluster but never in a's and b's view: its flags are not recorded, its state request
    is ignored (counted) and its BcastState is dropped (counted, emitted): b keeps no state for x at all."""
    sim = quiet_pair(9)
    sim.inject("x", "b", Nakack4Ack(0, 0))                      # flags without the capability bit
    sim.inject("x", "b", BcastStateReq(0))
    sim.inject("x", "b", BcastState(40, 30, 1))
    sim.inject("x", "b", Nakack4Msg(35, b"from a stranger"))
    sim.run_for(0.5)
    layer = nak(sim, "b")
    assert "x" not in layer.sync.legacy_peers and "x" not in layer.windows and "x" not in layer.delivered_up_to
    assert layer.counters["state_reqs_ignored"] == 1 and not sim.emitted("bcast_state_tx", node="b", peer="x")
    [event] = sim.emitted("bcast_state_rx", node="b", peer="x")
    assert event["action"] == "discarded" and event["reason"] == "not_member"
    assert layer.counters["states_not_member"] == 1 and layer.counters["no_window"] == 1
    assert "x" not in str(layer.state(sim.now_s)["windows"])


def test_a_window_opened_for_a_former_member_outside_the_view_asks_for_nothing_and_expires() -> None:
    """b's view drops a; a's BcastState (a still holds b) opens nothing new but b's kept window asks for nothing
    and goes after retain_departed_ms; b still remembers how far it delivered."""
    sim = quiet_pair(10)
    sim.install_view("b", ("b",), ("b", 9))
    sim.inject("a", "b", Nakack4Msg(7, b"gap below"))          # 6 missing: a kept window does not ask
    sim.run_for(0.4)
    assert not nak(sim, "b").windows["a"].active and not sim.emitted("xmit_req_tx", node="b", to="a")
    sim.run_for(0.2)
    assert "a" not in nak(sim, "b").windows and nak(sim, "b").delivered_up_to["a"] == 5
    sim.inject("a", "b", BcastState(8, 3, 1 | 5 << 1))        # a former member: opens a kept window, not below 5
    sim.run_for(0.01)
    entry = nak(sim, "b").windows["a"]
    assert not entry.active and entry.window.low == 5
    sim.run_for(0.6)
    assert "a" not in nak(sim, "b").windows and nak(sim, "b").counters["windows_expired"] == 2


def test_a_flood_of_xmit_reqs_in_a_members_name_resends_each_seqno_once_per_xmit_interval() -> None:
    """A receiver asks for a seqno at most once per retransmit run; anyone can send an XMIT_REQ in its name, and
    the resends go to it. A seqno resent to a member in answer to a request less than an xmit_interval ago is not
    resent again (`xmit_repeats_ignored`, the event's `repeats`): 1,000 requests for 5 held messages in one second
    cost a few resends of each, not 5,000."""
    sim = multicast_sim(GROUP, seed=5, config=CONFIG, with_membership=False)
    sim.partition("b", "a")  # b's acks lost: a holds what it sent
    for n in range(1, 6):
        multicast(sim, "a", make_payload(f"a.m.{n}", 16))
    sim.run_for(0.01)
    requests, flood_s = 1_000, 1.0
    for i in range(requests):
        sim.inject("b", "a", Nakack4XmitReq("a", (1, 2, 3, 4, 5)), delay_s=i * flood_s / requests)
    sim.run_for(flood_s)
    resends = len(sim.emitted("data_tx", node="a", resend=True))
    most = 5 * (flood_s * 1000 / CONFIG.xmit_interval_ms + 1)
    assert 5 <= resends <= most, f"{resends} resends for {requests} requests of 5 seqnos, at most {most}"
    answered = sim.emitted("xmit_req_rx", node="a")
    assert len(answered) == requests and all(e["seqnos"] == [1, 2, 3, 4, 5] for e in answered)
    assert nak(sim, "a").counters["xmit_repeats_ignored"] == 5 * requests - resends
