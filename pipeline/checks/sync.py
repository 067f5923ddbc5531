"""Check `sync_handshakes`: every SYNC handshake (unicast3) and BcastState episode (NAKACK4's tipc start sync)
that started also finished.

A unicast3 handshake between a receiver R and a sender S starts with R's `resync_tx` `sync` toward S (more
`sync`s while it is open are resends of the same handshake); it *finishes* when S then sends `sync_ok` to R and
R after that sends `sync_ack` to S. It is *abandoned* when either side records `resync_timeout` for the other
while it is open (R: `side` recv, S: `side` send). A BcastState episode of sender S toward peer P is a
`bcast_state_tx` with generation `gen` > 0 (its resends carry the same gen); it finishes when P records a
`bcast_state_rx` from S with that gen (not discarded); a new generation toward the same peer supersedes an open
one. A handshake or episode still open when one of its two nodes goes down (a `kill` fault of it, or its next
`node_start`) ended with that life (`peer_gone`, not counted against the limit); one still open at the end of
the history is *unfinished*. Fails when unfinished + abandoned exceed `max_unfinished`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check


@dataclass
class Episode:
    """One handshake: `kind` sync (initiator = receiver R, other = sender S) or bcast_state (initiator = sender S,
    other = peer P, `gen`)."""

    kind: str
    initiator: str
    other: str
    start_ts: float
    gen: int = 0
    resends: int = 0
    answered: bool = False
    outcome: str = "unfinished"
    end_ts: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "initiator": self.initiator, "other": self.other, "gen": self.gen or None,
                "start_ts": self.start_ts, "end_ts": self.end_ts, "resends": self.resends, "outcome": self.outcome}


def _downs(ctx: CheckContext) -> list[tuple[float, str]]:
    """(ts, node) of every kill fault's start."""
    out = []
    for period in ctx.tables.fault_periods:
        if period.kind == "kill" and isinstance(period.detail, dict):
            detail = period.detail
            targets = list(detail.get("nodes") or []) + ([detail["node"]] if "node" in detail else [])
            out += [(period.start_ts, str(node)) for node in targets]
    return out


def episodes(ctx: CheckContext) -> list[Episode]:
    """Every handshake and episode of the history with its outcome."""
    # resync_tx of the handshake's kinds, bcast_state_* of a generation and not discarded (`Tables.walked`)
    rows = ctx.tables.walked("resync_tx", "resync_timeout", "bcast_state_tx", "bcast_state_rx", "node_start")
    events = [(r["ts"], 1, r) for r in rows] + [(ts, 0, {"type": "down", "node": node}) for ts, node in _downs(ctx)]
    events.sort(key=lambda e: (e[0], e[1]))
    sync_open: dict[tuple[str, str], Episode] = {}      # (R, S)
    bcast_open: dict[tuple[str, str], Episode] = {}     # (S, P)
    done: list[Episode] = []

    def close(table: dict[Any, Episode], key: Any, outcome: str, ts: float) -> None:
        ep = table.pop(key)
        ep.outcome, ep.end_ts = outcome, ts
        done.append(ep)

    for ts, _, r in events:
        kind, node = r["type"], r["node"]
        if kind in ("down", "node_start"):
            for table in (sync_open, bcast_open):
                for key in [k for k in table if node in k and (kind == "down" or table[k].start_ts < ts)]:
                    close(table, key, "peer_gone", ts)
        elif kind == "resync_tx":
            if r["kind"] == "sync":
                key = (node, r["peer"])
                if key in sync_open:
                    sync_open[key].resends += 1
                else:
                    sync_open[key] = Episode("sync", node, r["peer"], ts)
            elif r["kind"] == "sync_ok" and (r["peer"], node) in sync_open:
                sync_open[(r["peer"], node)].answered = True
            elif r["kind"] == "sync_ack" and (node, r["peer"]) in sync_open and sync_open[(node, r["peer"])].answered:
                close(sync_open, (node, r["peer"]), "finished", ts)
        elif kind == "resync_timeout":
            key = (node, r["peer"]) if r["side"] == "recv" else (r["peer"], node)
            if key in sync_open:
                close(sync_open, key, "abandoned", ts)
        elif kind == "bcast_state_tx":
            key = (node, r["peer"])
            current = bcast_open.get(key)
            if current is not None and current.gen == r["gen"]:
                current.resends += 1
                continue
            if current is not None:
                close(bcast_open, key, "superseded", ts)
            bcast_open[key] = Episode("bcast_state", node, r["peer"], ts, gen=int(r["gen"]))
        elif kind == "bcast_state_rx":
            key = (r["peer"], node)
            if key in bcast_open and bcast_open[key].gen == r["gen"]:
                close(bcast_open, key, "finished", ts)
    for table in (sync_open, bcast_open):
        for key in list(table):
            close(table, key, "unfinished", None)
    return done


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    ignored = set(params["ignore_nodes"])
    found = [e for e in episodes(ctx) if e.initiator not in ignored and e.other not in ignored]
    counts: dict[str, dict[str, int]] = {}
    for ep in found:
        counts.setdefault(ep.kind, {}).setdefault(ep.outcome, 0)
        counts[ep.kind][ep.outcome] += 1
    bad = [e for e in found if e.outcome in ("unfinished", "abandoned")]
    details = {"handshakes": len(found), "by_kind": counts, "unfinished": sum(e.outcome == "unfinished" for e in bad),
               "abandoned": sum(e.outcome == "abandoned" for e in bad),
               "examples": [e.to_dict() for e in bad[:params["show"]]]}
    if over(len(bad), params["max_unfinished"]):
        top = bad[0]
        what = "SYNC handshake" if top.kind == "sync" else f"BcastState episode (gen {top.gen})"
        return Verdict(FAIL, f"{len(bad)} handshake(s) did not finish ({details['unfinished']} unfinished, "
                             f"{details['abandoned']} abandoned); first: {what} {top.initiator} -> {top.other} "
                             f"{top.outcome}", details)
    finished = sum(e.outcome == "finished" for e in found)
    return Verdict(OK, f"{finished} of {len(found)} handshake(s) finished, none left open", details)


CHECK = register_check(Check(
    name="sync_handshakes",
    summary="every SYNC handshake (unicast3) and BcastState episode (nakack4) that started finished",
    defaults={"max_unfinished": 0, "ignore_nodes": [], "show": 20},
    func=check,
    needs=frozenset({"resync_tx", "resync_rx", "resync_timeout", "bcast_state_tx", "bcast_state_rx"}),
))
