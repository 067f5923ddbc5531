"""Sending in order (the NAKACK4 seed's "Misc"): concurrent application threads that take a seqno and are then
descheduled before their message goes out make receivers see gaps that are only reordering, and ask for
(spurious) retransmissions. With `send_atomic` the seqno is taken and the message sent under one lock, so the
messages leave in seqno order and no retransmission is asked for. The `stall_ms` argument of `send` is the
simulator's model of the descheduling."""
from __future__ import annotations

import pytest

from node.core import make_payload
from node.multicast import Nakack4Config
from node.multicast.sim import multicast, multicast_sim, nak

THREADS = 4
PER_THREAD = 40


def run(send_atomic: bool, seed: int = 31):
    config = Nakack4Config(send_atomic=send_atomic, xmit_interval_ms=100)
    sim = multicast_sim(("a", "b", "c"), seed=seed, config=config, with_membership=False)
    rng = sim.rng
    order: list[bytes] = []  # the order in which the threads called send (= seqno order)

    def thread(index: int, n: int) -> None:
        if n > PER_THREAD:
            return
        payload = make_payload(f"a.t{index}.{n}", 16)
        stall_ms = rng.uniform(0, 250)
        multicast(sim, "a", payload, stall_ms=stall_ms)
        order.append(payload)
        sim.at(sim.now_s + stall_ms / 1000 + rng.uniform(0, 0.02), lambda: thread(index, n + 1))

    for index in range(THREADS):
        sim.at(rng.uniform(0, 0.05), lambda i=index: thread(i, 1))
    assert sim.run_until_quiet(60.0), sim.repro()
    return sim, order


def spurious(sim) -> dict[str, int]:
    rx = [nak(sim, m).counters for m in ("b", "c")]
    return {"xmit_reqs": len(sim.emitted("xmit_req_tx")),
            "spurious_xmit_reqs": sum(c["spurious_xmit_reqs"] for c in rx),
            "resent_before_sent": nak(sim, "a").counters["resent_before_sent"]}


def test_without_send_atomic_stalled_threads_cause_spurious_retransmissions() -> None:
    sim, order = run(send_atomic=False)
    counts = spurious(sim)
    assert counts["xmit_reqs"] > 0 and counts["spurious_xmit_reqs"] > 0, counts
    assert counts["resent_before_sent"] > 0, counts  # asked for messages whose thread had not even sent them yet
    assert sim.delivered("b", "a") == order and sim.delivered("c", "a") == order, sim.repro()


def test_with_send_atomic_messages_leave_in_order_and_nothing_is_asked_for() -> None:
    sim, order = run(send_atomic=True)
    counts = spurious(sim)
    assert counts == {"xmit_reqs": 0, "spurious_xmit_reqs": 0, "resent_before_sent": 0}, counts
    assert sim.delivered("b", "a") == order and sim.delivered("c", "a") == order, sim.repro()
    sent = [e["seqno"] for e in sim.emitted("data_tx", node="a")]
    assert sent == sorted(sent) == list(range(1, THREADS * PER_THREAD + 1))


@pytest.mark.parametrize("seed", range(5))
def test_the_counts_differ_for_other_seeds_too(seed: int) -> None:
    loose, _ = run(False, seed)
    atomic, _ = run(True, seed)
    assert spurious(loose)["spurious_xmit_reqs"] > spurious(atomic)["spurious_xmit_reqs"] == 0
