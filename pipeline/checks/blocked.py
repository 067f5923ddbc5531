"""Check `blocked`: how long senders spent blocked on a full send window.

A blocked period runs from a `window_full` to the next `window_unblocked` of the same node, proto and peer
(nakack4 has no peer: the whole group's window); a `window_full` while already blocked changes nothing. A
period still open at the node's next `node_start` (the process died) ends there, and one open at the end of
the history ends there and counts as `still_blocked`. Fails when the longest period exceeds `max_blocked_ms` or
their sum `max_total_blocked_ms`; both are off by default (the harness' `unblocked` check judges a sender still
blocked at the end of the timeline).
"""
from __future__ import annotations

from typing import Any

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check


def periods(ctx: CheckContext) -> tuple[list[dict[str, Any]], int]:
    """Blocked periods (node, proto, peer, start_ts, end_ts, blocked_ms, still_blocked), and unblocks without a
    window_full before them."""
    rows = ctx.tables.walked("window_full", "window_unblocked", "node_start")
    open_: dict[tuple[str, str, str], float] = {}
    out: list[dict[str, Any]] = []
    stray = 0

    def close(key: tuple[str, str, str], end_ts: float, still: bool) -> None:
        start = open_.pop(key)
        out.append({"node": key[0], "proto": key[1], "peer": key[2] or None, "start_ts": start, "end_ts": end_ts,
                    "blocked_ms": round((end_ts - start) * 1000, 3), "still_blocked": still})

    for r in rows:
        if r["type"] == "node_start":
            for key in [k for k in open_ if k[0] == r["node"]]:
                close(key, r["ts"], False)
            continue
        key = (r["node"], r["proto"] or "?", r["peer"] or "")
        if r["type"] == "window_full":
            open_.setdefault(key, r["ts"])
        elif key in open_:
            close(key, r["ts"], False)
        else:
            stray += 1
    end = ctx.tables.last_ts
    for key in list(open_):
        close(key, max(end, open_[key]), True)
    return out, stray


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    found, stray = periods(ctx)
    longest = max(found, key=lambda p: p["blocked_ms"], default=None)
    total_ms = round(sum(p["blocked_ms"] for p in found), 3)
    by_sender: dict[str, float] = {}
    for p in found:
        label = f"{p['node']} {p['proto']}" + (f" -> {p['peer']}" if p["peer"] else "")
        by_sender[label] = round(by_sender.get(label, 0.0) + p["blocked_ms"], 3)
    details = {"periods": len(found), "longest_ms": longest["blocked_ms"] if longest else 0.0,
               "total_ms": total_ms, "still_blocked": sum(p["still_blocked"] for p in found),
               "unpaired_unblocks": stray, "by_sender_ms": by_sender,
               "longest": sorted(found, key=lambda p: -p["blocked_ms"])[:params["show"]]}
    problems = []
    if longest and over(longest["blocked_ms"], params["max_blocked_ms"]):
        where = f"{longest['node']} {longest['proto']}" + (f" -> {longest['peer']}" if longest["peer"] else "")
        problems.append(f"{where} blocked {longest['blocked_ms']:.0f} ms > {params['max_blocked_ms']:g} ms"
                        + (" (still blocked at the end)" if longest["still_blocked"] else ""))
    if over(total_ms, params["max_total_blocked_ms"]):
        problems.append(f"senders blocked {total_ms:.0f} ms in all > {params['max_total_blocked_ms']:g} ms")
    if problems:
        return Verdict(FAIL, "; ".join(problems), details)
    return Verdict(OK, f"{len(found)} blocked period(s), longest {details['longest_ms']:.0f} ms, "
                       f"{total_ms:.0f} ms in all", details)


CHECK = register_check(Check(
    name="blocked",
    summary="time senders spent blocked on a full send window (window_full -> window_unblocked; limits optional)",
    defaults={"max_blocked_ms": None, "max_total_blocked_ms": None, "show": 20},
    func=check,
    needs=frozenset({"window_full", "window_unblocked"}),
))
