"""JGroups' UNICAST_ContentionTest ported to the seeded simulator: members send to each other at the same time, from
many "threads", and every message is delivered exactly once, in each sender's order.

JGroups runs A and B over a shared loopback, with xmit_interval 500 ms and no loss, and counts deliveries. The
differences here:
- Every test runs with xmit_interval_ms=500, as in JGroups. Each one also runs a second time on lossy links
  (loss, jitter, duplication, reordering), since contention matters most when retransmissions compete with new
  sends.
- Only the count is checked in JGroups. Here each receiver's record from each sender must equal exactly what that
  sender sent, in its order. That also means each "thread" keeps its order.
- Threads are not OS threads. Each one is a sequence of sends scheduled at times drawn from the simulator's
  seeded random source, so their sends interleave in virtual time.
- JGroups' members also send to themselves. splitlab's unicast layer refuses a send to the local member, so
  those sends are left out, and each receiver expects only its peers' messages.
- The sizes are scaled down, and stated per test, so that the file runs in a few seconds.

The seeds name no legacy breakage on connections that stay up, so unicast2 and unicast1 must deliver everything
too.
"""
from __future__ import annotations

import pytest

from node.core import make_payload, payload_msg_id
from node.sim import unicast_sim
from node.sim.network import LinkSpec
from node.sim.simulator import Simulator
from node.unicast import UnicastConfig
from sim_helpers import settle

LAYER = "unicast"
ALL = ("unicast3", "unicast2", "unicast1")
XMIT_INTERVAL_MS = 500           # JGroups' setXmitInterval(500)
SIZE_BYTES = 1_000               # JGroups' SIZE
LINKS = {"clean": LinkSpec(),    # JGroups' shared loopback
         "lossy": LinkSpec(loss_pct=10.0, delay_ms=2.0, jitter_ms=1.5, dup_pct=2.0, reorder_pct=10.0, reorder_ms=5.0)}


def make(variant: str, members: tuple[str, ...], seed: int, link: str) -> Simulator:
    return unicast_sim(variant, members, seed, UnicastConfig(xmit_interval_ms=XMIT_INTERVAL_MS), link=LINKS[link],
                       record_events=False)


def send(sim: Simulator, src: str, dst: str, msg_id: str, sent: dict[tuple[str, str], list[bytes]]) -> None:
    payload = make_payload(msg_id, SIZE_BYTES)
    sim.request(src, LAYER, "send", {"to": dst, "payload": payload})
    sent.setdefault((src, dst), []).append(payload)



def expect_all(sim: Simulator, sent: dict[tuple[str, str], list[bytes]]) -> None:
    """Every receiver got exactly what each sender sent it, in the sender's order, once."""
    problems = []
    for (src, dst), payloads in sorted(sent.items()):
        got = sim.delivered(dst, src)
        if got != payloads:
            ids = sim.delivered_ids(dst, src)
            dups = len(ids) - len(set(ids))
            missing = len({payload_msg_id(p) for p in payloads} - set(ids))
            problems.append(f"{src}->{dst}: {len(got)} delivered of {len(payloads)} ({missing} missing, {dups} "
                            f"duplicates, first ids {ids[:5]})")
    assert not problems, "; ".join(problems) + f"; {sim.repro()}"


def xmits(sim: Simulator) -> int:
    """JGroups' getNumXmits, summed over every member: data messages resent."""
    total = 0
    for member in sim.stacks:
        total += sum(e.counters["resent"] for e in sim.layer(member, LAYER).send_entries.values())
    return total


@pytest.mark.parametrize("link", ["clean", "lossy"])
@pytest.mark.parametrize("variant", ALL)
def test_simple_message_reception(variant: str, link: str) -> None:
    """Ports testSimpleMessageReception: A and B each send NUM=100 messages to the other, interleaved in one loop
    as in JGroups (a->b, b->a per turn). JGroups' sends to self (a->a, b->b) are left out, so each receiver
    expects NUM messages rather than NUM * 2. The count is JGroups' own, not scaled."""
    num = 100
    sim = make(variant, ("a", "b"), seed=401, link=link)
    sent: dict[tuple[str, str], list[bytes]] = {}
    for n in range(1, num + 1):
        send(sim, "a", "b", f"a.b.{n}", sent)
        send(sim, "b", "a", f"b.a.{n}", sent)
    settle(sim)
    expect_all(sim, sent)
    assert {k: len(v) for k, v in sent.items()} == {("a", "b"): num, ("b", "a"): num}
    if link == "lossy":
        assert sim.counters["lost"] > 0 and xmits(sim) > 0, (dict(sim.counters), sim.repro())


@pytest.mark.parametrize("link", ["clean", "lossy"])
@pytest.mark.parametrize("members, threads, per_thread", [(("a", "b"), 20, 100), (("a", "b", "c", "d"), 20, 25)],
                         ids=["2-members", "4-members"])
@pytest.mark.parametrize("variant", ALL)
def test_message_reception_under_high_load(variant: str, members: tuple[str, ...], threads: int, per_thread: int,
                                           link: str) -> None:
    """Ports testMessageReceptionUnderHighLoad. In JGroups, NUM_THREADS=100 threads on A send NUM_MSGS=100
    messages each to B, and 100 threads on B do the same to A, all released by one latch: 10,000 messages per
    direction. The sizes are scaled down by 5 so that the file runs in a few seconds: with 2 members, 20 threads of
    100 messages per direction (2,000); with 4 members, 20 threads of 25 messages to each peer (500 per ordered
    pair, 6,000 in all). Each thread's sends are drawn over the first 2 s of virtual time and start together, like
    JGroups' latch. With 2 members this is JGroups' A<->B setup. With 4 members, every member sends to every
    other one at the same time, so one member's retransmissions, acks and new sends to three peers compete."""
    window_s = 2.0
    sim = make(variant, members, seed=402 + len(members), link=link)
    rng = sim.rng
    sent: dict[tuple[str, str], list[bytes]] = {}
    for src in members:
        for dst in members:
            if dst == src:
                continue
            for t in range(threads):
                times = sorted(rng.uniform(0.0, window_s) for _ in range(per_thread))
                for n, at_s in enumerate(times, 1):
                    msg_id = f"{src}.{dst}.t{t}.{n}"
                    sim.at(at_s, lambda s=src, d=dst, m=msg_id: send(sim, s, d, m, sent))
    sim.run_until(window_s)
    settle(sim)
    pairs = len(members) * (len(members) - 1)
    assert len(sent) == pairs and all(len(v) == threads * per_thread for v in sent.values()), sim.repro()
    expect_all(sim, sent)
    for src, dst in sent:   # each thread's own order survives the interleaving
        per_thread_ids: dict[str, list[str]] = {}
        for msg_id in sim.delivered_ids(dst, src):
            per_thread_ids.setdefault(msg_id.rsplit(".", 1)[0], []).append(msg_id)
        assert len(per_thread_ids) == threads, sim.repro()
        for prefix, ids in per_thread_ids.items():
            assert ids == [f"{prefix}.{n}" for n in range(1, per_thread + 1)], (ids[:10], sim.repro())
    if link == "lossy":
        assert sim.counters["lost"] > 0 and xmits(sim) > 0, (dict(sim.counters), sim.repro())
