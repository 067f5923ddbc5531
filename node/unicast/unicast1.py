"""UNICAST (the first design): no connection ids, the motivation failure of the UNICAST2 seed.

- Sender: seqnos from 1 per peer; every unacked message is resent by the retransmit task (those already sent at
  the previous run), until an ACK for that seqno arrives.
- Receiver: a window per peer starting at seqno 1; every received message is ACKed individually, including
  messages it stores out of order and messages below the window (which it discards).
- A view without the peer removes both entries; a closed window starts again at 1.

The failure this shows (seed, "Motivation"): after an asymmetric split B removed its window for A and A did not,
A's next message #25 is stored by B (expecting #1) and acked, so A forgets it; B never delivers it nor anything
after it. The other way round, B starts again at #1 while A expects #7: A discards B's first six messages and
acks them, so they are lost.
"""
from __future__ import annotations

from node.core import Effect, Emit, Send
from node.unicast.base import UnicastBase
from node.unicast.entries import SendEntry
from node.wire import UnicastAck, UnicastData


class Unicast1(UnicastBase):
    """The original UNICAST (see the module docstring)."""

    NAME = "unicast1"

    def _new_conn_id(self) -> int:
        return 0  # no connection ids

    def _make_data(self, entry: SendEntry, seqno: int, payload: bytes, first: bool | None) -> UnicastData:
        return UnicastData(seqno, 0, False, payload)

    def _on_data(self, now_s: float, src: str, msg: UnicastData) -> list[Effect]:
        out: list[Effect] = []
        entry = self.recv_entries.get(src)
        if entry is None:
            entry = self._new_recv_entry(now_s, src, 0, 0, out)
        self._deliver_new(src, entry, msg, out)
        out.append(Send(src, UnicastAck(msg.seqno, 0, 0)))
        out.append(Emit("ack_tx", {"proto": self.NAME, "to": src, "seqno": msg.seqno, "conn_id": 0}))
        return out

    def _on_ack(self, now_s: float, src: str, msg: UnicastAck) -> list[Effect]:
        entry = self.send_entries.get(src)
        accepted = entry is not None and entry.window.remove(msg.seqno)
        if accepted and entry is not None:
            entry.last_ack_s = now_s
        return [Emit("ack_rx", {"proto": self.NAME, "from": src, "seqno": msg.seqno, "conn_id": 0,
                                "action": "accepted" if accepted else "discarded"})]

    def _view_changed(self, now_s: float) -> list[Effect]:
        out: list[Effect] = []
        for peer in [p for p in self.send_entries if not self.is_member(p)]:
            self.send_entries.pop(peer)
            out.append(self._conn_state(peer, "send", "removed", 0))
        for peer in [p for p in self.recv_entries if not self.is_member(p)]:
            out += self._remove_receive(now_s, peer, "removed")
        return out

    def _needs_timer(self) -> bool:
        return any(entry.window.msgs for entry in self.send_entries.values())

    def _xmit_task(self, now_s: float) -> list[Effect]:
        out: list[Effect] = []
        limit = self.config.max_xmit_req_seqnos
        for peer, entry in self.send_entries.items():
            w = entry.window
            sent_before = entry.prev_tail[1] if entry.prev_tail is not None else 0
            for count, (seqno, payload) in enumerate(list(w.msgs.items())):
                if seqno > sent_before or count >= limit:
                    break
                self._data(peer, entry, seqno, payload, True, False, out)
            entry.prev_tail = (w.low, w.highest_sent)
        return out
