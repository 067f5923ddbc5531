"""Assertions the simulator tests share: run until quiet, and compare what a receiver delivered with what was
sent; both failures print the simulator's seed."""
from __future__ import annotations

from node.core import payload_msg_id
from node.sim.simulator import Simulator


def settle(sim: Simulator, max_s: float = 60.0) -> None:
    """Run until no member has work left (at most `max_s` virtual seconds)."""
    assert sim.run_until_quiet(max_s), f"still busy after {max_s}s; {sim.repro()}"


def expect(sim: Simulator, receiver: str, sender: str, payloads: list[bytes]) -> None:
    """`receiver` delivered exactly `payloads` from `sender`, in this order."""
    got = sim.delivered(receiver, sender)
    assert got == payloads, (f"{receiver} from {sender}: got {len(got)} {sim.delivered_ids(receiver, sender)[:40]}, "
                             f"expected {len(payloads)} {[payload_msg_id(p) for p in payloads][:40]}; {sim.repro()}")
