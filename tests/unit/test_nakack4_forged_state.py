"""A window moved by a BcastState heals when its sender's own traffic contradicts the move (nakack4.py,
"Skips the sender contradicts"): nothing a datagram says can silence a member for good.

The fuzzer's case: one forged `BcastState(next_seqno=16385, low_seqno=16383, flags=1)` "from" n2 reaches n1
while n1's window for n2 is near 100. n1 skips to 16382 (it acks only what it delivered, so n2's acks of n1 stay
where they were; an ack of 16382 would be discarded by n2 anyway, above what it sent). n2's next multicast (or
its HIGHEST when idle) is below n1's window but above what n1 delivered: n1 counts `contradicted_skip` and asks
n2 for its state; n2's answer (low = its ack of n1 + 1) moves the window back down, never below what n1
delivered, and retransmission brings the rest: n2's stream is delivered in order and exactly once. The class:
a forged state that opens a window, and a forged answer, are covered too. A legitimate skip (the sender purged
what a partitioned receiver lacked) is contradicted only by a late original of the skipped range; the sender's
answer confirms it and nothing is reopened.
"""
from __future__ import annotations

import pytest

from node.core import make_payload
from node.multicast import Nakack4Config
from node.multicast.sim import AppSender, multicast, multicast_sim, nak
from node.sim.network import LinkSpec
from node.wire import BcastState, Nakack4Ack, Nakack4Msg

MEMBERS = ("n1", "n2", "n3")
FORGED = BcastState(next_seqno=16385, low_seqno=16383, flags=1)
FORGED_LOW = FORGED.low_seqno - 1


def payloads(member: str, first: int, last: int, tag: str = "m") -> list[bytes]:
    return [make_payload(f"{member}.{tag}.{n}", 16) for n in range(first, last + 1)]


def assert_once_in_order(sim, receiver: str, sender: str, expected: list[bytes]) -> None:
    got = sim.delivered(receiver, sender)
    assert len(got) == len(set(got)), f"{receiver} delivered a multicast of {sender} twice; {sim.repro()}"
    assert got == expected, (f"{receiver} from {sender}: {len(got)} delivered, {len(expected)} expected, first "
                             f"difference at {next((i for i, (g, e) in enumerate(zip(got, expected)) if g != e), None)}"
                             f"; {sim.repro()}")


@pytest.mark.parametrize("seed", range(3))
def test_a_forged_state_mid_stream_does_not_silence_the_sender(seed: int) -> None:
    config = Nakack4Config(capacity=64, sync_interval_ms=200)
    sim = multicast_sim(MEMBERS, seed=seed, config=config, with_membership=False,
                        link=LinkSpec(delay_ms=2, jitter_ms=1))
    sender = AppSender(sim, "n2", 400, tag="s", rate_per_s=100).start(0.1)

    def window():
        return nak(sim, "n1").windows["n2"].window

    assert sim.run_until_true(lambda: window().low >= 100, 5.0), sim.repro()
    sent_before, delivered_before = len(sender.sent), len(sim.delivered("n1", "n2"))
    sim.inject("n2", "n1", FORGED)
    sim.run_for(0.001)
    # the path under test was taken: n1 skipped its window far beyond anything n2 sent
    [skip] = sim.emitted("bcast_skip", node="n1", peer="n2")
    assert skip["low"] == FORGED_LOW and window().low >= FORGED_LOW, sim.repro()
    assert sim.run_until_true(lambda: sender.done and len(sim.delivered("n1", "n2")) >= sender.count, 15.0), (
        f"n2 sent {len(sender.sent)}, n1 delivered {len(sim.delivered('n1', 'n2'))} (window low "
        f"{window().low}); {sim.repro()}")
    sim.run_for(1.0)
    assert len(sender.sent[sent_before:]) > 250, sim.repro()
    # every multicast of n2, those after the forgery included, once and in order; n3 saw nothing of it
    assert_once_in_order(sim, "n1", "n2", sender.sent)
    assert_once_in_order(sim, "n3", "n2", sender.sent)
    n1, n2 = nak(sim, "n1"), nak(sim, "n2")
    assert not n2.counters["acks_above_sent"], f"n1 acks what it delivered, never the forged low; {sim.repro()}"
    assert n1.counters["contradicted_skip"] >= 1 and n1.counters["skips_undone"] == 1, (n1.counters, sim.repro())
    [undone] = [e for e in sim.emitted("bcast_window", node="n1", peer="n2") if "reopened" in e]
    assert undone["low"] == delivered_before, (undone, sim.repro())   # back to what n1 really delivered
    assert not n2.blocked and n2.acks["n1"] == sender.count, sim.repro()


def test_an_idle_senders_highest_contradicts_a_forged_skip() -> None:
    """n2's last multicast to n1 is lost, then the forgery comes and n2 goes idle: its HIGHEST (the sender's own
    traffic too) contradicts the skip, and the lost message is delivered."""
    config = Nakack4Config(capacity=64, ack_threshold=1, sync_interval_ms=200)
    sim = multicast_sim(MEMBERS, seed=7, config=config, with_membership=False)
    sent = payloads("n2", 1, 6)
    for p in sent[:5]:
        multicast(sim, "n2", p)
    sim.run_for(0.5)
    sim.drop_next("n2", "n1", Nakack4Msg)
    multicast(sim, "n2", sent[5])
    sim.inject("n2", "n1", FORGED)
    sim.run_for(2.0)
    assert sim.emitted("bcast_skip", node="n1", peer="n2", low=FORGED_LOW), sim.repro()
    assert_once_in_order(sim, "n1", "n2", sent)
    assert nak(sim, "n1").counters["contradicted_skip"] >= 1 and nak(sim, "n2").acks["n1"] == 6, sim.repro()


def test_a_forged_answer_reopens_nothing_that_was_delivered() -> None:
    """The answer to the contradiction is forged too, with low 1, while n2 still holds all it sent (n3's acks
    are lost): the window goes back to what n1 delivered (10), not to 0, so 1..10 are not delivered twice."""
    config = Nakack4Config(capacity=64, ack_threshold=1, sync_interval_ms=200)
    sim = multicast_sim(MEMBERS, seed=10, config=config, with_membership=False)
    sim.drop_matching("n3", "n2", Nakack4Ack)
    sent = payloads("n2", 1, 20)
    for p in sent[:10]:
        multicast(sim, "n2", p)
    sim.run_for(0.5)
    assert nak(sim, "n2").send.get(1) == sent[0], f"n2 still holds what n1 delivered; {sim.repro()}"
    real_answer = sim.hold("n2", "n1", BcastState)
    sim.inject("n2", "n1", FORGED)
    multicast(sim, "n2", sent[10])                               # contradicts the skip: n1 asks n2
    sim.run_for(0.05)
    assert nak(sim, "n1").windows["n2"].contradicted, sim.repro()
    sim.inject("n2", "n1", BcastState(next_seqno=12, low_seqno=1, flags=1))
    sim.run_for(0.05)
    assert nak(sim, "n1").windows["n2"].window.low == 10, sim.repro()
    sim.release(real_answer)
    for p in sent[11:]:
        multicast(sim, "n2", p)
        sim.run_for(0.02)
    sim.run_for(2.0)
    assert_once_in_order(sim, "n1", "n2", sent)


def test_a_forged_state_that_opens_the_window_of_a_joining_member_heals_too() -> None:
    """n2 joins n1 and n3; before n2's real state reaches n1 a forged one opens n1's window for n2 at 16382. The
    real state (low 1) cannot move it down by itself (a skip only moves up), but n2's multicasts contradict it."""
    config = Nakack4Config(capacity=16, ack_threshold=1, sync_interval_ms=200)
    sim = multicast_sim(MEMBERS, seed=8, config=config, with_membership=False,
                        initial={"n1": ("n1", "n3"), "n3": ("n1", "n3"), "n2": ("n2",)})
    sim.run_for(0.2)
    held = sim.hold("n2", "n1", BcastState)
    for member in MEMBERS:
        sim.install_view(member, MEMBERS, ("n1", 2))
    sim.inject("n2", "n1", FORGED)
    sim.run_for(0.05)
    assert nak(sim, "n1").windows["n2"].window.low == FORGED_LOW, sim.repro()
    sim.release(held)
    sim.run_for(0.5)
    sent = payloads("n2", 1, 40)
    for p in sent:
        multicast(sim, "n2", p)   # never blocks: n3 acks, and n1's acks come back once healed
        sim.run_for(0.05)
    sim.run_for(2.0)
    assert_once_in_order(sim, "n1", "n2", sent)
    assert_once_in_order(sim, "n3", "n2", sent)
    assert nak(sim, "n1").counters["skips_undone"] == 1, sim.repro()


def test_a_legitimate_skip_is_confirmed_not_undone() -> None:
    """b is cut off from a (views drop each other) while a multicasts 20 more with a ring of 8: a purges what b
    lacks, and a's state on b's return skips b's window up (4..16 lost). Then a late original of the skipped
    range (4, held back since before the cut) reaches b: b counts the contradiction and asks a, and a's answer
    confirms the skip: nothing is reopened, nothing purged is asked for, nothing is delivered twice."""
    config = Nakack4Config(capacity=8, ack_threshold=1, retain_departed_ms=10_000, sync_interval_ms=200)
    sim = multicast_sim(("a", "b", "c"), seed=9, config=config, with_membership=False)
    for p in payloads("a", 1, 3):
        multicast(sim, "a", p)
    sim.run_for(0.5)
    late = sim.hold("a", "b", Nakack4Msg, where=lambda m: m.seqno == 4)
    multicast(sim, "a", payloads("a", 4, 4)[0])
    sim.partition_both("a", "b")
    for member in ("a", "c"):
        sim.install_view(member, ("a", "c"), ("a", 2))
    sim.install_view("b", ("b",), ("b", 2))
    for p in payloads("a", 5, 24):
        multicast(sim, "a", p)
        sim.run_for(0.02)
    sim.heal()
    for member in ("a", "b", "c"):
        sim.install_view(member, ("a", "b", "c"), ("a", 3))
    sim.run_for(0.05)                                            # a's state: b skips what a purged
    [skip] = sim.emitted("bcast_skip", node="b", peer="a")
    assert skip["lost"] == 13 and skip["low"] == 16, (skip, sim.repro())
    released_s = sim.now_s
    sim.release(late)                                            # the late original 4 contradicts the skip
    sim.run_for(1.0)
    multicast(sim, "a", payloads("a", 25, 25)[0])
    sim.run_for(1.0)
    layer = nak(sim, "b")
    assert sim.emitted("data_rx", node="b", seqno=4, reason="contradicts_skip"), sim.repro()
    assert layer.counters["contradicted_skip"] == 1, (layer.counters, sim.repro())
    assert [e for e in sim.emitted("bcast_state_tx", node="a", peer="b") if e["ts"] > released_s], \
        f"b asked, and a answered with its state; {sim.repro()}"
    assert layer.counters["skips_undone"] == 0 and not layer.windows["a"].contradicted, sim.repro()
    assert not [e for e in sim.emitted("xmit_req_rx", node="a") if e["missing"]], \
        f"nothing purged was asked for; {sim.repro()}"
    assert_once_in_order(sim, "b", "a", payloads("a", 1, 3) + payloads("a", 17, 25))
