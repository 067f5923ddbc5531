"""Retransmission only for gaps that persist (JGroups' NAKACK xmit task): a retransmit run asks only for seqnos
that were already missing at the previous run, so reordering without loss asks for (almost) nothing, while a
real loss is still asked for one run later and everything is delivered.

The reordering scenario of the issue: 3 nodes, 2,000 multicasts at 500/s over links with 30 ms delay and
30 ms jitter and no loss. Asking on the first gap made 78-80 XMIT_REQs there (every seed); the bound below is
<= 3 (under 4 % of that)."""
from __future__ import annotations

import pytest

from node.core import make_payload
from node.multicast.sim import AppSender, all_delivered, multicast, multicast_sim, nak
from node.sim.network import LinkSpec
from node.wire import Nakack4Msg

MEMBERS = ("n1", "n2", "n3")
REORDERING = LinkSpec(delay_ms=30, jitter_ms=30)


def run(seed: int, link: LinkSpec, count: int = 2000, rate_per_s: float = 500):
    sim = multicast_sim(MEMBERS, seed=seed, link=link)
    sim.run_for(0.5)
    sender = AppSender(sim, "n1", count, rate_per_s=rate_per_s).start()
    done = sim.run_until_true(lambda: sender.done and all_delivered(sim, [sender], MEMBERS), 60.0)
    return sim, sender, done


@pytest.mark.parametrize("seed", range(3))
def test_reordering_without_loss_asks_for_almost_nothing(seed: int) -> None:
    sim, sender, done = run(seed, REORDERING)
    assert done, sim.repro()
    # the links did reorder: many messages arrived behind a gap (each such gap was asked for before the fix)
    behind_gap = len(sim.emitted("data_rx", action="buffer", **{"from": "n1"}))
    assert behind_gap > 200, (behind_gap, sim.repro())
    requests = sim.emitted("xmit_req_tx")
    assert len(requests) <= 3, (len(requests), requests[:5], sim.repro())
    for receiver in ("n2", "n3"):
        assert sim.delivered(receiver, "n1") == sender.sent, sim.repro()


@pytest.mark.parametrize("seed", range(3))
def test_with_loss_every_multicast_is_still_delivered_in_order_once(seed: int) -> None:
    lossy = LinkSpec(delay_ms=30, jitter_ms=30, loss_pct=10)
    sim, sender, done = run(seed, lossy, count=1000)
    assert done, sim.repro()
    assert sim.emitted("xmit_req_tx") and sim.counters["lost"] > 50, sim.repro()
    for receiver in ("n2", "n3"):
        assert sim.delivered(receiver, "n1") == sender.sent, sim.repro()
    assert sim.run_until_true(lambda: settled(sim), 5.0), f"nakack4 still busy; {sim.repro()}"


def settled(sim) -> bool:
    """Every send window fully acked, no gap or buffered message anywhere."""
    for member in MEMBERS:
        layer = nak(sim, member)
        if layer.send.low != layer.send.high or any(e.window.has_gaps() or e.window.buffered
                                                    for e in layer.windows.values()):
            return False
    return True


def test_a_gap_is_asked_for_at_the_second_run_that_sees_it_not_the_first() -> None:
    sim = multicast_sim(("a", "b"), seed=4, with_membership=False)
    sim.drop_next("a", "b", Nakack4Msg, where=lambda m: m.seqno == 2)
    for n in (1, 2, 3):
        multicast(sim, "a", make_payload(f"a.m.{n}", 16))
    interval_s = nak(sim, "b").config.xmit_interval_ms / 1000
    sim.run_for(1.5 * interval_s)                 # the first run (at one interval) saw the gap: no request yet
    assert nak(sim, "b").windows["a"].prev_highest_missing == 2
    assert not sim.emitted("xmit_req_tx", node="b"), sim.repro()
    sim.run_for(interval_s)                       # the second run asks for it
    assert [e["seqnos"] for e in sim.emitted("xmit_req_tx", node="b")] == [[2]]
    assert sim.run_until_quiet(5.0) and sim.delivered("b", "a") == [make_payload(f"a.m.{n}", 16) for n in (1, 2, 3)]
    assert nak(sim, "b").windows["a"].prev_highest_missing is None
