"""Resync traffic (JGRP-1874), in the simulator: the receiver B dropped its receive window and then the sender
A sends a window of 1,000 messages. Every message that reaches B without a window asks for a resync: how many
resync messages and bytes until B has them all? `unicast3`'s SYNC handshake next to `unicast2`'s first-seqno
recovery, in the same run (resync messages are those recorded as `resync_tx`).

Goal (printed, not asserted): at least 10x less resync traffic with the SYNC handshake.
"""
from __future__ import annotations

from node.sim.harness import send_many, unicast_sim

WINDOW = 1000
SEED = 1874


def resync_cost(variant: str) -> tuple[int, int]:
    """(resync messages, resync bytes) from B's window loss until B delivered the whole window."""
    sim = unicast_sim(variant, ("a", "b"), seed=SEED)
    send_many(sim, "a", "b", 1, tag="open")
    sim.run_until_quiet(max_s=10)
    sim.request("b", "unicast", "remove_receive", {"peer": "a"})
    mark = len(sim.events)
    send_many(sim, "a", "b", WINDOW, tag="w")
    if not sim.run_until_true(lambda: len(sim.delivered("b", "a")) >= 1 + WINDOW, max_s=60):
        raise RuntimeError(f"{variant}: the window never arrived ({sim.repro()})")
    sim.run_until_quiet(max_s=60)
    resyncs = [e for e in sim.events[mark:] if e["type"] == "resync_tx"]
    return len(resyncs), sum(e.get("bytes", 0) for e in resyncs)


def run(quick: bool) -> list[dict]:
    msgs3, bytes3 = resync_cost("unicast3")
    msgs2, bytes2 = resync_cost("unicast2")
    note = f"window of {WINDOW}; baseline = unicast2 first-seqno recovery; ratio = times fewer; goal >= 10x"
    return [
        {"name": "resync messages, unicast3 SYNC", "value": msgs3, "unit": "msgs", "baseline": msgs2,
         "ratio": msgs2 / max(msgs3, 1), "better": "higher", "note": note},
        {"name": "resync bytes, unicast3 SYNC", "value": bytes3, "unit": "B", "baseline": bytes2,
         "ratio": bytes2 / max(bytes3, 1), "better": "higher", "note": note},
    ]
