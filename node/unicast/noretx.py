"""`noretx`: UNICAST3 that never retransmits, the README's example of a new protocol layer (a toy: do not use).

It is the whole extension: this file and its `@register_layer` line. `node.layers` finds it in the `unicast`
slot's package, so `SPLITLAB_UNICAST=noretx` on a node and `unicast: noretx` in a scenario select it, in
containers and in the simulator alike. Every original transmission goes out as in unicast3; every resend (the
tail resend of the retransmit task, the answer to an XMIT_REQ) is dropped and counted as `resend_suppressed` in
the send entry's counters. So one lost DATA is a gap its receiver never fills:
`scenarios/examples/noretx_loss.yaml` catches it.
"""
from __future__ import annotations

from node.core import Effect
from node.layers import register_layer
from node.unicast.entries import SendEntry
from node.unicast.unicast3 import Unicast3


@register_layer("unicast", "noretx")
class NoRetx(Unicast3):
    """unicast3 with retransmission turned off (see the module docstring)."""

    def _data(self, peer: str, entry: SendEntry, seqno: int, payload: bytes, resend: bool, first: bool | None,
              out: list[Effect]) -> None:
        if resend:
            entry.counters["resend_suppressed"] += 1
            return
        super()._data(peer, entry, seqno, payload, resend, first, out)
