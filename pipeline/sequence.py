"""Message sequence diagrams: which protocol message went from which node to which, when, and what became of it.

Pure Python, no Spark. `build()` turns a run's protocol events (the `*_tx` / `*_rx` pairs of pipeline/SCHEMA.md,
with the `view` events that say whom a multicast went to) and, when the run was captured, the messages decoded
from the capture (`pipeline.sequence_wire`) into the arrows of one time window:

- one arrow per transmission and receiver (a multicast has one per member of its sender's view), from the
  sender's lane at its send time to the receiver's lane at its receive time. A transmission is matched with a
  reception of the same message (wire type, sender, receiver, seqno and conn_id where both ends record them)
  that came after it; among several, the one whose transit time is closest to what the faults make it (a
  msg-fault `hold:MS` or `delay:MS` of that type and link, else none), so a resend is not taken for a held
  original nor the reverse;
- marks: `lost` (no reception), `duplicate` (a second reception of one transmission), `held` (under a
  msg-fault's hold or delay, or in transit at least `HELD_MIN_MS` and `HELD_FACTOR` times the median of the
  window's other arrows), `resend`, `discarded` (the receiver recorded a discard: below_window, wrong_conn,
  ...), `unsent` (a reception no transmission in the history explains: injected, forged, or sent before the
  events read), `unrecorded` (seen arriving in the capture, not recorded by the receiver: dropped at its gate,
  or it was down), `finding`;
- the fault periods and heals inside it, and the analysis' findings (`pipeline.sequence_findings`).

At most `max_arrows` arrows are kept: the findings' first, then those nearest in time to the window's anchor
(the finding or fault it was opened around, or the start of a window asked for); `left_out` counts the others.
"""
from __future__ import annotations

import bisect
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from node import wire
from node.errors import UsageError
from pipeline.report_data import FaultPeriod
from pipeline.sequence_findings import Finding

DEFAULT_MAX_ARROWS = 150
FOLD_MIN = 8   # a loop: more drawn arrows than this of one message type from one node to another ...
FOLD_KEEP = 3  # ... is folded into one row after its first FOLD_KEEP (findings' arrows always stay drawn)
DEFAULT_BEFORE_S = 1.0  # a default window opens this long before its anchor ...
DEFAULT_AFTER_S = 4.0  # ... and closes this long after it
MATCH_MARGIN_S = 10.0  # events read beyond each edge of the window, so arrows across its edges match
MAX_TRANSIT_S = MATCH_MARGIN_S  # a reception later than this after a transmission is not its arrival
CLOCK_SKEW_S = 0.005  # a reception recorded this much before its transmission still matches (hosts' clocks)
WIRE_SLACK_S = 0.5  # a captured arrival this close before the receiver's record of it is that record
NEAREST = 64  # transmissions weighed per reception: the latest ones, and as many around each fault's delay
HELD_MIN_MS = 50.0
HELD_FACTOR = 10.0
KEPT_ACTIONS = frozenset({"deliver", "buffer", "accepted"})

TX_TYPES = ("data_tx", "ack_tx", "stable_tx", "xmit_req_tx", "resync_tx", "bcast_state_tx")
RX_TYPES = ("data_rx", "ack_rx", "stable_rx", "xmit_req_rx", "resync_rx", "bcast_state_rx")
MESSAGE_EVENT_TYPES = TX_TYPES + RX_TYPES
_PEER_NAMED = ("resync_tx", "resync_rx", "bcast_state_tx", "bcast_state_rx")  # the other end is `peer`
# resync kinds -> the wire message; `first_seqno_rsp` is recorded beside the data_tx that is the message itself
_RESYNC_MESSAGES = {"sync": "UnicastSync", "sync_ok": "UnicastSyncOk", "sync_ack": "UnicastSyncAck",
                    "first_seqno_req": "SendFirstSeqno"}
# The real JGroups' protocols (node kind `jgroups`) name their messages as jgnode.wire does: the prefix of `proto`
_JGROUPS = {"UNICAST2": "Unicast2", "UNICAST": "Unicast", "NAKACK": "Nakack"}
_KEYED_BY_CONN = frozenset({"UnicastData", "UnicastAck", "UnicastStable", "Unicast2Data"})
_KEYED_BY_SEQNO = frozenset({"Nakack4Msg", "Nakack4XmitRsp", "Nakack4Ack", "Unicast2Stable", "NakackMsg",
                             "NakackXmitRsp", "Unicast2SendFirstSeqno", "UnicastSendFirstSeqno"})
_KEYED_BY_REQUEST = frozenset({"UnicastXmitReq", "Nakack4XmitReq", "Unicast2XmitReq", "NakackXmitReq"})
MESSAGE_TYPES = frozenset(_RESYNC_MESSAGES.values()) | _KEYED_BY_CONN | _KEYED_BY_SEQNO | _KEYED_BY_REQUEST \
    | {"BcastState"}
_WINDOW = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*:\s*(\d+(?:\.\d*)?)\s*$")


# --- the window ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DiagramOptions:
    """What the report's diagram shows: `window_s` (start, end) in seconds since the run's first event (None: the
    default window) and at most `max_arrows` arrows."""

    window_s: tuple[float, float] | None = None
    max_arrows: int = DEFAULT_MAX_ARROWS

    def __post_init__(self) -> None:
        if self.max_arrows < 1:
            raise UsageError(f"--diagram-arrows {self.max_arrows}: the diagram needs at least 1 arrow")
        if self.window_s is not None and not 0 <= self.window_s[0] < self.window_s[1]:
            raise UsageError(f"--diagram-window {self.window_s[0]:g}:{self.window_s[1]:g}: START_S must be below "
                             "END_S", hint="seconds since the run's first event, e.g. --diagram-window 5:9.5")

    def to_dict(self) -> dict[str, Any]:
        return {"window_s": list(self.window_s) if self.window_s else None, "max_arrows": self.max_arrows}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "DiagramOptions":
        data = data or {}
        window = data.get("window_s")
        return cls(window_s=(float(window[0]), float(window[1])) if window else None,
                   max_arrows=int(data.get("max_arrows") or DEFAULT_MAX_ARROWS))


def parse_window(text: str) -> tuple[float, float]:
    """`START_S:END_S` (seconds since the run's first event) as a pair. Raises `UsageError`."""
    match = _WINDOW.match(text)
    if match is None:
        raise UsageError(f"--diagram-window {text!r}: expected START_S:END_S",
                         hint="seconds since the run's first event, e.g. --diagram-window 5:9.5")
    return float(match.group(1)), float(match.group(2))


@dataclass(frozen=True)
class Window:
    """The time range of a diagram (unix seconds), the time it is opened around (`anchor_ts`) and why."""

    start_ts: float
    end_ts: float
    anchor_ts: float
    why: str


def asked_window(window_s: tuple[float, float], first_ts: float) -> Window:
    """The window asked for, in seconds since the run's first event."""
    return Window(first_ts + window_s[0], first_ts + window_s[1], first_ts + window_s[0], "asked for")


def default_window(findings: Sequence[Finding], faults: Sequence[FaultPeriod], first_ts: float,
                   last_ts: float) -> Window:
    """Around the earliest finding with a time, else the first fault, else the run's start."""
    timed = [f.at_ts for f in findings if f.at_ts is not None]
    if timed:
        anchor, why = min(timed), "around the first finding"
    elif faults:
        anchor, why = min(f.start_ts for f in faults), "around the first fault"
    else:
        anchor, why = first_ts, "from the run's start"
    start = max(first_ts, anchor - DEFAULT_BEFORE_S)
    return Window(start, max(start, min(last_ts, anchor + DEFAULT_AFTER_S)), anchor, why)


# --- the ends of messages -----------------------------------------------------------------------------------------
@dataclass
class End:
    """One end of a message: its transmission or its reception (`wire`: seen in the capture)."""

    ts: float
    src: str
    dst: str
    msg: str
    key: tuple
    fields: Mapping[str, Any]
    wire: bool = False


def message_of(event: Mapping[str, Any]) -> str | None:
    """The wire message type a protocol event records (None: none of its own)."""
    base = event["type"].rsplit("_", 1)[0]
    jgroups = _JGROUPS.get(event.get("proto"))
    if jgroups is not None:
        return _jgroups_message(jgroups, base, event)
    nakack4 = event.get("proto") == "nakack4"
    if base == "data":
        return ("Nakack4XmitRsp" if event.get("resend") else "Nakack4Msg") if nakack4 else "UnicastData"
    if base == "ack":
        return "Nakack4Ack" if nakack4 else "UnicastAck"
    if base == "xmit_req":
        return "Nakack4XmitReq" if nakack4 else "UnicastXmitReq"
    if base == "resync":
        return _RESYNC_MESSAGES.get(event.get("kind"))
    return {"stable": "UnicastStable", "bcast_state": "BcastState"}.get(base)


def _jgroups_message(prefix: str, base: str, event: Mapping[str, Any]) -> str | None:
    """The jgnode.wire name of the message a real JGroups node's event records (`Unicast2XmitReq`, ...)."""
    if base == "data":
        if prefix == "Nakack":
            return "NakackXmitRsp" if event.get("resend") else "NakackMsg"
        return prefix + "Data"
    if base == "resync":
        return prefix + "SendFirstSeqno" if event.get("kind") == "first_seqno_req" else None
    return {"ack": prefix + "Ack", "xmit_req": prefix + "XmitReq", "stable": prefix + "Stable"}.get(base)


def key_of(msg: str, fields: Mapping[str, Any]) -> tuple:
    """What tells one message of type `msg` between two nodes from another, as both ends record it."""
    if msg in _KEYED_BY_CONN:
        return fields.get("seqno"), fields.get("conn_id") or 0
    if msg in _KEYED_BY_SEQNO:
        return (fields.get("seqno"),)
    if msg in _KEYED_BY_REQUEST:  # (a receiver may record only the first seqnos of a long request)
        seqnos = fields.get("seqnos") or ()
        return (seqnos[0] if seqnos else None,)
    return ()


class _Views:
    """Each node's views over time, for the receivers of its multicasts."""

    def __init__(self, views: Iterable[Mapping[str, Any]]) -> None:
        self._by_node: dict[str, list[tuple[float, list[str]]]] = {}
        for v in sorted(views, key=lambda v: (v["ts"], v.get("seq") or 0)):
            self._by_node.setdefault(v["node"], []).append((v["ts"], list(v.get("members") or [])))

    def members(self, node: str, ts: float, everybody: Sequence[str]) -> list[str]:
        history = self._by_node.get(node, [])
        i = bisect.bisect_right([t for t, _ in history], ts) - 1
        return history[i][1] if i >= 0 else list(everybody)


def ends_of(events: Iterable[Mapping[str, Any]], views: Iterable[Mapping[str, Any]],
            nodes: Sequence[str]) -> tuple[list[End], list[End]]:
    """Transmissions and receptions in `events` (a multicast transmission once per receiver in its sender's view,
    every other node when it has none yet)."""
    known = _Views(views)
    txs: list[End] = []
    rxs: list[End] = []
    for ev in events:
        msg = message_of(ev)
        if msg is None:
            continue
        node, other = ev["node"], ev.get("peer" if ev["type"] in _PEER_NAMED else
                                         "to" if ev["type"] in TX_TYPES else "from")
        if other is None:
            continue
        key = key_of(msg, ev)
        if ev["type"] in RX_TYPES:
            rxs.append(End(ev["ts"], other, node, msg, key, ev))
        elif other == "*":
            txs += [End(ev["ts"], node, r, msg, key, ev) for r in known.members(node, ev["ts"], nodes) if r != node]
        else:
            txs.append(End(ev["ts"], node, other, msg, key, ev))
    return txs, rxs


# --- matching -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Delay:
    start_ts: float
    end_ts: float
    msg: str | None
    src: str | None
    dst: str | None
    delay_s: float


def delays_of(faults: Sequence[FaultPeriod]) -> list[_Delay]:
    """The msg-faults that hold or delay a message type on a link (`detail`: type, src, dst, action, ms)."""
    out = []
    for f in faults:
        detail = f.detail if isinstance(f.detail, dict) else {}
        if f.kind != "msg_fault" or detail.get("action") not in ("hold", "delay") or not detail.get("ms"):
            continue
        code = detail.get("type")
        msg = wire.message_types()[code].__name__ if code in wire.message_types() else (
            code if isinstance(code, str) else None)
        out.append(_Delay(f.start_ts, f.end_ts, msg, detail.get("src"), detail.get("dst"), detail["ms"] / 1000.0))
    return out


def _expected_s(tx: End, delays: Sequence[_Delay]) -> float:
    return max((d.delay_s for d in delays if d.start_ts <= tx.ts <= d.end_ts and d.msg in (None, tx.msg)
                and d.src in (None, "*", tx.src) and d.dst in (None, "*", tx.dst)), default=0.0)


@dataclass
class _Pair:
    tx: End | None
    rx: End | None
    duplicate: bool = False
    fault_delay_s: float = 0.0  # what a msg-fault held or delayed it by


def _claim_wire(rxs: list[End], seen: list[End]) -> list[End]:
    """Captured arrivals that the receiver did not record (each history reception claims the nearest earlier one)."""
    left = sorted(seen, key=lambda e: e.ts)
    left_ts = [w.ts for w in left]
    for rx in sorted(rxs, key=lambda e: e.ts):
        i = bisect.bisect_right(left_ts, rx.ts + CLOCK_SKEW_S) - 1
        if i >= 0 and left_ts[i] >= rx.ts - WIRE_SLACK_S:
            left.pop(i)
            left_ts.pop(i)
    return left


def _candidates(open_ts: list[float], lo: int, hi: int, rx_ts: float, delays: Sequence[_Delay]) -> set[int]:
    """The open transmissions worth weighing for a reception at `rx_ts` among `open_ts[lo:hi]`: the latest
    `NEAREST`, and `NEAREST` around each delay a fault may have caused."""
    found = set(range(max(lo, hi - NEAREST), hi))
    for delay_s in {d.delay_s for d in delays}:
        at = bisect.bisect_left(open_ts, rx_ts - delay_s, lo, hi)
        found.update(range(max(lo, at - NEAREST // 2), min(hi, at + NEAREST // 2)))
    return found


def _match_group(txs: list[End], rxs: list[End], delays: Sequence[_Delay]) -> list[_Pair]:
    """Pair the transmissions and receptions of one (type, sender, receiver, key)."""
    txs = sorted(txs, key=lambda e: e.ts)
    all_ts = [t.ts for t in txs]
    open_txs = list(txs)
    open_ts = list(all_ts)
    pairs: list[_Pair] = []
    for rx in sorted(rxs, key=lambda e: (e.ts, e.wire)):
        lo = bisect.bisect_left(open_ts, rx.ts - MAX_TRANSIT_S)
        hi = bisect.bisect_right(open_ts, rx.ts + CLOCK_SKEW_S)
        if lo < hi:
            best = min(_candidates(open_ts, lo, hi, rx.ts, delays),
                       key=lambda i: (abs(rx.ts - open_ts[i] - _expected_s(open_txs[i], delays)), -open_ts[i]))
            tx = open_txs.pop(best)
            open_ts.pop(best)
            pairs.append(_Pair(tx, rx, fault_delay_s=_expected_s(tx, delays)))
            continue
        last = bisect.bisect_right(all_ts, rx.ts + CLOCK_SKEW_S) - 1
        if last >= 0 and rx.ts - all_ts[last] <= MAX_TRANSIT_S:
            pairs.append(_Pair(txs[last], rx, duplicate=True))
        else:
            pairs.append(_Pair(None, rx))
    return pairs + [_Pair(tx, None) for tx in open_txs]


def match(txs: Sequence[End], rxs: Sequence[End], wire_rxs: Sequence[End] = (),
          delays: Sequence[_Delay] = ()) -> list[_Pair]:
    """Every transmission with its reception(s), every reception with its transmission (or None)."""
    groups: dict[tuple, tuple[list[End], list[End], list[End]]] = {}
    for index, ends in enumerate((txs, rxs, wire_rxs)):
        for end in ends:
            groups.setdefault((end.msg, end.src, end.dst, end.key), ([], [], []))[index].append(end)
    pairs: list[_Pair] = []
    for group_txs, group_rxs, seen in groups.values():
        pairs += _match_group(group_txs, group_rxs + _claim_wire(group_rxs, seen), delays)
    return pairs


# --- arrows -------------------------------------------------------------------------------------------------------
@dataclass
class Arrow:
    """One message from `src` to `dst`: sent at `send_ts` (None: unsent), received at `recv_ts` (None: lost)."""

    id: int
    msg: str
    src: str
    dst: str
    send_ts: float | None
    recv_ts: float | None
    proto: str | None
    seqno: int | None
    conn_id: int | None
    seqnos: list[int] | None
    action: str | None
    marks: list[str] = field(default_factory=list)
    findings: list[int] = field(default_factory=list)
    fault_delay_ms: float = 0.0

    @property
    def at_ts(self) -> float:
        """When it starts: its send time, else its arrival."""
        return self.send_ts if self.send_ts is not None else self.recv_ts  # type: ignore[return-value]

    @property
    def transit_ms(self) -> float | None:
        if self.send_ts is None or self.recv_ts is None:
            return None
        return (self.recv_ts - self.send_ts) * 1000.0

    @property
    def label(self) -> str:
        if self.seqnos:
            span = f"{self.seqnos[0]}" if len(self.seqnos) == 1 else f"{self.seqnos[0]}..{self.seqnos[-1]}"
            return f"{self.msg} [{span}]"
        return f"{self.msg} #{self.seqno}" if self.seqno is not None else self.msg


def _arrow(index: int, pair: _Pair) -> Arrow:
    end = pair.tx or pair.rx
    assert end is not None
    fields = {**(pair.tx.fields if pair.tx else {}), **(pair.rx.fields if pair.rx else {})}
    seqnos = (pair.tx or pair.rx).fields.get("seqnos")  # the sender's list: all it asked for
    marks = []
    if pair.rx is None:
        marks.append("lost")
    if pair.tx is None:
        marks.append("unsent")
    if pair.duplicate:
        marks.append("duplicate")
    if pair.tx is not None and pair.tx.fields.get("resend"):
        marks.append("resend")
    action = pair.rx.fields.get("action") if pair.rx is not None else None
    if action is not None and action not in KEPT_ACTIONS:
        marks.append("discarded")
    if pair.rx is not None and pair.rx.wire:
        marks.append("unrecorded")
    return Arrow(id=index, msg=end.msg, src=end.src, dst=end.dst, send_ts=pair.tx.ts if pair.tx else None,
                 recv_ts=pair.rx.ts if pair.rx else None, proto=fields.get("proto"), seqno=fields.get("seqno"),
                 conn_id=fields.get("conn_id"), seqnos=list(seqnos) if seqnos else None, action=action, marks=marks,
                 fault_delay_ms=pair.fault_delay_s * 1000.0)


def held_threshold_ms(arrows: Sequence[Arrow]) -> float:
    """The transit time from which an arrow is marked held: `HELD_MIN_MS`, or `HELD_FACTOR` times the median of
    the arrows no msg-fault held."""
    transits = [a.transit_ms for a in arrows if a.transit_ms is not None and not a.fault_delay_ms]
    return max(HELD_MIN_MS, HELD_FACTOR * statistics.median(transits)) if transits else HELD_MIN_MS


def fault_label(fault: FaultPeriod) -> str:
    """A fault in a few words: `partition n2<-n1`, `msg_fault UnicastAck n2->n1 hold 5500 ms`, else its kind."""
    detail = fault.detail if isinstance(fault.detail, dict) else {}
    if fault.kind == "msg_fault" and detail:
        code = detail.get("type")
        name = wire.message_types()[code].__name__ if code in wire.message_types() else code
        ms = f" {detail['ms']:g} ms" if detail.get("ms") else ""
        return f"msg_fault {name} {detail.get('src')}->{detail.get('dst')} {detail.get('action')}{ms}"
    grudge = detail.get("grudge")
    if fault.kind == "partition" and isinstance(grudge, dict):
        return "partition " + " ".join(f"{dst}<-{','.join(srcs)}" for dst, srcs in sorted(grudge.items()))
    node = detail.get("node") or ",".join(detail.get("nodes") or [])
    return f"{fault.kind} {node}".strip()


def _natural(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


# --- the diagram --------------------------------------------------------------------------------------------------
@dataclass
class Fold:
    """A loop's arrows drawn as one row until unfolded: `label` says how many, of what, between whom."""

    id: int
    msg: str
    src: str
    dst: str
    arrows: list[int]
    at_ts: float
    label: str


def fold_loops(arrows: Sequence[Arrow]) -> list[Fold]:
    """The loops of `arrows` (in time order): per (message type, sender, receiver) with more than FOLD_MIN arrows,
    the arrows after its first FOLD_KEEP that belong to no finding, as one fold (at least two of them)."""
    groups: dict[tuple[str, str, str], list[Arrow]] = {}
    for a in arrows:
        groups.setdefault((a.msg, a.src, a.dst), []).append(a)
    folds: list[Fold] = []
    for (msg, src, dst), group in groups.items():
        folded = [a for a in group[FOLD_KEEP:] if not a.findings] if len(group) > FOLD_MIN else []
        if len(folded) < 2:
            continue
        seqnos = sorted({s for a in folded for s in ([a.seqno] if a.seqno is not None else a.seqnos or [])})
        span = "" if not seqnos else f" [{seqnos[0]}]" if len(seqnos) == 1 else f" [{seqnos[0]}..{seqnos[-1]}]"
        folds.append(Fold(len(folds), msg, src, dst, [a.id for a in folded], folded[0].at_ts,
                          f"... {len(folded)} more {msg} {src}->{dst}{span}"))
    return folds


@dataclass
class Diagram:
    """What the report draws: lanes, the kept arrows in time order, faults and heals inside their span, findings
    with their arrows, and what was left out."""

    t0_ts: float
    window: Window
    lanes: list[str]
    arrows: list[Arrow]
    faults: list[FaultPeriod]
    heals_ts: list[float]
    findings: list[Finding]
    finding_arrows: list[list[int]]
    messages_in_window: int
    held_ms: float
    not_read: int = 0
    capture: str | None = None
    folds: list[Fold] = field(default_factory=list)

    @property
    def left_out(self) -> int:
        return self.messages_in_window - len(self.arrows)

    @property
    def span_ts(self) -> tuple[float, float]:
        """From the first kept arrow's start to the last one's end (the window when none is kept)."""
        if not self.arrows:
            return self.window.start_ts, self.window.end_ts
        stamps = [t for a in self.arrows for t in (a.send_ts, a.recv_ts) if t is not None]
        return min(stamps), max(stamps)

    def to_dict(self) -> dict[str, Any]:
        """JSON for the report's script: times in seconds since the run's first event."""
        def rel(ts: float | None) -> float | None:
            return None if ts is None else round(ts - self.t0_ts, 6)

        start, end = self.span_ts
        return {
            "window": {"start_s": rel(self.window.start_ts), "end_s": rel(self.window.end_ts),
                       "anchor_s": rel(self.window.anchor_ts), "why": self.window.why},
            "span": {"start_s": rel(start), "end_s": rel(end)},
            "lanes": self.lanes,
            "arrows": [{"id": a.id, "msg": a.msg, "label": a.label, "src": a.src, "dst": a.dst,
                        "send_s": rel(a.send_ts), "recv_s": rel(a.recv_ts), "proto": a.proto, "seqno": a.seqno,
                        "conn_id": a.conn_id, "seqnos": a.seqnos, "action": a.action, "marks": a.marks,
                        "findings": a.findings} for a in self.arrows],
            "faults": [{"kind": f.kind, "label": fault_label(f), "start_s": rel(max(f.start_ts, start)),
                        "end_s": rel(min(f.end_ts, end)), "instant": f.instant, "detail": f.detail}
                       for f in self.faults],
            "heals_s": [rel(t) for t in self.heals_ts],
            "folds": [{"id": f.id, "label": f.label, "src": f.src, "dst": f.dst, "arrows": f.arrows,
                       "at_s": rel(f.at_ts)} for f in self.folds],
            "folded": sum(len(f.arrows) for f in self.folds),
            "findings": [{"kind": f.kind, "text": f.text, "at_s": rel(f.at_ts), "arrows": ids}
                         for f, ids in zip(self.findings, self.finding_arrows)],
            "messages_in_window": self.messages_in_window, "drawn": len(self.arrows), "left_out": self.left_out,
            "not_read": self.not_read, "held_ms": round(self.held_ms, 3), "capture": self.capture,
        }


def build(events: Iterable[Mapping[str, Any]], window: Window, *, nodes: Sequence[str], t0_ts: float,
          views: Iterable[Mapping[str, Any]] = (), faults: Sequence[FaultPeriod] = (),
          heals_ts: Sequence[float] = (), findings: Sequence[Finding] = (), wire_ends: Sequence[End] = (),
          max_arrows: int = DEFAULT_MAX_ARROWS, not_read: int = 0, capture: str | None = None) -> Diagram:
    """The diagram of `window` from the protocol events around it (read `MATCH_MARGIN_S` beyond its edges), the
    nodes' `view` events, the run's faults, heals and findings, and the receptions seen in a capture."""
    txs, rxs = ends_of(events, views, nodes)
    pairs = match(txs, rxs, [w for w in wire_ends if w.msg in MESSAGE_TYPES], delays_of(faults))
    arrows = [_arrow(i, p) for i, p in enumerate(pairs)]
    inside = [a for a in arrows if window.start_ts <= a.at_ts <= window.end_ts]
    held_ms = held_threshold_ms(inside)
    for a in inside:
        if a.transit_ms is not None and (a.fault_delay_ms or a.transit_ms >= held_ms):
            a.marks.append("held")
        a.findings = [i for i, f in enumerate(findings) if f.hits(a)]
        if a.findings:
            a.marks.append("finding")
    ranked = sorted(inside, key=lambda a: (not a.findings, abs(a.at_ts - window.anchor_ts), a.at_ts, a.id))
    kept = sorted(ranked[:max_arrows], key=lambda a: (a.at_ts, a.id))
    for i, a in enumerate(kept):
        a.id = i
    lanes = sorted(set(nodes) | {a.src for a in kept} | {a.dst for a in kept}, key=_natural)
    diagram = Diagram(t0_ts=t0_ts, window=window, lanes=lanes, arrows=kept, faults=[], heals_ts=[],
                      findings=list(findings), finding_arrows=[[a.id for a in kept if i in a.findings]
                                                               for i in range(len(findings))],
                      messages_in_window=len(inside), held_ms=held_ms, not_read=not_read, capture=capture,
                      folds=fold_loops(kept))
    start, end = diagram.span_ts
    diagram.faults = [f for f in faults if f.start_ts <= end and f.end_ts >= start]
    diagram.heals_ts = [t for t in heals_ts if start <= t <= end]
    return diagram
