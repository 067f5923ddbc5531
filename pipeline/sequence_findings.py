"""The analysis' findings a message sequence diagram highlights, read from the checks' details.

- `first_lost`: the first message the `delivery` check found missing (its `missing_msgs` are in send order): its
  data arrows from the sender to that receiver (the original and every resend of its seqno);
- `retransmission_loop`: the worst seqno of `endless_retransmission`, requested again and again in vain: the
  requester's xmit requests that list it and the sender's data arrows of it toward the requester;
- `resend_loop`: the worst seqno of `resends_without_request`, resent again and again unasked: those resends.

Pure Python; `Finding.hits(arrow)` says whether an arrow of `pipeline.sequence` belongs to a finding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from pipeline.sequence import Arrow

DATA_TYPES = frozenset({"UnicastData", "Nakack4Msg", "Nakack4XmitRsp"})
XMIT_REQ_TYPES = frozenset({"UnicastXmitReq", "Nakack4XmitReq"})
SLACK_S = 0.005  # an arrow this much before a finding's time still belongs to it (rounding, clock skew)


@dataclass(frozen=True)
class Finding:
    """One finding: `kind`, a one-line `text`, when it begins (`at_ts`, None if the details do not say), and the
    data it is about: `sender` -> `receiver` of seqno `seqno` (`proto` when known)."""

    kind: str
    text: str
    at_ts: float | None
    sender: str
    receiver: str
    seqno: int | None
    proto: str | None = None

    def hits(self, arrow: "Arrow") -> bool:
        """`arrow` is part of this finding."""
        if self.seqno is None or (self.proto is not None and arrow.proto not in (None, self.proto)):
            return False
        if self.at_ts is not None and arrow.at_ts < self.at_ts - SLACK_S:
            return False
        data = (arrow.msg in DATA_TYPES and arrow.src == self.sender and arrow.dst == self.receiver
                and arrow.seqno == self.seqno)
        if self.kind == "first_lost":
            return data
        if self.kind == "resend_loop":
            return data and "resend" in arrow.marks
        return data or (arrow.msg in XMIT_REQ_TYPES and arrow.src == self.receiver and arrow.dst == self.sender
                        and self.seqno in (arrow.seqnos or ()))


def findings_of(details: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """The findings in the checks' details (`{check name: details}`), in the order above."""
    found: list[Finding] = []
    missing = (details.get("delivery") or {}).get("missing_msgs") or []
    if missing:
        m = missing[0]
        why = m.get("fate") or "missing"
        found.append(Finding("first_lost", f"first lost message: {m['msg_id']} from {m['sender']} to "
                                           f"{m['receiver']} (seqno {m.get('seqno')}, {why})",
                             m.get("send_ts"), m["sender"], m["receiver"], m.get("seqno")))
    for check, kind, to, text in _LOOPS:
        examples = (details.get(check) or {}).get("examples") or []
        if examples:
            e = examples[0]
            found.append(Finding(kind, text(e), e.get("first_ts"), e["sender"], e[to], e["seqno"], e["proto"]))
    return found


# the loops a check's first example shows: (check, finding kind, the field naming the other end, its text)
_LOOPS = (("endless_retransmission", "retransmission_loop", "requester",
           lambda e: f"retransmission loop: {e['requester']} asked {e['sender']} for {e['proto']} #{e['seqno']} "
                     f"{e['requests']} times in vain"),
          ("resends_without_request", "resend_loop", "receiver",
           lambda e: f"resent unasked: {e['sender']} resent {e['proto']} #{e['seqno']} to {e['receiver']} "
                     f"{e['resends']} times"))
