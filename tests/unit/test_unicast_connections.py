"""The UNICAST2 seed's connection scenarios #1-#9 and the connection tests of protocols.md.

Every scenario runs against unicast3 (everything arrives exactly once, in order). Where the seed says a legacy
design handles it, unicast2 (and unicast1) run it too; where the seed says it fails, the test shows the failure:
messages stuck undelivered, or retransmission requests that never end.
"""
from __future__ import annotations

import pytest

from node.sim import send_many, unicast_sim
from node.unicast import UnicastConfig
from sim_helpers import expect, settle

LAYER = "unicast"


def make(variant: str, seed: int = 0, **config) -> object:
    return unicast_sim(variant, ("a", "b"), seed, UnicastConfig(**config))




def close(sim, member: str, peer: str) -> None:
    sim.request(member, LAYER, "remove", {"peer": peer})


def uni(sim, member: str):
    return sim.layer(member, LAYER)


ALL = ["unicast3", "unicast2", "unicast1"]
CONN = ["unicast3", "unicast2"]


# --- #1 / #2: regular reception ---------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ALL)
def test_regular_reception_1_2(variant: str) -> None:
    sim = make(variant)
    a_to_b = send_many(sim, "a", "b", 100)
    b_to_a = send_many(sim, "b", "a", 50)
    settle(sim)
    expect(sim, "b", "a", a_to_b)
    expect(sim, "a", "b", b_to_a)
    a, b = uni(sim, "a"), uni(sim, "b")
    # #1: a new entry with a conn_id, seqno now at 100; #2: the receiver took over that conn_id
    assert a.send_entries["b"].window.highest_sent == 100
    assert b.recv_entries["a"].conn_id == a.send_entries["b"].conn_id
    assert b.recv_entries["a"].window.highest_delivered == 100
    if variant != "unicast1":
        firsts = [e for e in sim.emitted("data_tx", node="a") if e["first"]]
        assert [e["seqno"] for e in firsts] == [1]
        assert firsts[0]["conn_id"] == a.send_entries["b"].conn_id != 0


# --- #3: both close --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ALL)
def test_both_closing_3(variant: str) -> None:
    sim = make(variant)
    first_ab, first_ba = send_many(sim, "a", "b", 10, "x"), send_many(sim, "b", "a", 10, "x")
    settle(sim)
    close(sim, "a", "b")
    close(sim, "b", "a")
    assert uni(sim, "a").send_entries == {} and uni(sim, "b").recv_entries == {}
    second_ab, second_ba = send_many(sim, "a", "b", 10, "y"), send_many(sim, "b", "a", 10, "y")
    settle(sim)
    expect(sim, "b", "a", first_ab + second_ab)
    expect(sim, "a", "b", first_ba + second_ba)


# --- #4: A closes unilaterally ---------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", CONN)
def test_a_closing_unilaterally_4(variant: str) -> None:
    sim = make(variant)
    before = send_many(sim, "a", "b", 25, "x")
    settle(sim)
    old_conn = uni(sim, "b").recv_entries["a"].conn_id
    close(sim, "a", "b")
    after = send_many(sim, "a", "b", 10, "y")
    settle(sim)
    expect(sim, "b", "a", before + after)
    new_conn = uni(sim, "b").recv_entries["a"].conn_id
    assert new_conn != old_conn and new_conn == uni(sim, "a").send_entries["b"].conn_id


def test_a_closing_unilaterally_4_fails_without_conn_ids() -> None:
    """unicast1: A starts again at #1 while B expects #26: B discards (and acks) all ten new messages."""
    sim = make("unicast1")
    before = send_many(sim, "a", "b", 25, "x")
    settle(sim)
    close(sim, "a", "b")
    send_many(sim, "a", "b", 10, "y")
    settle(sim)
    expect(sim, "b", "a", before)
    assert len(sim.emitted("data_rx", node="b", action="below_window")) == 10


# --- #5: B closes unilaterally ---------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", CONN)
def test_b_closing_unilaterally_5(variant: str) -> None:
    sim = make(variant)
    before = send_many(sim, "a", "b", 10, "x")
    settle(sim)
    close(sim, "b", "a")
    after = send_many(sim, "a", "b", 10, "y")
    settle(sim)
    expect(sim, "b", "a", before + after)
    kinds = {e["kind"] for e in sim.emitted("resync_tx", node="b")}
    assert kinds == ({"sync", "sync_ack"} if variant == "unicast3" else {"first_seqno_req"})


def test_b_closing_unilaterally_5_fails_without_conn_ids() -> None:
    """unicast1: B's new window expects #1, A sends #11..#20: B stores them and never delivers them."""
    sim = make("unicast1")
    before = send_many(sim, "a", "b", 10, "x")
    settle(sim)
    close(sim, "b", "a")
    send_many(sim, "a", "b", 10, "y")
    settle(sim)
    expect(sim, "b", "a", before)
    recv = uni(sim, "b").state()["peers"]["a"]["recv"]
    assert recv["buffered"] == 10 and recv["highest_delivered"] == 0
    assert uni(sim, "a").send_entries["b"].window.msgs == {}  # acked, so never resent


# --- #6: A closes, its first message is lost -------------------------------------------------------------------
def _scenario_6(variant: str):
    sim = make(variant)
    before = send_many(sim, "a", "b", 25, "x")
    settle(sim)
    close(sim, "a", "b")
    sim.drop_next("a", "b", "UnicastData", where=lambda m: m.first)
    after = send_many(sim, "a", "b", 10, "y")
    return sim, before, after


def test_a_closing_first_message_lost_6_unicast3() -> None:
    sim, before, after = _scenario_6("unicast3")
    assert sim.counters["fault_dropped"] == 1
    settle(sim)
    expect(sim, "b", "a", before + after)
    # B refused #2..#10 (unknown conn_id, not first) and asked A to sync instead of acking them
    assert len(sim.emitted("data_rx", node="b", action="wrong_conn")) == 9
    assert sim.emitted("resync_tx", node="b", kind="sync")
    assert not sim.emitted("ack_tx", node="b", seqno=2)


def test_a_closing_first_message_lost_6_unicast2_gets_stuck() -> None:
    """The seed: B discards #2..#10 as below its window but acks them, A forgets them; #1 arrives later and
    opens a new window, and #2..#10 can never be delivered. A further message makes B ask for them forever."""
    sim, before, after = _scenario_6("unicast2")
    settle(sim)
    assert len(sim.emitted("data_rx", node="b", action="below_window")) >= 9
    assert len(sim.emitted("ack_rx", node="a", action="accepted")) >= 9
    expect(sim, "b", "a", before + after[:1])   # only #1 of the new connection
    assert uni(sim, "a").send_entries["b"].window.msgs == {}
    # one more message: B sees the gap #2..#10 and asks for it again and again, never answered
    send_many(sim, "a", "b", 1, "z")
    assert not sim.run_until_quiet(5.0)
    missing = [e for e in sim.emitted("xmit_req_rx", node="a") if e["missing"]]
    assert len(missing) >= 10 and set(missing[-1]["missing"]) == set(range(2, 11))
    assert missing[-1]["ts"] > sim.now_s - 0.5
    expect(sim, "b", "a", before + after[:1])


# --- #7: merge of two separate partitions ----------------------------------------------------------------------
@pytest.mark.parametrize("variant, close_ms", [("unicast3", 10_000), ("unicast3", 1_000), ("unicast2", 10_000)])
def test_merge_of_separate_partitions_7(variant: str, close_ms: int) -> None:
    sim = make(variant, conn_close_timeout_ms=close_ms)
    ab, ba = send_many(sim, "a", "b", 10, "x"), send_many(sim, "b", "a", 10, "x")
    settle(sim)
    sim.partition_both("a", "b")
    sim.install_view("a", ["a"])
    sim.install_view("b", ["b"])
    sim.run_for(3.0)
    removed = close_ms < 3_000 or variant == "unicast2"
    assert (uni(sim, "a").send_entries == {}) == removed
    sim.heal()
    sim.install_view("a", ["a", "b"])
    sim.install_view("b", ["a", "b"])
    ab += send_many(sim, "a", "b", 10, "y")
    ba += send_many(sim, "b", "a", 10, "y")
    settle(sim)
    expect(sim, "b", "a", ab)
    expect(sim, "a", "b", ba)


# --- #8: overlapping partitions A: {A}, B: {A,B} ---------------------------------------------------------------
@pytest.mark.parametrize("variant, close_ms", [("unicast3", 10_000), ("unicast3", 500), ("unicast2", 10_000)])
def test_overlapping_a_alone_8(variant: str, close_ms: int) -> None:
    sim = make(variant, conn_close_timeout_ms=close_ms)
    ab, ba = send_many(sim, "a", "b", 10, "x"), send_many(sim, "b", "a", 10, "x")
    settle(sim)
    sim.install_view("a", ["a"])          # B keeps {A, B}
    sim.run_for(1.0)
    ab += send_many(sim, "a", "b", 10, "y")   # A to a non-member: a new connection if A removed its entry
    ba += send_many(sim, "b", "a", 10, "y")   # the other way: A may have no window for B any more
    settle(sim, 60.0)
    expect(sim, "b", "a", ab)
    expect(sim, "a", "b", ba)


# --- #9: overlapping partitions A: {A,B}, B: {B} ---------------------------------------------------------------
@pytest.mark.parametrize("variant, close_ms", [("unicast3", 10_000), ("unicast3", 500), ("unicast2", 10_000)])
def test_overlapping_b_alone_9(variant: str, close_ms: int) -> None:
    sim = make(variant, conn_close_timeout_ms=close_ms)
    ab = send_many(sim, "a", "b", 24, "x")
    settle(sim)
    sim.install_view("b", ["b"])          # A keeps {A, B}
    sim.run_for(1.0)
    ab += send_many(sim, "a", "b", 10, "y")   # #25..#34
    settle(sim, 60.0)
    expect(sim, "b", "a", ab)
    if variant == "unicast2":
        assert sim.emitted("resync_rx", node="a", kind="first_seqno_req")


# --- the seed's motivation: UNICAST without connection ids ------------------------------------------------------
def _motivation(variant: str):
    """A sees {A,B} while B sees {B}; B drops its state for A; the split heals."""
    sim = make(variant, conn_close_timeout_ms=500)
    ab, ba = send_many(sim, "a", "b", 24, "x"), send_many(sim, "b", "a", 6, "x")
    settle(sim)
    sim.install_view("b", ["b"])
    sim.run_for(1.0)
    sim.install_view("b", ["a", "b"])
    new_ab, new_ba = send_many(sim, "a", "b", 10, "y"), send_many(sim, "b", "a", 6, "y")
    return sim, ab, ba, new_ab, new_ba


def test_motivation_fails_under_unicast1() -> None:
    sim, ab, ba, new_ab, new_ba = _motivation("unicast1")
    settle(sim)
    expect(sim, "b", "a", ab)     # B stores A's #25.. and never delivers them
    expect(sim, "a", "b", ba)     # A discards B's new #1..#6 (it expects #7)
    assert uni(sim, "b").state()["peers"]["a"]["recv"]["buffered"] == 10
    assert len(sim.emitted("data_rx", node="a", action="below_window")) == 6


@pytest.mark.parametrize("variant", CONN)
def test_motivation_handled_with_conn_ids(variant: str) -> None:
    sim, ab, ba, new_ab, new_ba = _motivation(variant)
    settle(sim)
    expect(sim, "b", "a", ab + new_ab)
    expect(sim, "a", "b", ba + new_ba)


# --- protocols.md: concurrent resets, non-members ---------------------------------------------------------------
@pytest.mark.parametrize("variant", CONN)
def test_ten_concurrent_first_messages_deliver_once(variant: str) -> None:
    from node.wire import UnicastData
    sim = make(variant)
    payload = b"a.concurrent.1\0xxxx"
    for _ in range(10):
        sim.inject("a", "b", UnicastData(1, 4242, True, payload))
    sim.run_for(1.0)
    expect(sim, "b", "a", [payload])
    assert len(sim.emitted("conn_state", node="b", dir="recv", state="open")) == 1


def test_message_to_a_non_member_is_dropped_after_max_retransmit_time() -> None:
    sim = make("unicast3", max_retransmit_time_ms=2_500)
    sim.request("a", LAYER, "send", {"to": "zed", "payload": b"nobody home"})
    sim.run_for(2.3)
    assert "zed" in uni(sim, "a").send_entries
    assert sim.counters["to_unknown_member"] >= 2   # the tail resend kept trying
    sim.run_for(0.5)
    assert "zed" not in uni(sim, "a").send_entries
    assert sim.emitted("conn_state", node="a", peer="zed", state="removed")
    settle(sim)


def test_member_connections_are_not_aged_by_max_retransmit_time() -> None:
    sim = make("unicast3", max_retransmit_time_ms=500)
    sim.partition("a", "b")
    sim.request("a", LAYER, "send", {"to": "b", "payload": b"p"})
    sim.run_for(3.0)
    assert "b" in uni(sim, "a").send_entries
    sim.heal()
    settle(sim)
    expect(sim, "b", "a", [b"p"])
