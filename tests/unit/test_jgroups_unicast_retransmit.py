"""JGroups' UNICAST_RetransmitTest ported to the seeded simulator: messages dropped in the middle of a stream are
retransmitted, and the receiver delivers every message in order, exactly once. Retransmission has to work when
the gaps are too many for one XMIT_REQ or one bundle (JGRP-1868).

The JGroups test runs UNICAST3 and UNICAST4 with max_bundle_size 10,000 bytes and max_xmit_req_size 5,000.
Here the simulator bundles at most 10,000 bytes per datagram (`bundle_max_bytes`) and the layer asks for at
most 5,000 seqnos per retransmit run (`max_xmit_req_seqnos`); the unicast layer splits that request into
XMIT_REQ messages of at most `XMIT_REQ_CHUNK` seqnos each. unicast3 must deliver everything. The legacy
variants run too: the seeds name no breakage for losses on a connection that stays up, so they must deliver
everything as well. unicast1 has no XMIT_REQ at all: its sender resends every unacked message on each run.
"""
from __future__ import annotations

import pytest

from node.core import payload_msg_id
from node.sim import send_many, unicast_sim
from node.sim.network import LinkSpec
from node.sim.simulator import Simulator
from node.unicast import UnicastConfig
from node.unicast.base import XMIT_REQ_CHUNK
from node.wire import UnicastData, UnicastXmitReq
from sim_helpers import settle

LAYER = "unicast"
ALL = ("unicast3", "unicast2", "unicast1")
MAX_BUNDLE_BYTES = 10_000      # JGroups' MAX_BUNDLE_SIZE
MAX_XMIT_REQ_SEQNOS = 5_000    # JGroups' setMaxXmitReqSize(5000)
NUM_MSGS = 50_000              # JGroups' NUM_MSGS, not scaled down: a few seconds per variant


def expect_in_order_once(sim: Simulator, receiver: str, sender: str, sent: list[bytes]) -> None:
    got = sim.delivered(receiver, sender)
    if got == sent:
        return
    ids = sim.delivered_ids(receiver, sender)
    wrong = next((i for i, (g, s) in enumerate(zip(got, sent)) if g != s), min(len(got), len(sent)))
    raise AssertionError(f"{receiver} from {sender}: {len(got)} delivered, {len(sent)} sent; first difference at "
                         f"#{wrong + 1}: got {ids[wrong:wrong + 5]}, expected "
                         f"{[payload_msg_id(p) for p in sent[wrong:wrong + 5]]}; {sim.repro()}")



@pytest.mark.parametrize("variant", ALL)
def test_large_retransmission(variant: str) -> None:
    """Ports testLargeRetransmission (JGRP-1868). With the retransmit tasks of both members stopped, A sends
    50,000 messages to B while a protocol below it discards every other unicast message (the 1st, 3rd, ...).
    Then the discarding stops, the retransmit tasks start again, and B must deliver 1..50,000 in order.

    JGroups stops the tasks with stopRetransmitTask and sleeps for 500 ms. Here all 50,000 sends happen at one
    virtual instant, so no retransmit run can fall between them. The drop fault, which alternates like JGroups'
    DiscardEveryOtherUnicastMessage, is removed before the clock moves. Because message 1 was discarded, B had
    no window when messages 2, 4, ... arrived. The test checks what each variant did with them before any
    retransmit run:
    - unicast3 dropped them and synced;
    - unicast2 dropped them and got message 1 back through SEND_FIRST_SEQNO;
    - unicast1 buffered them.
    JGroups waits 15 s of wall-clock time;
    here the bound is 15 s of virtual time. Beyond JGroups' assertions, the test requires no XMIT_REQ to ask
    for more than max_xmit_req_seqnos seqnos or to carry more than one chunk, so no request is ever too big for a
    datagram."""
    sim = unicast_sim(variant, ("a", "b"), seed=301, bundle_max_bytes=MAX_BUNDLE_BYTES,
                      config=UnicastConfig(max_xmit_req_seqnos=MAX_XMIT_REQ_SEQNOS), record_events=False)
    toggle = [False]

    def every_other(_msg) -> bool:
        toggle[0] = not toggle[0]
        return toggle[0]

    discard = sim.drop_matching("a", "b", None, where=every_other)
    sent = send_many(sim, "a", "b", NUM_MSGS)
    sim.remove_fault(discard)
    assert sim.counters["fault_dropped"] == NUM_MSGS // 2
    sim.run_for(0.05)   # the other half arrives; still no retransmit run (xmit_interval 100 ms)
    # message 1 was discarded, and B had no window when 2, 4, ... came: unicast3 dropped them and synced (its
    # window is empty), unicast2 dropped them and got #1 back (SEND_FIRST_SEQNO), unicast1 buffers them
    early = sim.delivered("b", "a")
    assert early == sent[:len(early)] and len(early) == (1 if variant == "unicast2" else 0), sim.repro()
    buffered = len(sim.layer("b", LAYER).recv_entries["a"].window.buffered)
    assert buffered == (NUM_MSGS // 2 if variant == "unicast1" else 0), (buffered, sim.repro())
    sim.record_events = True    # record the retransmission phase only (events of 50,000 sends are slow to keep)
    ok = sim.run_until_true(lambda: len(sim.deliveries["b"].get("a", ())) >= NUM_MSGS, 15.0)
    assert ok, f"{len(sim.delivered('b', 'a'))} of {NUM_MSGS} delivered after 15 s; {sim.repro()}"
    settle(sim)
    expect_in_order_once(sim, "b", "a", sent)
    assert not sim.layer("a", LAYER).send_entries["b"].window.msgs, sim.repro()
    asked = sim.emitted("xmit_req_tx", node="b")
    if variant == "unicast1":
        assert not asked
        assert len(sim.emitted("data_tx", node="a", resend=True)) >= NUM_MSGS // 2
        return
    assert sum(len(e["seqnos"]) for e in asked) >= NUM_MSGS // 2, sim.repro()
    assert max(len(e["seqnos"]) for e in asked) <= min(XMIT_REQ_CHUNK, UnicastXmitReq.MAX_SEQNOS)
    per_run: dict[float, int] = {}
    for e in asked:
        per_run[e["ts"]] = per_run.get(e["ts"], 0) + len(e["seqnos"])
    assert max(per_run.values()) <= MAX_XMIT_REQ_SEQNOS, (max(per_run.values()), sim.repro())


@pytest.mark.parametrize("variant", ALL)
def test_messages_dropped_mid_stream_while_sending(variant: str) -> None:
    """A variant of testLargeRetransmission in which the retransmit task keeps running while A sends. A sends
    3,000 messages to B at one per ms, and the losses come at random points in the middle of the stream:
    - a burst: messages 1,000-1,199 are lost;
    - 5 % of the other data messages, drawn from the seed, first transmissions and resends alike;
    - B's first 3 XMIT_REQs;
    - on top, the link duplicates 3 % of datagrams and reorders 10 %.
    B must deliver 1..3,000 in order, exactly once. The count is scaled down from JGroups' 50,000 so that sends
    spread over virtual time still run in well under a second."""
    count = 3_000
    burst = range(1_000, 1_200)
    sim = unicast_sim(variant, ("a", "b"), seed=302, bundle_max_bytes=MAX_BUNDLE_BYTES,
                      config=UnicastConfig(max_xmit_req_seqnos=MAX_XMIT_REQ_SEQNOS),
                      link=LinkSpec(delay_ms=2.0, jitter_ms=1.0, dup_pct=3.0, reorder_pct=10.0, reorder_ms=5.0))
    rng = sim.rng
    seen: set[int] = set()
    lost: list[int] = []

    def lose(msg: UnicastData) -> bool:
        first_time = msg.seqno not in seen
        seen.add(msg.seqno)
        if (first_time and msg.seqno in burst) or rng.random() < 0.05:
            lost.append(msg.seqno)
            return True
        return False

    sim.drop_matching("a", "b", UnicastData, where=lose)
    sim.drop_matching("b", "a", UnicastXmitReq, count=3)
    sent: list[bytes] = []
    for n in range(count):
        sim.at(n / 1000, lambda: sent.extend(send_many(sim, "a", "b", 1, f"s{len(sent) + 1}")))
    sim.run_until(count / 1000)
    assert len(sent) == count
    settle(sim)
    expect_in_order_once(sim, "b", "a", sent)
    assert set(burst) <= set(lost) and len(set(lost)) > len(burst) + count // 50, (len(set(lost)), sim.repro())
    assert sim.counters["duplicated"] > 0, "the link was to duplicate some datagrams"
    assert not sim.layer("a", LAYER).send_entries["b"].window.msgs, sim.repro()
