"""Loss recovery and connection lifecycle of unicast3 (and where it matters, the legacy variants).

protocols.md: dropped last message and dropped ACKs recover within a few xmit intervals; 50,000 messages with
every other one discarded all arrive in order once retransmission runs; connections of a member that left are
CLOSING, reopened by traffic or the member's return, removed after conn_close_timeout.
"""
from __future__ import annotations

import pytest

from node.sim import send_many, unicast_sim
from node.unicast import UnicastConfig
from node.unicast.connid import GEN_BITS, GEN_MASK, first_conn_id, next_generation
from node.wire import UnicastAck, UnicastClose, UnicastData, UnicastSync, UnicastSyncOk, UnicastXmitReq
from sim_helpers import settle

LAYER = "unicast"
XMIT_S = 0.1


def uni(sim, member: str):
    return sim.layer(member, LAYER)



def test_fifty_thousand_messages_every_other_one_discarded() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=50_000)
    sim.drop_matching("a", "b", UnicastData, where=lambda m: m.seqno % 2 == 0, count=25_000)
    sent = send_many(sim, "a", "b", 50_000, "big")
    assert sim.counters["fault_dropped"] == 25_000
    assert len(sim.delivered("b", "a")) <= 1
    assert sim.run_until_true(lambda: len(sim.deliveries["b"].get("a", ())) == 50_000, 10.0), sim.repro()
    assert sim.delivered("b", "a") == sent, sim.repro()
    settle(sim)
    assert uni(sim, "a").send_entries["b"].window.msgs == {}


@pytest.mark.parametrize("variant", ["unicast3", "unicast2", "unicast1"])
def test_dropped_last_message_recovers_within_a_few_xmit_intervals(variant: str) -> None:
    sim = unicast_sim(variant, ("a", "b"), seed=11)
    sim.drop_next("a", "b", UnicastData, where=lambda m: m.seqno == 10)
    sent = send_many(sim, "a", "b", 10)
    sim.run_for(0.05)
    assert sim.delivered("b", "a") == sent[:9]
    assert sim.run_until_true(lambda: len(sim.delivered("b", "a")) == 10, 4 * XMIT_S), sim.repro()
    assert sim.delivered("b", "a") == sent
    settle(sim)
    assert uni(sim, "a").send_entries["b"].window.msgs == {}


def test_dropped_acks_recover_within_a_few_xmit_intervals() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=12)
    no_acks = sim.drop_matching("b", "a", UnicastAck)
    sent = send_many(sim, "a", "b", 10)
    sim.run_for(1.0)
    assert sim.delivered("b", "a") == sent                           # delivered once, despite resends
    assert len(uni(sim, "a").send_entries["b"].window) == 10          # but A never heard about it
    assert len(sim.emitted("data_tx", node="a", resend=True)) >= 5
    sim.remove_fault(no_acks)
    assert sim.run_until_true(lambda: not uni(sim, "a").send_entries["b"].window.msgs, 4 * XMIT_S), sim.repro()
    settle(sim)
    assert sim.delivered("b", "a") == sent


def test_ack_threshold_sends_an_ack_at_once() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=13, config=UnicastConfig(ack_threshold=10))
    send_many(sim, "a", "b", 25)
    sim.run_for(0.01)                                   # well before the first retransmit run
    assert [e["seqno"] for e in sim.emitted("ack_tx", node="b")] == [10, 20]
    sim.run_for(0.2)
    assert [e["seqno"] for e in sim.emitted("ack_tx", node="b")] == [10, 20, 25]


def test_xmit_req_only_for_gaps_seen_in_the_previous_run() -> None:
    """A gap that closes by itself (reordering) before the next run is never asked for."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=14)
    # B's retransmit runs are at 0.101, 0.201, ...: the first one sees the gap, #3 arrives before the second
    sim.delay_matching("a", "b", UnicastData, 0.15, where=lambda m: m.seqno == 3, count=1)
    sent = send_many(sim, "a", "b", 6)
    sim.run_for(0.12)
    assert uni(sim, "b").recv_entries["a"].prev_highest_missing == 3
    settle(sim)
    assert sim.delivered("b", "a") == sent
    assert not sim.emitted("xmit_req_tx")


def test_gap_is_asked_for_exactly_from_the_second_run_on() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=15)
    sim.drop_next("a", "b", UnicastData, where=lambda m: m.seqno in (2, 3), count=2)
    sent = send_many(sim, "a", "b", 5)
    settle(sim)
    assert sim.delivered("b", "a") == sent
    reqs = sim.emitted("xmit_req_tx", node="b")
    assert [r["seqnos"] for r in reqs] == [[2, 3]]
    assert 0.15 < reqs[0]["ts"] <= 0.25              # the second run after the gap appeared


# --- connection lifecycle ---------------------------------------------------------------------------------------
def test_view_without_peer_marks_closing_and_removes_after_conn_close_timeout() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=16, config=UnicastConfig(conn_close_timeout_ms=2_000))
    send_many(sim, "a", "b", 3)
    send_many(sim, "b", "a", 3)
    settle(sim)
    sim.install_view("a", ["a"])
    states = {(e["dir"], e["state"]) for e in sim.emitted("conn_state", node="a")}
    assert {("send", "closing"), ("recv", "closing")} <= states
    sim.run_for(1.9)
    assert "b" in uni(sim, "a").send_entries and "b" in uni(sim, "a").recv_entries
    sim.run_for(0.3)
    assert uni(sim, "a").send_entries == {} and uni(sim, "a").recv_entries == {}
    closed = sim.emitted("conn_state", node="a", state="closed")
    assert {e["dir"] for e in closed} == {"send", "recv"}
    assert not [m for m in sim.emitted("conn_state", node="b") if m["state"] == "closed"]  # B not a member: no CLOSE


def test_return_of_the_member_reopens() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=17, config=UnicastConfig(conn_close_timeout_ms=2_000))
    sent = send_many(sim, "a", "b", 3)
    settle(sim)
    conn = uni(sim, "a").send_entries["b"].conn_id
    sim.install_view("a", ["a"])
    sim.run_for(1.0)
    sim.install_view("a", ["a", "b"])
    sim.run_for(5.0)
    entry = uni(sim, "a").send_entries["b"]
    assert entry.state == "open" and entry.conn_id == conn
    sent += send_many(sim, "a", "b", 3)
    settle(sim)
    assert sim.delivered("b", "a") == sent


def test_traffic_reopens_a_closing_receive_window() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=18, config=UnicastConfig(conn_close_timeout_ms=2_000))
    sent = send_many(sim, "a", "b", 3)
    settle(sim)
    sim.install_view("b", ["b"])
    assert uni(sim, "b").recv_entries["a"].state == "closing"
    sent += send_many(sim, "a", "b", 3)
    sim.run_for(0.5)
    assert uni(sim, "b").recv_entries["a"].state == "open"
    settle(sim)
    assert sim.delivered("b", "a") == sent
    assert not sim.emitted("resync_tx")


def test_graceful_close_expires_and_tells_the_member_with_close() -> None:
    """A connection closed gracefully while the peer is still a member is removed on the peer too (CLOSE)."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=19, config=UnicastConfig(conn_close_timeout_ms=1_000))
    sent = send_many(sim, "a", "b", 3)
    settle(sim)
    sim.request("a", LAYER, "close", {"peer": "b"})
    assert uni(sim, "a").send_entries["b"].state == "closing"
    sim.run_for(0.9)
    assert "b" in uni(sim, "a").send_entries and "a" in uni(sim, "b").recv_entries
    sim.run_for(0.3)
    assert "b" not in uni(sim, "a").send_entries
    assert sim.emitted("conn_state", node="b", dir="recv", state="closed")
    assert "a" not in uni(sim, "b").recv_entries
    sent += send_many(sim, "a", "b", 3)               # a new connection afterwards
    settle(sim)
    assert sim.delivered("b", "a") == sent


def test_xmit_req_for_a_removed_connection_is_answered_with_close() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=20)
    sim.drop_next("a", "b", UnicastData, where=lambda m: m.seqno == 2)
    send_many(sim, "a", "b", 3)
    sim.run_for(0.01)
    sim.request("a", LAYER, "remove", {"peer": "b"})   # A forgets: B's XMIT_REQ for #2 cannot be served
    settle(sim)
    assert sim.emitted("xmit_req_rx", node="a", missing=[2])
    assert "a" not in uni(sim, "b").recv_entries      # CLOSE ended B's retransmission requests
    assert len(sim.emitted("xmit_req_tx", node="b")) == 1


def test_xmit_req_of_another_connection_is_discarded() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=21)
    send_many(sim, "a", "b", 3)
    settle(sim)
    sim.inject("b", "a", UnicastXmitReq(999, (1, 2)))
    sim.run_for(0.1)
    assert sim.emitted("xmit_req_rx", node="a", action="discarded")
    assert not sim.emitted("data_tx", node="a", resend=True)


def test_ack_with_another_conn_id_is_discarded_and_one_beyond_highest_sent_closes_the_receivers_window() -> None:
    """An ACK of another connection is discarded. One of ours beyond what we sent comes from a window ahead of our
    stream (forged messages delivered in our name): it holds a message at every seqno we sent, so all of it is
    released, and a CLOSE makes it drop that window (our next message then SYNCs it back to our stream)."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=22)
    sim.partition("a", "b")
    send_many(sim, "a", "b", 5)
    conn = uni(sim, "a").send_entries["b"].conn_id
    sim.inject("b", "a", UnicastAck(5, conn + 1, 1))
    sim.run_for(0.01)
    assert len(uni(sim, "a").send_entries["b"].window) == 5
    sim.inject("b", "a", UnicastAck(99, conn, 1))       # beyond what was sent
    sim.run_for(0.01)
    assert [(e["action"], e.get("reason")) for e in sim.emitted("ack_rx", node="a")] == [
        ("discarded", None), ("discarded", "above_sent")]
    assert len(uni(sim, "a").send_entries["b"].window) == 0
    assert uni(sim, "a").counters["closes_on_ack_above_sent"] == 1


def test_close_message_of_another_connection_is_ignored() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=23)
    send_many(sim, "a", "b", 3)
    settle(sim)
    sim.inject("a", "b", UnicastClose(12345))
    sim.run_for(0.01)
    assert "a" in uni(sim, "b").recv_entries


def test_delayed_first_message_of_an_older_connection_is_dropped() -> None:
    """A stray copy of the first message of a connection A has since replaced must not reset B's window; B asks A
    for its stream once (it cannot tell a stale message from a window it should not hold) and keeps its window."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=24)
    old = send_many(sim, "a", "b", 3, "old")
    settle(sim)
    old_conn = uni(sim, "b").recv_entries["a"].conn_id
    sim.request("a", LAYER, "remove", {"peer": "b"})
    new = send_many(sim, "a", "b", 3, "new")
    settle(sim)
    new_conn = uni(sim, "b").recv_entries["a"].conn_id
    sim.inject("a", "b", UnicastData(1, old_conn, True, old[0]))
    sim.inject("a", "b", UnicastData(2, old_conn, False, old[1]))
    settle(sim)
    assert sim.delivered("b", "a") == old + new
    assert uni(sim, "b").recv_entries["a"].conn_id == next_generation(new_conn)  # A was asked for its stream
    assert len(sim.emitted("data_rx", node="b", action="wrong_conn")) == 2
    # one handshake for both stale messages (SYNC at most once per sync_min_interval)
    assert [(e["node"], e["kind"]) for e in sim.emitted("resync_tx")] == [("b", "sync"), ("a", "sync_ok"),
                                                                          ("b", "sync_ack")]


def test_a_window_acks_under_the_id_of_the_senders_data_whatever_it_learned_out_of_order() -> None:
    """Found by `splitlab fuzz` (seed 17): a forged `first` of another stream replaces B's window for A; the SYNC-OK
    B then asked for comes first as an older generation of A's stream (forged, or from before a wrap of the
    generation counter): it brings the replaced window back under that older id. The window still takes A's data
    (A's id is in its lineage), and must ack it under A's id: acked under the older one, every ack is discarded,
    A's messages are never released, and A's stream is stuck behind them."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=25)
    send_many(sim, "a", "b", 3, "old")
    settle(sim)
    sim.request("b", LAYER, "sync", {"peer": "a"})  # A's stream goes on under its next generation
    settle(sim)
    conn = uni(sim, "a").send_entries["b"].conn_id
    assert uni(sim, "b").recv_entries["a"].conn_id == conn
    sim.partition_both("a", "b")
    sim.inject("a", "b", UnicastData(1, first_conn_id((conn >> GEN_BITS) + 7), True, b"\0forged"))
    sim.request("b", LAYER, "sync", {"peer": "a"})  # (lost in the partition)
    older = conn & ~GEN_MASK | GEN_MASK  # a generation before both of A's, serially
    sim.inject("a", "b", UnicastSyncOk(3, older))
    sim.heal()
    new = send_many(sim, "a", "b", 5, "new")
    settle(sim)
    assert [p for p in sim.delivered("b", "a") if p in new] == new
    assert len(uni(sim, "a").send_entries["b"].window) == 0, "A's messages are acked and released"


def test_a_sync_ok_before_the_sync_it_would_answer_was_sent_does_not_skip_the_window() -> None:
    """Found by the fuzz cluster test (seed 12): B's new window for A had just been opened by A's SYNC-OK when
    another message of a wrong conn_id made B want a new sync, its SYNC held back by sync_min_interval; a forged
    SYNC-OK came in that gap, an earlier generation of A's stream with a low far above it, was taken as the answer
    and skipped B's window past A's next 100 messages (duplicates there, lost). B has asked nothing yet: that
    SYNC-OK answers no question."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=12)
    old = send_many(sim, "a", "b", 5, "old")
    settle(sim)
    first = uni(sim, "a").send_entries["b"].conn_id
    stray = first_conn_id((first >> GEN_BITS) + 7)  # another stream's id: not a message of A's stream
    sim.inject("a", "b", UnicastClose(first))  # B drops its window for A ...
    sim.inject("a", "b", UnicastData(9, stray, False, b"\0forged"))  # ... asks A (SYNC); A's answer, a new
    sim.run_for(0.05)  # generation of its stream, opens a new window
    assert uni(sim, "b").recv_entries["a"].lineage == [uni(sim, "a").send_entries["b"].conn_id]
    sim.inject("a", "b", UnicastData(9, stray, False, b"\0forged"))  # a new sync wanted; its SYNC held back
    sim.run_for(0.0)
    assert uni(sim, "b").counters["sync_suppressed"] == 1
    sim.inject("a", "b", UnicastSyncOk(50_000, first))
    sim.run_for(0.0)
    assert uni(sim, "b").recv_entries["a"].window.highest_delivered == 5
    new = send_many(sim, "a", "b", 5, "new")
    settle(sim)
    assert sim.delivered("b", "a") == old + new, sim.repro()


@pytest.mark.parametrize("variant", ["unicast3", "unicast2"])
def test_reordering_without_loss_asks_for_no_retransmission(variant: str) -> None:
    """JGroups' xmit task asks only for gaps still open at its next run: 2,000 messages at 500/s over a link with
    30 ms delay and 30 ms jitter (heavy reordering, no loss) make no XMIT_REQ, and everything arrives in order."""
    from node.core import make_payload
    from node.sim.network import LinkSpec

    sim = unicast_sim(variant, ("a", "b"), seed=1, link=LinkSpec(delay_ms=30, jitter_ms=30))
    sent = [make_payload(f"a.m.{n}", 50) for n in range(2000)]
    for n, payload in enumerate(sent):
        sim.at(n / 500, lambda p=payload: sim.request("a", LAYER, "send", {"to": "b", "payload": p}))
    sim.run_until(4.1)
    settle(sim)
    assert sim.emitted("data_rx", node="b", action="buffer"), "the link must reorder for this test to mean anything"
    assert sim.emitted("xmit_req_tx") == [], sim.repro()
    assert sim.delivered("b", "a") == sent, sim.repro()


FLOOD_SYNCS = 2_000


def test_a_flood_of_syncs_in_a_receivers_name_is_answered_at_the_rate_a_real_receiver_asks() -> None:
    """Anyone can send a SYNC in a receiver's name, and each SYNC-OK goes to the real receiver: a sender answering
    one for one turns a flood into as much traffic at its peer (the fuzz cluster saw ~1,700 resyncs a second per
    node). It starts at most one sync per sync_min_interval and, during a sync, sends at most one SYNC-OK per
    xmit_interval; the real receiver's window stays on the sender's stream and delivers what follows."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=31)
    before = send_many(sim, "a", "b", 3, "before")
    settle(sim)
    config = uni(sim, "a").config
    flood_s = 1.0
    for i in range(FLOOD_SYNCS):
        sim.inject("b", "a", UnicastSync(), delay_s=i * flood_s / FLOOD_SYNCS)
    sim.run_for(flood_s)
    sync_oks = len(sim.emitted("resync_tx", node="a", kind="sync_ok"))
    syncs = uni(sim, "a").send_entries["b"].counters["syncs"]
    most_syncs = flood_s * 1000 / config.sync_min_interval_ms + 1
    assert syncs <= most_syncs, f"{syncs} syncs started in {flood_s} s, at most {most_syncs} allowed"
    most_sync_oks = flood_s * 1000 / config.xmit_interval_ms + most_syncs
    assert 1 <= sync_oks <= most_sync_oks, f"{sync_oks} SYNC-OKs for {FLOOD_SYNCS} SYNCs in {flood_s} s"
    after = send_many(sim, "a", "b", 3, "after")
    settle(sim)
    assert sim.delivered("b", "a") == before + after


def test_a_sync_asked_for_soon_after_the_last_one_is_started_when_the_interval_is_over() -> None:
    """A SYNC that comes less than sync_min_interval after the last sync started is not answered at once, nor
    dropped: the retransmit task starts that sync when the interval is over, so a real receiver that needs a
    second sync soon after the first gets its SYNC-OK within one sync_min_interval and one xmit_interval."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=32)
    send_many(sim, "a", "b", 3)
    settle(sim)
    config = uni(sim, "a").config
    sim.request("b", LAYER, "sync", {"peer": "a"})
    sim.run_for(0.05)
    started = sim.now_s
    sim.request("b", LAYER, "sync", {"peer": "a"})
    sim.run_for(0.01)
    entry = uni(sim, "a").send_entries["b"]
    assert entry.counters["syncs"] == 1 and entry.counters["syncs_deferred"] == 1
    settle(sim)
    assert entry.counters["syncs"] == 2 and not entry.syncing
    second = sim.emitted("resync_tx", node="a", kind="sync_ok")[-1]
    late_s = second["ts"] - started
    assert late_s <= (config.sync_min_interval_ms + config.xmit_interval_ms) / 1000, late_s
    assert uni(sim, "b").recv_entries["a"].conn_id == entry.conn_id


def test_a_flood_of_repeated_sync_oks_in_a_senders_name_is_acked_at_the_rate_the_sender_repeats() -> None:
    """A SYNC-OK the window already applied is answered again (our SYNC-ACK may have been lost), but anyone can
    repeat it in the sender's name and the SYNC-ACK goes to the sender: at most one per xmit_interval, as often as
    the sender itself repeats its SYNC-OK."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=33)
    send_many(sim, "a", "b", 3)
    settle(sim)
    sim.request("b", LAYER, "sync", {"peer": "a"})
    settle(sim)
    [answer] = [e for e in sim.emitted("resync_tx", node="a") if e["kind"] == "sync_ok"]
    flood_s = 1.0
    for i in range(FLOOD_SYNCS):
        sim.inject("a", "b", UnicastSyncOk(answer["low"], answer["conn_id"]), delay_s=i * flood_s / FLOOD_SYNCS)
    sim.run_for(flood_s)
    sync_acks = len(sim.emitted("resync_tx", node="b", kind="sync_ack"))
    most = 1 + flood_s * 1000 / uni(sim, "b").config.xmit_interval_ms + 1
    assert 2 <= sync_acks <= most, f"{sync_acks} SYNC-ACKs for {FLOOD_SYNCS} repeated SYNC-OKs in {flood_s} s"
    after = send_many(sim, "a", "b", 3, "after")
    settle(sim)
    assert sim.delivered("b", "a")[-3:] == after


def test_a_flood_of_retransmission_requests_in_a_receivers_name_resends_each_seqno_once_per_xmit_interval() -> None:
    """A receiver asks for a missing seqno once per retransmit run; anyone can send an XMIT_REQ in its name, and
    every resend goes to the receiver. A seqno resent in answer to a request less than an xmit_interval ago is not
    resent again (`xmit_repeats_ignored`, the event's `repeats`), so 1,000 requests for 20 held messages cost a
    few resends of each, not 20,000; the stream still completes once acks flow."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=34)
    sim.partition("b", "a")  # acks lost: a holds what it sent
    sent = send_many(sim, "a", "b", 20)
    sim.run_for(0.01)
    conn = uni(sim, "a").send_entries["b"].conn_id
    requests, flood_s = 1_000, 1.0
    for i in range(requests):
        sim.inject("b", "a", UnicastXmitReq(conn, tuple(range(1, 21))), delay_s=i * flood_s / requests)
    sim.run_for(flood_s)
    config = uni(sim, "a").config
    resends = len(sim.emitted("data_tx", node="a", resend=True))
    tail_resends = flood_s * 1000 / config.xmit_interval_ms + 1  # the retransmit task's own, one per run
    most = 20 * (flood_s * 1000 / config.xmit_interval_ms + 1) + tail_resends
    assert 20 <= resends <= most, f"{resends} resends for {requests} requests of 20 seqnos, at most {most}"
    answered = sim.emitted("xmit_req_rx", node="a")
    assert len(answered) == requests and sum(len(e.get("repeats", ())) for e in answered) > 0
    assert all(e["seqnos"] == list(range(1, 21)) for e in answered)
    sim.heal()
    settle(sim)
    assert sim.delivered("b", "a") == sent
