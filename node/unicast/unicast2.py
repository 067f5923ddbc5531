"""UNICAST2 exactly as the seed `unicast2-design.txt` designs it, flaws included (the legacy protocol).

- Connections are removed at once when a view excludes the peer (JGroups later marked them CLOSING instead).
- Sender: a new connection gets a new conn_id; its first message carries first=true and the conn_id, the
  following ones no conn_id (0), as in the seed's scenario #6 ("#2(conn-id=0)").
- Receiver: first=true with no window or another conn_id starts a new window at that seqno; the same conn_id is
  a no-op. A message without first and without a window (or with a conn_id that does not match) is dropped
  and answered by SEND_FIRST_SEQNO; the sender then resends its lowest unacked message with first=true and its
  conn_id (the seed's #5: "grabs the message with the lowest seqno"); the rest follows by retransmission.
- A message below the receiver's window is discarded but ACKed anyway, and the sender removes that seqno from
  its send window: this is what strands scenario #6 (the seqno is gone when the new window needs it).
- STABLE(seqno, conn_id) from the receiver purges the sender's window up to seqno whenever the conn_id matches;
  nothing protects against a delayed STABLE with the same conn_id (JGRP-1873: endless XMIT_REQ whose seqnos the
  sender no longer has).
- Retransmit task: STABLE when the receiver delivered more since the last one; XMIT_REQ for gaps seen in the
  previous run; resend of the highest unacked message when nothing moved since the previous run.
- Requests: send, close (remove both entries), remove_receive; `sync` does not exist (UsageError).
"""
from __future__ import annotations

from typing import cast

from node.core import Effect, Emit, Send
from node.unicast.base import UnicastBase
from node.unicast.entries import ReceiveEntry, SendEntry
from node.wire import SendFirstSeqno, UnicastAck, UnicastData, UnicastStable, UnicastXmitReq, encode_message


class Unicast2(UnicastBase):
    """The seed's UNICAST2 (see the module docstring)."""

    NAME = "unicast2"

    def _make_data(self, entry: SendEntry, seqno: int, payload: bytes, first: bool | None) -> UnicastData:
        if first is None:
            first = seqno == entry.first_seqno
        return UnicastData(seqno, entry.conn_id if first else 0, first, payload)

    # --- receiver side --------------------------------------------------------------------------------------
    def _on_data(self, now_s: float, src: str, msg: UnicastData) -> list[Effect]:
        out: list[Effect] = []
        entry = self.recv_entries.get(src)
        if msg.first:
            if entry is None or msg.conn_id != entry.conn_id:
                entry = self._new_recv_entry(now_s, src, msg.conn_id, msg.seqno - 1, out)
        elif entry is None or (msg.conn_id != 0 and msg.conn_id != entry.conn_id):
            action = "no_conn" if entry is None else "wrong_conn"
            self.counters[action] += 1
            out.append(self._data_rx(src, msg, action))
            req = SendFirstSeqno(int(now_s * 1000) & 0xFFFFFFFF)
            out.append(Send(src, req))
            out.append(Emit("resync_tx", {"proto": self.NAME, "peer": src, "kind": "first_seqno_req",
                                          "bytes": len(encode_message(req))}))
            return out
        result, delivered = self._deliver_new(src, entry, msg, out)
        if result == "below_window":
            # the seed: discarded, but acked nevertheless (echoing the message's header)
            entry.ack_timestamp = (entry.ack_timestamp + 1) & 0xFFFFFFFF
            out.append(Send(src, UnicastAck(msg.seqno, msg.conn_id, entry.ack_timestamp)))
            out.append(Emit("ack_tx", {"proto": self.NAME, "to": src, "seqno": msg.seqno, "conn_id": msg.conn_id}))
            entry.ack_pending = True  # and the next STABLE repeats where the window stands
        elif delivered:
            entry.delivered_since_ack += delivered
            if entry.delivered_since_ack >= self.config.ack_threshold:
                self._send_stable(src, entry, out)
        return out

    def _send_stable(self, peer: str, entry: ReceiveEntry, out: list[Effect]) -> None:
        seqno = entry.window.highest_delivered
        entry.delivered_since_ack = 0
        entry.ack_pending = False
        entry.last_stable_seqno = seqno
        out.append(Send(peer, UnicastStable(seqno, entry.conn_id)))
        out.append(Emit("stable_tx", {"proto": self.NAME, "to": peer, "seqno": seqno, "conn_id": entry.conn_id}))

    # --- sender side ----------------------------------------------------------------------------------------
    def _on_ack(self, now_s: float, src: str, msg: UnicastAck) -> list[Effect]:
        entry = self.send_entries.get(src)
        accepted = entry is not None and msg.conn_id in (0, entry.conn_id)
        if accepted and entry is not None:
            entry.window.remove(msg.seqno)
            entry.last_ack_s = now_s
            entry.counters["acks_accepted"] += 1
        else:
            self.counters["acks_discarded"] += 1
        return [Emit("ack_rx", {"proto": self.NAME, "from": src, "seqno": msg.seqno, "conn_id": msg.conn_id,
                                "action": "accepted" if accepted else "discarded"})]

    def _on_stable(self, now_s: float, src: str, msg: UnicastStable) -> list[Effect]:
        entry = self.send_entries.get(src)
        accepted = entry is not None and msg.conn_id == entry.conn_id
        purged_to = None
        if accepted and entry is not None:
            entry.window.purge_to(msg.seqno)
            entry.last_ack_s = now_s
            entry.counters["stables_accepted"] += 1
            purged_to = entry.window.low
        else:
            self.counters["stables_discarded"] += 1
        return [Emit("stable_rx", {"proto": self.NAME, "from": src, "seqno": msg.seqno, "conn_id": msg.conn_id,
                                   "action": "accepted" if accepted else "discarded", "purged_to": purged_to})]

    def _on_send_first_seqno(self, now_s: float, src: str, msg: SendFirstSeqno) -> list[Effect]:
        out: list[Effect] = [Emit("resync_rx", {"proto": self.NAME, "peer": src, "kind": "first_seqno_req",
                                                "bytes": len(encode_message(msg))})]
        entry = self.send_entries.get(src)
        lowest = entry.window.lowest() if entry is not None else None
        if entry is None or lowest is None:  # no connection, or nothing unacknowledged
            self.counters["first_seqno_req_ignored"] += 1
            return out
        entry.first_seqno = lowest  # this and later retransmissions of it carry first=true
        self._data(src, entry, lowest, entry.window.msgs[lowest], True, True, out)
        sent = cast(Send, out[-2])  # the Send `_data` appended before its data_tx
        out.append(Emit("resync_tx", {"proto": self.NAME, "peer": src, "kind": "first_seqno_rsp",
                                      "bytes": len(encode_message(sent.msg)), "conn_id": entry.conn_id,
                                      "low": lowest - 1}))
        return out

    def _on_xmit_req(self, now_s: float, src: str, msg: UnicastXmitReq) -> list[Effect]:
        out: list[Effect] = []
        self._serve_xmit(src, self.send_entries.get(src), msg.seqnos, out)
        return out

    # --- views and the retransmit task ----------------------------------------------------------------------
    def _view_changed(self, now_s: float) -> list[Effect]:
        out: list[Effect] = []
        for peer in [p for p in self.send_entries if not self.is_member(p)]:
            entry = self.send_entries.pop(peer)
            out.append(self._conn_state(peer, "send", "removed", entry.conn_id))
        for peer in [p for p in self.recv_entries if not self.is_member(p)]:
            out += self._remove_receive(now_s, peer, "removed")
        return out

    def _needs_timer(self) -> bool:
        for entry in self.recv_entries.values():
            w = entry.window
            if (entry.ack_pending or w.highest_delivered > entry.last_stable_seqno
                    or w.highest_received > w.highest_delivered):
                return True
        return any(entry.window.msgs for entry in self.send_entries.values())

    def _xmit_task(self, now_s: float) -> list[Effect]:
        out: list[Effect] = []
        for peer, rx in self.recv_entries.items():
            if rx.ack_pending or rx.window.highest_delivered > rx.last_stable_seqno:
                self._send_stable(peer, rx, out)
            self._xmit_requests(peer, rx, rx.conn_id, out)
        for peer, tx in self.send_entries.items():
            self._tail_resend(peer, tx, out)
        return out
