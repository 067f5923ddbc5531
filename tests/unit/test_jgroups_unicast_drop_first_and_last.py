"""JGroups' UNICAST_DropFirstAndLastTest ported to the seeded simulator: the first message of a new connection, or
the last message of a burst, is lost, and retransmission must recover it within a few retransmit intervals.
Neither loss leaves a later message to reveal it (JGRP-1548, JGRP-1563).

JGroups builds A and B over a shared loopback with NAKACK2, DISCARD, the unicast protocol and GMS, sets
xmit_interval to 500 ms, and drops the next unicast with DISCARD on A. Here each member runs only the unicast
layer, with xmit_interval_ms=500 as in JGroups, the membership is given from the start instead of by GMS, and
the simulator's `drop_next` on the link a -> b drops the message. JGroups waits 10 s (last message) or 500 s
(first message) of wall-clock time. Here the recovery must happen within a bound in virtual time derived from
xmit_interval: the sender notices a stalled tail at its second retransmit run, so the bound is a few intervals.
Every variant must recover: the seeds name no legacy breakage for these losses.
"""
from __future__ import annotations

import pytest

from node.sim import send_many, unicast_sim
from node.sim.simulator import Simulator
from node.unicast import UnicastConfig
from node.wire import UnicastData
from sim_helpers import expect, settle

LAYER = "unicast"
ALL = ("unicast3", "unicast2", "unicast1")
XMIT_INTERVAL_MS = 500          # JGroups' setXmitInterval(500)
RECOVERY_INTERVALS = 4          # stalled tail seen at the 2nd run, resent; slack for the ack's round trip


def make(variant: str, seed: int) -> Simulator:
    return unicast_sim(variant, ("a", "b"), seed, UnicastConfig(xmit_interval_ms=XMIT_INTERVAL_MS))




def recovery_bound_s() -> float:
    return RECOVERY_INTERVALS * XMIT_INTERVAL_MS / 1000


def drop_next_unicast(sim: Simulator) -> list:
    """JGroups' discard.dropDownUnicasts(1): drop the next message A sends to B, whatever it is. Returns the list
    the dropped message is recorded in."""
    dropped: list = []
    sim.drop_next("a", "b", None, where=lambda m: dropped.append(m) is None)
    return dropped


@pytest.mark.parametrize("variant", ALL)
def test_last_message_dropped(variant: str) -> None:
    """Ports testLastMessageDropped (JGRP-1548): A sends messages 1-5 to B, and message 5 is dropped. Without a
    later message, B sees no gap, so A must resend its unacked tail by itself within a few xmit intervals."""
    count = 5
    sim = make(variant, seed=201)
    sent = send_many(sim, "a", "b", count - 1)
    dropped = drop_next_unicast(sim)
    sent += send_many(sim, "a", "b", 1, "last")
    assert len(dropped) == 1 and isinstance(dropped[0], UnicastData) and dropped[0].payload == sent[-1], dropped
    sim.run_for(XMIT_INTERVAL_MS / 1000 / 10)   # the four that got through arrive, well before any retransmit run
    expect(sim, "b", "a", sent[:-1])
    ok = sim.run_until_true(lambda: len(sim.delivered("b", "a")) == count, recovery_bound_s())
    assert ok, f"last message not recovered within {recovery_bound_s()}s; {sim.repro()}"
    settle(sim)
    expect(sim, "b", "a", sent)
    assert sim.emitted("data_tx", node="a", seqno=count, resend=True), sim.repro()
    assert not sim.layer("a", LAYER).send_entries["b"].window.msgs, f"A still holds unacked messages; {sim.repro()}"


@pytest.mark.parametrize("variant", ALL)
def test_first_message_dropped(variant: str) -> None:
    """Ports testFirstMessageDropped (JGRP-1563). In JGroups, GMS's join leaves connections behind, and
    removeAllConnections clears them on both members. Here a short exchange sets up the connections, and
    `remove` on both members clears them. Then the next message A sends to B is dropped: message 1 of a new
    connection (first=true in the variants with conn_ids). B has no window, and nothing else arrives to tell B
    that something is missing, so A's resend must set up B's window."""
    sim = make(variant, seed=202)
    warm_ab = send_many(sim, "a", "b", 3, "warm")
    warm_ba = send_many(sim, "b", "a", 3, "warm")
    settle(sim)
    expect(sim, "b", "a", warm_ab)
    expect(sim, "a", "b", warm_ba)
    for member, peer in (("a", "b"), ("b", "a")):
        sim.request(member, LAYER, "remove", {"peer": peer})
        assert not sim.layer(member, LAYER).send_entries and not sim.layer(member, LAYER).recv_entries
    dropped = drop_next_unicast(sim)
    first = send_many(sim, "a", "b", 1, "first")
    assert len(dropped) == 1 and dropped[0].seqno == 1 and dropped[0].payload == first[0], dropped
    assert dropped[0].first == (variant != "unicast1"), dropped
    ok = sim.run_until_true(lambda: len(sim.delivered("b", "a")) == len(warm_ab) + 1, recovery_bound_s())
    assert ok, f"first message not recovered within {recovery_bound_s()}s; {sim.repro()}"
    settle(sim)
    expect(sim, "b", "a", warm_ab + first)
    a, b = sim.layer("a", LAYER), sim.layer("b", LAYER)
    assert b.recv_entries["a"].conn_id == a.send_entries["b"].conn_id, sim.repro()
    assert not a.send_entries["b"].window.msgs, sim.repro()


@pytest.mark.parametrize("variant", ALL)
def test_first_and_last_message_dropped(variant: str) -> None:
    """Combines the two JGroups tests, which this file is named after but which JGroups never runs together. On a
    fresh connection, A sends 5 messages to B, and both message 1 (first=true) and message 5 are dropped. B
    receives 2-4 with no window for A. In unicast3 B asks for a SYNC, in unicast2 for SEND_FIRST_SEQNO, and
    unicast1 simply buffers them. All 5 must still be delivered in order, exactly once."""
    count = 5
    sim = make(variant, seed=203)
    dropped: list[UnicastData] = []
    sim.drop_matching("a", "b", UnicastData, where=lambda m: m.seqno in (1, count) and dropped.append(m) is None,
                      count=2)   # the first transmissions of #1 and #5 (all five leave before any resend)
    sent = send_many(sim, "a", "b", count)
    assert [(m.seqno, m.payload) for m in dropped] == [(1, sent[0]), (count, sent[-1])], dropped
    settle(sim)
    expect(sim, "b", "a", sent)
    resync = {e["kind"] for e in sim.emitted("resync_tx", node="b")}
    assert resync == {"unicast3": {"sync", "sync_ack"}, "unicast2": {"first_seqno_req"}, "unicast1": set()}[variant], (
        resync, sim.repro())
