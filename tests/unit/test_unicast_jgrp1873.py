"""JGRP-1873 step by step, and the SYNC / SYNC-OK / SYNC-ACK handshake of the UNICAST3 seed (JGRP-1875).

JGRP-1873 (seed text): A sends to B; B's view drops A and B removes its connection to A; A sends #21; B has no
window and asks for the first seqno; A resends its unacked messages, some get lost; B opens a window at the
lowest; then a STABLE that B sent before its close, delayed, reaches A with the same conn_id and A purges
messages B has not seen; B asks for them forever. Under unicast3 the same steps are clean.
"""
from __future__ import annotations

import pytest

from node.sim import send_many, unicast_sim
from node.unicast import UnicastConfig
from node.wire import UnicastAck, UnicastData
from sim_helpers import settle

LAYER = "unicast"


def uni(sim, member: str):
    return sim.layer(member, LAYER)



def jgrp_1873_steps(variant: str, remove_receive: bool = False):
    """Run the issue's steps; returns (sim, payloads sent, stale-release time)."""
    sim = unicast_sim(variant, ("a", "b"), seed=1873, config=UnicastConfig())
    ack_type = "UnicastStable" if variant == "unicast2" else "UnicastAck"
    sent = send_many(sim, "a", "b", 9, "m")                 # 1..9, delivered and purged at A
    settle(sim)
    assert uni(sim, "a").send_entries["b"].window.low == 9
    # B's acks for what follows are delayed: the one for #15 is held (released later), the rest lost
    stale = sim.hold("b", "a", ack_type, where=lambda m: m.seqno == 15, count=1)
    lost = [sim.drop_matching("b", "a", "UnicastStable"), sim.drop_matching("b", "a", "UnicastAck")]
    sent += send_many(sim, "a", "b", 6, "m")                # 10..15
    sim.run_for(0.3)
    sent += send_many(sim, "a", "b", 5, "m")                # 16..20
    sim.run_for(0.3)
    assert sim.delivered("b", "a") == sent, sim.repro()
    assert len(sim.faults.faults[stale].held) == 1, "B's ack for #15 should be held"
    w = uni(sim, "a").send_entries["b"].window
    assert (w.low, w.highest_sent) == (9, 20)               # A: B: 10|20, B: A: 10|20
    # B gets a view without A (A keeps B)
    sim.install_view("b", ["b"])
    if remove_receive:  # unicast3 keeps the window CLOSING; make B lose it as UNICAST2 does
        sim.request("b", LAYER, "remove_receive", {"peer": "a"})
    # A sends #21; what A resends next is partly lost (#11..#20)
    lossy = sim.drop_matching("a", "b", UnicastData, where=lambda m: 11 <= m.seqno <= 20)
    sent += send_many(sim, "a", "b", 1, "m")
    assert sim.run_until_true(lambda: "a" in uni(sim, "b").recv_entries, 2.0), sim.repro()
    sim.run_for(0.01)
    # now the stale ack reaches A
    released_at = sim.now_s
    sim.release(stale)
    sim.run_for(0.01)
    for fault_id in lost + [lossy]:
        sim.remove_fault(fault_id)
    return sim, sent, released_at


def test_jgrp_1873_unicast2_endless_retransmission() -> None:
    sim, sent, released_at = jgrp_1873_steps("unicast2")
    # B opened a new window at A's lowest unacked message (#10), after A answered its first-seqno request
    assert sim.emitted("resync_tx", node="b", kind="first_seqno_req")
    assert sim.emitted("resync_rx", node="a", kind="first_seqno_req")
    # the delayed STABLE(15) had the same conn_id: accepted, A purged #10..#15
    stale = sim.emitted("stable_rx", node="a", seqno=15)
    assert stale and stale[0]["action"] == "accepted" and stale[0]["purged_to"] == 15 and stale[0]["ts"] >= released_at
    assert sim.run_until_quiet(10.0) is False, "unicast2 should never settle here"
    asks = [e for e in sim.emitted("xmit_req_rx", node="a") if e["ts"] > released_at]
    missing = [e for e in asks if e["missing"]]
    assert len(missing) >= 50, sim.repro()                     # never-ending ...
    assert missing[-1]["ts"] > sim.now_s - 0.5                 # ... still going
    assert set(missing[-1]["missing"]) == set(range(11, 16))  # A::11 - A::15 are gone from A
    recv = uni(sim, "b").state()["peers"]["a"]["recv"]
    assert recv["highest_delivered"] == 10 and recv["missing"] == 5
    # #11..#21 never arrive (and #10 came twice: B forgot it had delivered it)
    assert sim.delivered("b", "a") == sent[:20] + [sent[9]]


def test_jgrp_1873_unicast3_is_clean() -> None:
    sim, sent, released_at = jgrp_1873_steps("unicast3")
    # B kept its window (CLOSING) and reopened it on A's traffic: no resync at all
    assert sim.emitted("conn_state", node="b", dir="recv", state="closing")
    assert not sim.emitted("resync_tx")
    settle(sim, 15.0)
    assert sim.delivered("b", "a") == sent, sim.repro()
    assert not [e for e in sim.emitted("xmit_req_rx", node="a") if e["missing"]]
    assert uni(sim, "a").send_entries["b"].window.msgs == {}


def test_jgrp_1873_unicast3_after_losing_the_window_syncs_and_discards_the_stale_ack() -> None:
    sim, sent, released_at = jgrp_1873_steps("unicast3", remove_receive=True)
    kinds = [e["kind"] for e in sim.emitted("resync_tx")]
    assert {"sync", "sync_ok", "sync_ack"} <= set(kinds)
    # the ack for #15 carried the old conn_id: discarded, nothing purged
    stale = sim.emitted("ack_rx", node="a", seqno=15)
    assert stale and all(e["action"] == "discarded" for e in stale)
    settle(sim, 15.0)
    assert not [e for e in sim.emitted("xmit_req_rx", node="a") if e["missing"]], sim.repro()
    # B lost its state, so it gets A's unacked #10..#20 again once, then #21; nothing is missing
    assert sim.delivered("b", "a") == sent[:20] + sent[9:21], sim.repro()
    assert uni(sim, "a").send_entries["b"].window.msgs == {}


# --- the SYNC handshake ---------------------------------------------------------------------------------------
def test_admin_sync_on_a_healthy_connection_changes_conn_id_without_duplicates() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=2)
    sent = send_many(sim, "a", "b", 30, "x")
    sim.run_for(0.05)                               # acks not yet back at A
    old_conn = uni(sim, "a").send_entries["b"].conn_id
    sim.request("b", LAYER, "sync", {"peer": "a"})
    sent += send_many(sim, "a", "b", 30, "y")
    settle(sim)
    assert sim.delivered("b", "a") == sent, sim.repro()
    new_conn = uni(sim, "a").send_entries["b"].conn_id
    assert new_conn != old_conn
    assert uni(sim, "b").recv_entries["a"].conn_id == new_conn
    assert not uni(sim, "a").send_entries["b"].syncing


def test_admin_sync_ends_endless_retransmission_of_purged_messages() -> None:
    """A purges #5..#8 B never got (forged ack): B asks for them in vain until an admin sync."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=3)
    sim.drop_matching("a", "b", UnicastData, where=lambda m: m.seqno == 5)
    sent = send_many(sim, "a", "b", 10, "x")
    sim.run_for(0.02)
    conn = uni(sim, "a").send_entries["b"].conn_id
    sim.inject("b", "a", UnicastAck(8, conn, 99))     # a bogus ack with the right conn_id
    sim.run_for(2.0)
    missing = [e for e in sim.emitted("xmit_req_rx", node="a") if e["missing"]]
    assert len(missing) >= 5 and missing[-1]["missing"] == [5]
    assert sim.delivered("b", "a") == sent[:4]
    sim.request("b", LAYER, "sync", {"peer": "a"})
    settle(sim)
    # B skips the lost #5 (the sender no longer has it) and delivers the rest in order
    assert sim.delivered("b", "a") == sent[:4] + sent[5:], sim.repro()
    assert uni(sim, "b").recv_entries["a"].counters["skipped"] == 1
    later = [e for e in sim.emitted("xmit_req_rx", node="a") if e["missing"] and e["ts"] > sim.now_s - 5]
    assert not [e for e in later if e["ts"] > missing[-1]["ts"] + 0.5]


def test_sender_discards_acks_until_sync_ack() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=4)
    sent = send_many(sim, "a", "b", 5, "x")
    settle(sim)
    sim.request("b", LAYER, "remove", {"peer": "a"})
    sim.drop_next("b", "a", "UnicastSyncAck", count=6)
    sent += send_many(sim, "a", "b", 5, "y")
    sim.run_until_true(lambda: bool(sim.emitted("resync_tx", node="b", kind="sync_ack")), 1.0)
    assert uni(sim, "a").send_entries["b"].syncing
    settle(sim)
    # while A waited for the lost SYNC-ACK, B's acks (new conn_id) were discarded; SYNC-OK was repeated
    assert sim.emitted("ack_rx", node="a", action="discarded")
    assert len(sim.emitted("resync_tx", node="a", kind="sync_ok")) >= 4
    assert not uni(sim, "a").send_entries["b"].syncing
    assert sim.delivered("b", "a") == sent, sim.repro()


def test_sync_is_rate_limited_and_bounded_by_sync_timeout() -> None:
    config = UnicastConfig(sync_min_interval_ms=400, sync_timeout_ms=2_000)
    sim = unicast_sim("unicast3", ("a", "b"), seed=5, config=config)
    for seqno in range(2, 52):                       # 50 DATA without first and without a window at B
        sim.inject("a", "b", UnicastData(seqno, 77, False, b"x"))
    sim.partition("b", "a")                          # B's SYNCs never reach A
    sim.run_for(0.1)
    assert len(sim.emitted("resync_tx", node="b", kind="sync")) == 1
    assert sim.counters["cut"] == 1 and uni(sim, "b").counters["sync_suppressed"] == 49
    settle(sim, 10.0)
    syncs = sim.emitted("resync_tx", node="b", kind="sync")
    assert 4 <= len(syncs) <= 6                      # one every 400 ms for 2 s
    assert all(later["ts"] - earlier["ts"] >= 0.4 - 1e-9 for earlier, later in zip(syncs, syncs[1:]))
    assert sim.emitted("resync_timeout", node="b")
    assert syncs[-1]["ts"] <= 2.0 + 0.1


def test_sync_is_unicast3_only() -> None:
    from node.errors import UsageError
    for variant in ("unicast2", "unicast1"):
        sim = unicast_sim(variant, ("a", "b"))
        with pytest.raises(UsageError):
            sim.request("b", LAYER, "sync", {"peer": "a"})


def test_delayed_old_conn_data_after_sync_does_not_restart_the_window() -> None:
    """A message of an older conn_id of the same stream, arriving after the sync, is still in order."""
    sim = unicast_sim("unicast3", ("a", "b"), seed=6)
    sim.delay_matching("a", "b", UnicastData, 1.0, where=lambda m: m.seqno == 3, count=1)
    sent = send_many(sim, "a", "b", 5, "x")
    sim.run_for(0.02)
    sim.request("b", LAYER, "sync", {"peer": "a"})
    settle(sim)
    assert sim.delivered("b", "a") == sent, sim.repro()
    assert not sim.emitted("data_rx", node="b", action="wrong_conn")
