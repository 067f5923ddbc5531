"""UNICAST3's connection lifecycle (JGroups UNICAST3): close is CLOSING, then removal after conn_close_timeout;
idle connections reaped after conn_expiry_timeout; the SYNC handshake's messages are retransmitted until
answered, and lost or duplicated ones never block a sender or a receiver for good."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from node.sim import send_many, unicast_sim
from node.unicast import UnicastConfig
from sim_helpers import settle

LAYER = "unicast"
SYNC_TYPES = ("UnicastSync", "UnicastSyncOk", "UnicastSyncAck")


def uni(sim, member: str):
    return sim.layer(member, LAYER)



def test_admin_close_is_closing_then_removal_after_conn_close_timeout() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=31, config=UnicastConfig(conn_close_timeout_ms=1000))
    sent = send_many(sim, "a", "b", 5, "m")
    settle(sim)
    sim.request("a", LAYER, "close", {"peer": "b"})
    entry = uni(sim, "a").send_entries["b"]
    assert entry.state == "closing"
    sim.run_for(0.5)
    sent += send_many(sim, "a", "b", 2, "reopen")           # traffic reopens the very connection
    assert uni(sim, "a").send_entries["b"] is entry and entry.state == "open"
    sim.request("a", LAYER, "close", {"peer": "b"})
    settle(sim)
    assert "b" not in uni(sim, "a").send_entries                   # removed after conn_close_timeout ...
    assert sim.emitted("conn_state", node="a", dir="send", state="closed")
    assert "a" not in uni(sim, "b").recv_entries                   # ... and b was told (CLOSE)
    assert sim.delivered("b", "a") == sent, sim.repro()


def test_idle_connections_expire_after_conn_expiry_timeout_and_come_back_on_use() -> None:
    config = UnicastConfig(conn_expiry_timeout_ms=800, conn_close_timeout_ms=500)
    sim = unicast_sim("unicast3", ("a", "b"), seed=32, config=config)
    sent = send_many(sim, "a", "b", 3, "m")
    sim.run_for(0.7)
    assert uni(sim, "a").send_entries["b"].state == "open"         # not idle long enough yet
    settle(sim)
    assert sim.emitted("conn_state", node="a", dir="send", state="closing", reason="expired")
    assert sim.emitted("conn_state", node="b", dir="recv", state="closing", reason="expired")
    assert not uni(sim, "a").send_entries and not uni(sim, "b").recv_entries
    sent += send_many(sim, "a", "b", 3, "later")
    settle(sim)
    assert sim.delivered("b", "a") == sent, sim.repro()


def test_without_conn_expiry_timeout_an_idle_connection_stays() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=33)
    send_many(sim, "a", "b", 3, "m")
    settle(sim)
    sim.run_for(30)
    assert uni(sim, "a").send_entries["b"].state == "open" and uni(sim, "b").recv_entries["a"].state == "open"


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), dup_pct=st.sampled_from([0, 30, 60]), faults=st.lists(
    st.tuples(st.sampled_from(SYNC_TYPES), st.sampled_from(["drop", "delay"]), st.integers(1, 3)), max_size=3,
    unique_by=lambda fault: fault[0]))
def test_lost_or_duplicated_sync_messages_never_block_for_good(seed: int, dup_pct: int, faults) -> None:
    """b loses its window for a (remove_receive) and resyncs while SYNC, SYNC-OK and SYNC-ACK are dropped,
    delayed past their repeats, and every datagram may arrive twice: afterwards a is not syncing, its window is
    empty, and b delivered everything it delivered exactly once, the last messages included."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=seed)
    sent = send_many(sim, "a", "b", 5, "m")
    settle(sim)
    for src, dst in (("a", "b"), ("b", "a")):
        sim.set_link(src, dst, dup_pct=dup_pct)
    for type_name, action, count in faults:
        src, dst = ("b", "a") if type_name != "UnicastSyncOk" else ("a", "b")
        if action == "drop":
            sim.drop_next(src, dst, type_name, count=count)
        else:  # overtaken by their own repeats
            sim.delay_matching(src, dst, type_name, 0.5, count=count)
    sim.request("b", LAYER, "remove_receive", {"peer": "a"})
    sent += send_many(sim, "a", "b", 5, "after")
    settle(sim)
    sim.clear_faults()
    sent += send_many(sim, "a", "b", 2, "end")
    settle(sim)
    a = uni(sim, "a").send_entries["b"]
    assert not a.syncing and not a.window.msgs, sim.repro()
    # finished by retransmission (at most 3 losses of a kind: 3 x sync_min_interval), not abandoned at sync_timeout
    assert not sim.emitted("resync_timeout"), sim.repro()
    got = sim.delivered_ids("b", "a")
    assert len(got) == len(set(got)), f"delivered twice: {got}; {sim.repro()}"
    assert sim.delivered("b", "a")[-2:] == sent[-2:], sim.repro()


def test_an_unsolicited_sync_ok_cannot_move_or_replace_a_window() -> None:
    """The fuzzer's datagram: a SYNC-OK nobody asked for (low 50000, a far newer conn_id) mid-stream is a counted
    drop; the real stream goes on being delivered."""
    from node.wire import UnicastSyncOk

    sim = unicast_sim("unicast3", ("a", "b"), seed=34)
    sent = send_many(sim, "a", "b", 5, "m")
    sim.run_for(0.01)
    sim.inject("a", "b", UnicastSyncOk(50_000, 2**31))
    sent += send_many(sim, "a", "b", 5, "n")
    settle(sim)
    assert sim.delivered("b", "a") == sent, sim.repro()
    assert uni(sim, "b").counters["unsolicited_sync_ok"] == 1
    assert sim.emitted("resync_rx", node="b", kind="sync_ok", action="discarded")
