"""JGroups' NAKACK delivery tests, ported to the simulator (written from their description in our issue
tracker, not from the JGroups sources): massive loss recovered by retransmission with every message delivered
once and in order, and a sender whose window is full while members are suspected, removed and merged back
again and again, which must never stay blocked."""
from __future__ import annotations

from collections import Counter

from node.multicast import Nakack4Config
from node.multicast.sim import AppSender, all_delivered, multicast_sim, nak
from node.sim.network import LinkSpec
from node.wire import Nakack4Msg

COUNT = 50_000


def test_every_other_multicast_dropped_all_50000_delivered_in_order_exactly_once() -> None:
    """Ports NAKACK_Delivery_Test / NAKACK4_DeliveryTest: 50,000 multicasts, every other one dropped on its way
    to every receiver; retransmission delivers all of them, in order, exactly once."""
    members = ("a", "b", "c")
    sim = multicast_sim(members, seed=50, with_membership=False, record_events=False)
    sim.drop_matching("a", None, Nakack4Msg, where=lambda m: m.seqno % 2 == 0)  # originals only, not resends
    sender = AppSender(sim, "a", COUNT, size=8).start()
    done = sim.run_until_true(lambda: sender.done and all_delivered(sim, [sender], members), 120.0)
    assert done, f"{len(sender.sent)} sent, delivered {[len(sim.delivered(r, 'a')) for r in ('b', 'c')]}; " \
                 f"{sim.repro()}"
    assert sim.counters["fault_dropped"] >= COUNT  # half of 50,000 to each of two receivers
    for receiver in ("b", "c"):
        assert sim.delivered(receiver, "a") == sender.sent, f"{receiver}: order or duplicates; {sim.repro()}"
    assert nak(sim, "a").counters["resent"] >= COUNT
    assert sim.run_until_true(lambda: nak(sim, "a").send.low == COUNT, 5.0), sim.repro()


def test_suspicions_while_the_window_is_full_never_block_the_sender_for_good() -> None:
    """Ports NAKACK4_Test's blocked-sender cases: c is cut off three times while a multicasts into a small
    window; each time a's window fills (c does not ack), c is suspected and removed, which releases a; after
    each heal c is merged back. a is never blocked for good, b gets everything exactly once in order, and c
    gets exactly once, in order, everything sent while it was in a's view."""
    members = ("a", "b", "c")
    sim = multicast_sim(members, seed=4, config=Nakack4Config(capacity=16, ack_threshold=4),
                        link=LinkSpec(delay_ms=2, jitter_ms=1))
    sim.run_for(0.5)
    sender = AppSender(sim, "a", 2400, rate_per_s=200).start()
    cuts = [(1.0, 3.5), (6.0, 8.5), (11.0, 13.5)]
    for start_s, end_s in cuts:
        sim.at(start_s, lambda: (sim.partition_both("a", "c"), sim.partition_both("b", "c")))
        sim.at(end_s, sim.heal)
    blocked_for_s: list[float] = []
    sim.run_until_true(lambda: sender.done and all_delivered(sim, [sender], ("b",)), 30.0)
    assert sender.done and all_delivered(sim, [sender], ("b",)), sim.repro()
    assert sim.run_until_true(lambda: not nak(sim, "a").blocked and nak(sim, "a").send.low == len(sender.sent)
                              and len(sim.delivered("c", "a")) > 0, 10.0), sim.repro()
    full = sim.emitted("window_full", node="a")
    unblocked = sim.emitted("window_unblocked", node="a")
    for start_s, _end_s in cuts:  # the window filled during every cut, and a removal released it
        during = [e for e in full if start_s <= e["ts"] <= start_s + 3.0]
        assert during, f"the window did not fill during the cut at {start_s}s; {sim.repro()}"
        released = [e for e in unblocked if e["ts"] >= during[0]["ts"]]
        assert released, sim.repro()
        blocked_for_s.append(released[0]["ts"] - during[0]["ts"])
    assert len(unblocked) >= len(full) and max(blocked_for_s) < 3.0, (blocked_for_s, sim.repro())
    views = [tuple(e["members"]) for e in sim.emitted("view", node="a")]
    assert views.count(("a", "b")) >= 3 and views[-1] == members, views
    assert sim.delivered("b", "a") == sender.sent, sim.repro()
    got = sim.delivered("c", "a")
    assert not [p for p, n in Counter(got).items() if n > 1], f"c delivered some twice; {sim.repro()}"
    order = {p: i for i, p in enumerate(sender.sent)}
    assert [order[p] for p in got] == sorted(order[p] for p in got), f"c out of order; {sim.repro()}"
    # after the last merge c gets everything a sends
    merged_s = max(sim.emitted("view", node=n)[-1]["ts"] for n in ("a", "c"))
    after = [sender.sent[e["seqno"] - 1] for e in sim.emitted("data_tx", node="a", to="*") if e["ts"] > merged_s]
    assert after and got[-len(after):] == after, sim.repro()
