"""The broadcast-link start race of TIPC c64f7a6a, steps 1-12 of the seed, in the simulator: shown under
`bcast_sync: legacy`, absent under `tipc`; and a tipc node with a legacy peer falls back to the legacy path.

Setup: a and c form a group; b has been on its own. Both sides multicast 5 messages (a's are acked by c and
released; b's went to nobody and are released). Then one view joins them: a's start message to b (legacy: the
link ACTIVATE, tipc: BCAST_STATE) and b's to a are held back, exactly as the seed's steps need.
"""
from __future__ import annotations

import pytest

from node.core import make_payload
from node.multicast import Nakack4Config
from node.multicast.sim import multicast, multicast_sim, nak
from node.wire import BcastState

CONFIG = Nakack4Config(ack_threshold=1, retain_departed_ms=0)


def payloads(member: str, first: int, last: int) -> list[bytes]:
    return [make_payload(f"{member}.m.{n}", 16) for n in range(first, last + 1)]


def race(mode: str, modes: dict[str, str] | None = None):
    """Run the seed's steps; returns the simulator after step 12 plus a settling time."""
    sim = multicast_sim(("a", "b", "c"), seed=64, config=CONFIG, bcast_sync=modes or mode, with_membership=False,
                        initial={"a": ("a", "c"), "c": ("a", "c"), "b": ("b",)})
    for p in payloads("a", 1, 5):
        multicast(sim, "a", p)
    for p in payloads("b", 1, 5):
        multicast(sim, "b", p)
    sim.run_for(0.5)
    assert nak(sim, "a").send.low == 5 and nak(sim, "b").send.low == 5, sim.repro()
    a_to_b = sim.hold("a", "b", BcastState, count=1)            # step 1: a's start message to b is delayed
    b_to_a = sim.hold("b", "a", BcastState, count=1)            # (and b's to a, for steps 10-12)
    for member in ("a", "b", "c"):
        sim.install_view(member, ("a", "b", "c"), ("a", 2))
    multicast(sim, "a", payloads("a", 6, 6)[0])                 # step 2: broadcast N=6
    sim.run_for(0.05)                                           # step 3: c acks 6; b dropped it (link not up)
    sim.release(a_to_b)                                         # step 4: b activates, expecting 6
    sim.run_for(0.05)                                           # steps 5-6: b's ACK reaches a
    multicast(sim, "a", payloads("a", 7, 7)[0])                 # step 7: broadcast N+1
    multicast(sim, "b", payloads("b", 6, 6)[0])                 # step 10: b broadcasts M=6
    sim.run_for(1.0)                                            # steps 8-9 and 11-12 (and their repeats)
    sim.release(b_to_a)
    sim.run_for(1.0)
    return sim


def stale(sim, node: str, requester: str) -> list[int]:
    """Seqnos `node` was asked for by `requester` and no longer held."""
    return sorted({s for e in sim.emitted("xmit_req_rx", node=node) if e["from"] == requester for s in e["missing"]})


def test_legacy_shows_both_stale_links_of_the_seed() -> None:
    sim = race("legacy")
    # steps 2-3: a released 6 although b never had it (b was not yet among a's receivers)
    assert sim.emitted("data_rx", node="b", action="no_conn", seqno=6), sim.repro()
    # steps 4 and 8-9: b started at 6, received 7, asked for 6, which a no longer has: a stale link a -> b
    assert stale(sim, "a", "b") == [6], sim.repro()
    asked = len([e for e in sim.emitted("xmit_req_rx", node="a") if e["missing"]])
    sim.run_for(5.0)
    assert len([e for e in sim.emitted("xmit_req_rx", node="a") if e["missing"]]) >= asked + 4, "again and again"
    assert nak(sim, "b").windows["a"].window.low == 5
    # steps 6 and 10-12: a guessed 0 as b's start, received 6, asked for 1..5, which b released: stale b -> a
    assert stale(sim, "b", "a") == [1, 2, 3, 4, 5], sim.repro()
    assert sim.emitted("bcast_window", node="a", peer="b", how="guess")
    assert sim.delivered("b", "a") == [] and sim.delivered("a", "b") == []
    assert not sim.run_until_quiet(5.0), "a stale link never goes quiet"


def test_tipc_has_neither_race_and_delivers_everything_sent_after_the_join() -> None:
    sim = race("tipc")
    assert stale(sim, "a", "b") == [] and stale(sim, "b", "a") == [], sim.repro()
    # a kept 6 for b (b counted from the moment it was added), b got it by retransmission
    assert sim.delivered("b", "a") == payloads("a", 6, 7), sim.repro()
    # a accepted nothing from b before b's state; then started at b's next seqno
    assert sim.emitted("data_rx", node="a", action="no_conn", seqno=6)
    assert sim.delivered("a", "b") == payloads("b", 6, 6), sim.repro()
    assert sim.delivered("c", "a") == payloads("a", 1, 7) and sim.delivered("c", "b") == payloads("b", 6, 6)
    tx = sim.emitted("bcast_state_tx", node="a", peer="b")
    assert tx[0]["next_seqno"] == 6 and tx[0]["low"] == 6
    assert sim.run_until_quiet(5.0), f"tipc should settle; {sim.repro()}"


def test_a_tipc_node_falls_back_to_the_legacy_path_with_a_legacy_peer() -> None:
    """a runs tipc, b legacy: b's hello has no capability bit, so a treats b the legacy way (b -> a races as
    before, steps 10-12), while a's own BCAST_STATE still protects a -> b."""
    sim = race("tipc", modes={"a": "tipc", "b": "legacy", "c": "tipc"})
    assert "b" in nak(sim, "a").sync.legacy_peers
    assert stale(sim, "a", "b") == [], sim.repro()
    assert sim.delivered("b", "a") == payloads("a", 6, 7)
    assert stale(sim, "b", "a") == [1, 2, 3, 4, 5], sim.repro()


@pytest.mark.parametrize("mode", ["tipc", "legacy"])
def test_without_delays_both_modes_join_cleanly(mode: str) -> None:
    sim = multicast_sim(("a", "b", "c"), seed=5, config=CONFIG, bcast_sync=mode, with_membership=False,
                        initial={"a": ("a", "c"), "c": ("a", "c"), "b": ("b",)})
    for p in payloads("a", 1, 3):
        multicast(sim, "a", p)
    sim.run_for(0.5)
    for member in ("a", "b", "c"):
        sim.install_view(member, ("a", "b", "c"), ("a", 2))
    sim.run_for(0.5)
    for p in payloads("a", 4, 6):
        multicast(sim, "a", p)
    assert sim.run_until_quiet(5.0), sim.repro()
    assert sim.delivered("b", "a") == payloads("a", 4, 6)
    assert sim.delivered("c", "a") == payloads("a", 1, 6)
