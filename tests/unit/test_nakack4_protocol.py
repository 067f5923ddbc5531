"""NAKACK4 in the simulator, the cases of protocols.md: a full window blocks the sender; a view change that
excludes a dead member unblocks it and the others get exactly 1..N in order; closing a blocked sender wakes it;
with ACKs dropped senders block and everyone still gets everything; a spurious ACK from a non-member cannot
block or unblock anyone; receivers drop seqnos beyond their capacity (and count them); HIGHEST_SEQNO recovers
a lost tail; XMIT_REQ fills gaps."""
from __future__ import annotations

import pytest

from node.core import make_payload
from node.multicast import Nakack4, Nakack4Config, SenderClosed, WindowFull
from node.multicast.sim import AppSender, all_delivered, multicast, multicast_sim, nak
from node.wire import Nakack4Ack, Nakack4Msg

SMALL = Nakack4Config(capacity=8, ack_threshold=2)


def ids(n: int, member: str = "a", tag: str = "m") -> list[bytes]:
    return [make_payload(f"{member}.{tag}.{i}", 16) for i in range(1, n + 1)]


def test_a_full_window_blocks_the_sender_and_emits_window_full() -> None:
    sim = multicast_sim(("a", "b", "c"), seed=1, config=SMALL, with_membership=False)
    sim.partition("a", "c")                       # c hears nothing from a, so it never acks
    for payload in ids(8):
        multicast(sim, "a", payload)
    assert nak(sim, "a").blocked
    with pytest.raises(WindowFull) as refused:
        multicast(sim, "a", make_payload("a.m.9", 16))
    assert refused.value.next_seqno == 9 and refused.value.capacity == 8
    full = sim.emitted("window_full", node="a")
    assert len(full) == 1 and full[0]["seqno"] == 8
    sim.run_for(2.0)
    assert nak(sim, "a").blocked and nak(sim, "a").send.low == 0
    assert sim.delivered("b", "a") == ids(8)
    state = nak(sim, "a").state(sim.now_s)["send"]
    assert state["blocked"] and state["blocked_for_ms"] == 2000 and state["acks"] == {"b": 8, "c": 0}


def test_excluding_a_dead_member_unblocks_the_sender_and_the_others_get_1_to_n_in_order() -> None:
    sim = multicast_sim(("a", "b", "c"), seed=2, config=SMALL)   # with membership: views from suspicion
    sim.run_for(0.5)
    sim.partition_both("a", "c")
    sim.partition_both("b", "c")                  # c is dead to a and b
    sender = AppSender(sim, "a", 60, rate_per_s=200).start()
    assert sim.run_until_true(lambda: nak(sim, "a").blocked, 1.0), sim.repro()
    blocked_at = sim.now_s
    assert sim.run_until_true(lambda: sender.done and all_delivered(sim, [sender], ("b",)), 10.0), sim.repro()
    unblocked = sim.emitted("window_unblocked", node="a")
    assert unblocked and unblocked[0]["ts"] >= blocked_at + 1.0          # released by the view, after suspicion
    view = sim.emitted("view", node="a")[-1]
    assert view["members"] == ["a", "b"] and unblocked[0]["ts"] == view["ts"]
    assert unblocked[0]["blocked_ms"] >= 1000
    assert sim.delivered("b", "a") == ids(60), sim.repro()              # exactly 1..N, in order
    assert "c" not in nak(sim, "a").acks and "c" in nak(sim, "a").departed


def test_closing_a_blocked_sender_wakes_it_and_later_sends_fail_cleanly() -> None:
    sim = multicast_sim(("a", "b"), seed=3, config=SMALL, with_membership=False)
    sim.partition("a", "b")
    for payload in ids(8):
        multicast(sim, "a", payload)
    assert nak(sim, "a").blocked
    sim.run_for(0.3)
    sim.request("a", "multicast", "close")
    woke = sim.emitted("window_unblocked", node="a")
    assert len(woke) == 1 and woke[0]["closed"] is True and woke[0]["blocked_ms"] == pytest.approx(300)
    with pytest.raises(SenderClosed):
        multicast(sim, "a", make_payload("a.m.9", 16))


def test_with_acks_dropped_senders_block_and_everyone_still_gets_everything() -> None:
    sim = multicast_sim(("a", "b", "c"), seed=4, config=SMALL, with_membership=False)
    drop = sim.drop_matching(None, None, Nakack4Ack)
    senders = [AppSender(sim, m, 40, tag="t", rate_per_s=400).start() for m in ("a", "b", "c")]
    sim.run_for(1.0)
    assert all(nak(sim, m).blocked for m in ("a", "b", "c")), sim.repro()
    assert all(len(s.sent) == 8 for s in senders)                       # each stuck at capacity
    sim.remove_fault(drop)
    assert sim.run_until_true(lambda: all(s.done for s in senders)
                              and all_delivered(sim, senders, ("a", "b", "c")), 5.0), sim.repro()
    for s in senders:
        for r in ("a", "b", "c"):
            if r != s.member:
                assert sim.delivered(r, s.member) == ids(40, s.member, "t"), sim.repro()
    assert all(s.refused for s in senders)
    assert sim.run_until_quiet(5.0), sim.repro()
    assert not any(nak(sim, m).blocked for m in ("a", "b", "c"))


def test_a_spurious_ack_from_a_non_member_neither_blocks_nor_unblocks() -> None:
    group = ("a", "b", "c")  # x is a node of the cluster (its datagrams pass the gate) but never in their view
    sim = multicast_sim(group + ("x",), seed=5, config=SMALL, with_membership=False,
                        initial={"a": group, "b": group, "c": group, "x": ("x",)})
    sim.partition("a", "c")
    for payload in ids(8):
        multicast(sim, "a", payload)
    sim.run_for(0.3)
    assert nak(sim, "a").blocked
    sim.inject("x", "a", Nakack4Ack(8, 1))                              # "x" was never a member of the view
    sim.inject("x", "a", Nakack4Ack(2**40, 1))
    sim.run_for(0.3)
    assert nak(sim, "a").blocked and nak(sim, "a").send.low == 0
    assert [e["action"] for e in sim.emitted("ack_rx", node="a", **{"from": "x"})] == ["discarded", "discarded"]
    # an unblocked sender is not blocked by one either (an ACK above what was sent is discarded as well)
    sim.heal()
    assert sim.run_until_quiet(2.0)
    before = dict(nak(sim, "a").acks)
    assert before == {"b": 8, "c": 8} and not nak(sim, "a").blocked
    sim.inject("c", "a", Nakack4Ack(99, 1))
    sim.inject("x", "a", Nakack4Ack(0, 1))
    sim.run_for(0.3)
    assert nak(sim, "a").acks == before and not nak(sim, "a").blocked
    assert nak(sim, "a").counters["acks_from_non_members"] == 2    # x's ACK(8) and ACK(0)
    assert nak(sim, "a").counters["acks_above_sent"] == 2          # x's ACK(2**40) and c's ACK(99)


def test_receivers_drop_seqnos_beyond_their_capacity_and_count_them() -> None:
    big, small = Nakack4Config(capacity=64, ack_threshold=1), Nakack4Config(capacity=8, ack_threshold=1)
    sim = multicast_sim(("a", "b"), seed=6, configs={"a": big, "b": small}, with_membership=False)
    sim.drop_matching("a", "b", Nakack4Msg, where=lambda m: m.seqno == 1, count=1)
    for payload in ids(20):
        multicast(sim, "a", payload)
    sim.run_for(0.01)
    window = nak(sim, "b").windows["a"]
    assert window.counters["outside_window"] == 12                      # 9..20 are beyond low 0 + capacity 8
    assert window.window.low == 0 and window.window.buffered == 7
    assert [e["seqno"] for e in sim.emitted("data_rx", node="b", action="outside_window")] == list(range(9, 21))
    sim.inject("a", "b", Nakack4Msg(2**33, b"far"))                      # far beyond: dropped too
    assert sim.run_until_quiet(5.0), sim.repro()
    assert sim.delivered("b", "a") == ids(20)                           # all arrive once retransmitted
    assert window.counters["outside_window"] == 13


def test_highest_seqno_from_an_idle_sender_recovers_a_lost_tail() -> None:
    sim = multicast_sim(("a", "b"), seed=7, config=Nakack4Config(ack_threshold=1), with_membership=False)
    sim.drop_matching("a", "b", Nakack4Msg, where=lambda m: m.seqno >= 4)
    for payload in ids(6):
        multicast(sim, "a", payload)
    sim.run_for(0.05)
    assert sim.delivered("b", "a") == ids(3)
    assert sim.run_until_quiet(5.0), sim.repro()
    assert sim.delivered("b", "a") == ids(6)
    assert nak(sim, "a").counters["highest_sent"] >= 1
    asked = [s for e in sim.emitted("xmit_req_tx", node="b") for s in e["seqnos"]]
    assert sorted(set(asked)) == [4, 5, 6]


def test_xmit_req_fills_gaps_and_a_receiver_delivers_in_order() -> None:
    sim = multicast_sim(("a", "b", "c"), seed=8, with_membership=False)
    sim.drop_matching("a", "c", Nakack4Msg, where=lambda m: m.seqno % 3 == 0)
    for payload in ids(30):
        multicast(sim, "a", payload)
    assert sim.run_until_quiet(5.0), sim.repro()
    assert sim.delivered("c", "a") == ids(30) and sim.delivered("b", "a") == ids(30)
    rx = sim.emitted("xmit_req_rx", node="a")
    assert rx and all(not e["missing"] for e in rx)
    state = nak(sim, "c").state(sim.now_s)["windows"]["a"]
    assert (state["low"], state["highest_received"], state["missing"]) == (30, 30, 0)


def restart(sim, member: str, members=("a", "b", "c")) -> None:
    """`member`'s process restarts: a fresh NAKACK4 (seqnos from 1 again, windows from 0), a new incarnation."""
    sim.restart_member(member, {"multicast": Nakack4(member, Nakack4Config(), members, "tipc")})


def test_a_restarted_member_is_heard_again_and_hears_again() -> None:
    sim = multicast_sim(("a", "b", "c"), seed=9, with_membership=False)
    for payload in ids(20, "a"):
        multicast(sim, "a", payload)
    for payload in ids(10, "c", "old"):
        multicast(sim, "c", payload)
    sim.run_for(1.0)
    assert sim.delivered("b", "c") == ids(10, "c", "old") and sim.delivered("c", "a") == ids(20, "a")
    restart(sim, "c")
    for payload in ids(10, "c", "new"):  # its seqnos start at 1 again: the old windows would drop them all
        multicast(sim, "c", payload)
    for payload in ids(5, "a", "late"):
        multicast(sim, "a", payload)
    sim.run_for(2.0)
    for receiver in ("a", "b"):
        assert sim.delivered(receiver, "c") == ids(10, "c", "old") + ids(10, "c", "new"), sim.repro()
        assert [e["peer"] for e in sim.emitted("peer_restarted", node=receiver)] == ["c"]
    # the new c gets what a sends from its restart on, not the 20 its previous life had
    assert sim.delivered("c", "a")[20:] == ids(5, "a", "late"), sim.repro()
    assert not nak(sim, "a").blocked and nak(sim, "a").acks["c"] == 25


def test_a_member_restarted_while_out_of_the_view_is_heard_from_its_first_seqno() -> None:
    """The container case that failed under load: the view had excluded the killed member when its new life's
    first datagram arrived, so the window its old life left (low 20, retained for its return) was kept and the
    new life's seqnos 1..10 were all below it."""
    sim = multicast_sim(("a", "b", "c"), seed=11, with_membership=False)
    for payload in ids(20, "c", "old"):
        multicast(sim, "c", payload)
    sim.run_for(1.0)
    for member in ("a", "b"):
        sim.install_view(member, ("a", "b"), ("a", 2))   # c was suspected and excluded
    restart(sim, "c")
    sim.run_for(0.2)
    for payload in ids(10, "c", "new"):
        multicast(sim, "c", payload)
    sim.run_for(0.2)
    for member in ("a", "b"):
        sim.install_view(member, ("a", "b", "c"), ("a", 3))  # ... and joins again
    sim.run_for(3.0)
    for receiver in ("a", "b"):
        assert sim.delivered(receiver, "c") == ids(20, "c", "old") + ids(10, "c", "new"), sim.repro()
        assert not sim.emitted("data_rx", node=receiver, action="discarded", reason="below_window"), sim.repro()


def test_datagrams_of_a_life_before_the_restart_are_dropped() -> None:
    sim = multicast_sim(("a", "b", "c"), seed=10, with_membership=False)
    sim.delay_matching("c", "a", "Nakack4Msg", 0.5)  # c's first life's multicast is still in flight ...
    multicast(sim, "c", make_payload("c.old.1", 16))
    sim.run_for(0.1)
    restart(sim, "c")                                # ... when c restarts and multicasts seqno 1 again
    multicast(sim, "c", make_payload("c.new.1", 16))
    sim.run_for(2.0)
    assert sim.delivered("a", "c") == [make_payload("c.new.1", 16)], sim.repro()
    dropped = sim.emitted("datagram_dropped", node="a")
    assert [d["reason"] for d in dropped] == ["old-incarnation"], dropped
