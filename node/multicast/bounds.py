"""Bounded work per datagram in NAKACK4: the checks of every wire field against the receiver's own state, and
the drop vocabulary. One forged datagram must not drive a loop or an allocation beyond what the config bounds.

Work per message is O(capacity) at most (O(min(max_xmit_req_size, capacity)) for an XMIT_REQ), memory per
peer is one ring of `capacity` plus bounded bookkeeping, and per-peer state exists only for members of the
view or former members (`Nakack4.known`; no stranger's datagram creates any). The rules, per message and field
(a drop is counted in the layer's `counters` under the name in parentheses and emitted in the history as the
rx event of its type with `action` and `reason`, see pipeline/SCHEMA.md):

- Any seqno above SEQNO_MAX (2^63 - 1: no sender gets there) is absurd (for a message or an ACK it is outside
  the window or above what we sent anyway); events write it as SEQNO_MAX with the value in `detail`.
- Nakack4Msg / Nakack4XmitRsp `seqno`: accepted in (low, low + capacity]; at or below low `below_window`,
  beyond `outside_window` (`data_rx` with that action, O(1)); an original at or below low but above what was
  delivered also contradicts the skip that put low there (reason `contradicts_skip`, `contradicted_skip`: the
  window asks for the sender's state, see nakack4.py); from a sender without a window `no_conn`
  (`no_window`), from one whose kept window awaits its BcastState `no_conn` with reason `not_synced`
  (`msgs_not_synced`).
- Nakack4XmitReq `sender`: not the local member: discarded (`xmit_reqs_for_others`). `seqnos`: only the first
  min(max_xmit_req_size, capacity) are looked at, the rest are counted (`xmit_seqnos_over_limit`) and left for
  the requester's next run; seqnos 0 or above the highest we sent (no life of ours sent them to the requester:
  its window took a forged or stale high) are ignored (`xmit_reqs_zero_seqno`, `xmit_reqs_above_sent`, the
  event's `ignored` and `reason`) and the rest is served, so the window does not wait behind them; a request of
  nothing else is discarded whole.
- Nakack4Highest `seqno`: absurd: dropped (`highest_absurd_seqno`, `msg_dropped`); otherwise raises the
  window's high to low + capacity at most (a returning receiver's window may be far behind the sender: no drop);
  at or below low but above what was delivered it contradicts a skip like an original; from a sender without a
  window, or one awaiting its state, it only asks for the state (`highest_no_window`, `highest_not_synced`).
- Nakack4Ack `seqno`: above the highest we sent: discarded (`acks_above_sent`); from a member that is not a
  receiver of ours: discarded (`acks_from_non_members`). `flags`: bit 0 the capability, bits 1-7 the sync
  generation it answers (sync.py); the flags of a non-member are not recorded.
- BcastState `next_seqno`, `low_seqno`: 0 (seqnos start at 1): dropped (`states_zero_seqno`); low above next
  (it cannot hold what it never sent): dropped (`states_low_above_next`); absurd: dropped
  (`states_absurd_seqno`). A skip to low - 1 costs O(capacity) however far it goes (`ReceiveWindow.skip_to`) and
  moves a window up only (a stale state skips nothing), except the first state after the sender's own traffic
  contradicted a skip: that one moves the window down to low - 1 but never below what was delivered
  (`ReceiveWindow.rewind_to`, O(capacity) too). From a node none of our views ever held: dropped
  (`states_not_member`; a real newcomer's sender resends it until acknowledged). The window a state opens for a
  former member not in the view now is kept asking for nothing and expires like a departed sender's unless the
  view adds the sender.
- BcastStateReq `flags`: from a member that is not a receiver (also the normal race of a merge, so not
  emitted): ignored (`state_reqs_ignored`), its flags not recorded.

A BcastState far ahead of what we know of its sender cannot be told from a long absence (the sender went on
while we were cut off): it is taken, skipping seqnos it names as gone, and no longer acks them; if it was
forged, the sender's next multicast (or HIGHEST) contradicts it and the sender's answer takes the skip back.
What it cannot undo: seqnos skipped for which no contradiction comes before the window delivers above the skip
(those are lost here, as the real sender releases them on that ack), and a skip followed by a forged message
just above it that gets delivered (the window then waits for the sender to pass that seqno: no seqno is
delivered twice).
"""
from __future__ import annotations

from typing import Iterable

from node.wire import BcastState

SEQNO_MAX = 2**63 - 1


def state_problem(msg: BcastState) -> str | None:
    """Why a BcastState is absurd in itself, or None."""
    if msg.next_seqno == 0 or msg.low_seqno == 0:
        return "zero_seqno"
    if msg.low_seqno > msg.next_seqno:
        return "low_above_next"
    if msg.next_seqno > SEQNO_MAX:
        return "absurd_seqno"
    return None


def xmit_req_problem(seqnos: Iterable[int], highest_sent: int) -> str | None:
    """Why an XMIT_REQ for `seqnos` cannot come from a receiver of ours, or None."""
    for seqno in seqnos:
        if seqno == 0:
            return "zero_seqno"
        if seqno > highest_sent:
            return "above_sent"
    return None
