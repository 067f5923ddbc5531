"""Check `retransmission`: retransmission requests, retransmitted messages and bytes, sync traffic by kind.

Sync traffic is split into the SYNC handshake (`sync`, `sync_ok`, `sync_ack`: unicast3) and first-seqno
recovery (`first_seqno_req`, `first_seqno_rsp`: unicast2). Informational unless a limit is set; the sync
limits bound the resync traffic of both kinds together (JGRP-1874).
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check
from pipeline.tables import length_or_zero

SYNC_CLASSES = {"sync": "sync_handshake", "sync_ok": "sync_handshake", "sync_ack": "sync_handshake",
                "first_seqno_req": "first_seqno_recovery", "first_seqno_rsp": "first_seqno_recovery"}


def traffic(ctx: CheckContext) -> dict[str, Any]:
    """Retransmission and sync counters, by protocol and by sync kind (one Spark job)."""
    rows = (ctx.tables.of_type("xmit_req_tx", "xmit_req_rx", "data_tx", "resync_tx")
            .filter((F.col("type") != "data_tx") | F.coalesce(F.col("resend"), F.lit(False)))
            .groupBy("type", "proto", F.when(F.col("type") == "resync_tx", F.col("kind")).alias("sync_kind"))
            .agg(F.count(F.lit(1)).alias("events"), F.sum(length_or_zero("seqnos")).alias("seqnos"),
                 F.sum(length_or_zero("found")).alias("found"), F.sum(length_or_zero("missing")).alias("missing"),
                 F.sum(F.coalesce(F.col("size"), F.lit(0))).alias("size_bytes"),
                 F.sum(F.coalesce(F.col("bytes"), F.lit(0))).alias("sync_bytes"))
            .collect())
    requests: dict[str, dict[str, int]] = {}
    answers: dict[str, dict[str, int]] = {}
    resent: dict[str, dict[str, int]] = {}
    sync: dict[str, dict[str, Any]] = {}
    for r in rows:
        proto = r["proto"] or "?"
        if r["type"] == "xmit_req_tx":
            requests[proto] = {"requests": int(r["events"]), "seqnos_requested": int(r["seqnos"])}
        elif r["type"] == "xmit_req_rx":
            answers[proto] = {"requests_received": int(r["events"]), "seqnos_found": int(r["found"]),
                              "seqnos_missing": int(r["missing"])}
        elif r["type"] == "data_tx":
            resent[proto] = {"messages": int(r["events"]), "bytes": int(r["size_bytes"])}
        else:
            cls = SYNC_CLASSES.get(r["sync_kind"], "other")
            entry = sync.setdefault(cls, {"messages": 0, "bytes": 0, "by_kind": {}})
            entry["messages"] += int(r["events"])
            entry["bytes"] += int(r["sync_bytes"])
            kind = entry["by_kind"].setdefault(r["sync_kind"], {"messages": 0, "bytes": 0})
            kind["messages"] += int(r["events"])
            kind["bytes"] += int(r["sync_bytes"])
    return {
        "xmit_requests": sum(v["requests"] for v in requests.values()),
        "seqnos_requested": sum(v["seqnos_requested"] for v in requests.values()),
        "resent_messages": sum(v["messages"] for v in resent.values()),
        "resent_bytes": sum(v["bytes"] for v in resent.values()),
        "requests_by_proto": requests, "answers_by_proto": answers, "resent_by_proto": resent, "sync": sync,
    }


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    details = traffic(ctx)
    problems = []
    if over(details["xmit_requests"], params["max_xmit_requests"]):
        problems.append(f"{details['xmit_requests']} xmit requests > {params['max_xmit_requests']:g}")
    if over(details["resent_messages"], params["max_resent_messages"]):
        problems.append(f"{details['resent_messages']} resent messages > {params['max_resent_messages']:g}")
    if over(details["resent_bytes"], params["max_resent_bytes"]):
        problems.append(f"{details['resent_bytes']} resent bytes > {params['max_resent_bytes']:g}")
    sync_msgs = sum(v["messages"] for v in details["sync"].values())
    sync_bytes = sum(v["bytes"] for v in details["sync"].values())
    if over(sync_msgs, params["max_sync_messages"]):
        problems.append(f"{sync_msgs} sync messages > {params['max_sync_messages']:g}")
    if over(sync_bytes, params["max_sync_bytes"]):
        problems.append(f"{sync_bytes} sync bytes > {params['max_sync_bytes']:g}")
    text = (f"{details['xmit_requests']} xmit requests, {details['resent_messages']} resent messages "
            f"({details['resent_bytes']} bytes), {sync_msgs} sync messages")
    if problems:
        return Verdict(FAIL, "; ".join(problems), details)
    return Verdict(OK, text, details)


CHECK = register_check(Check(
    name="retransmission",
    summary="xmit requests, resent messages and bytes, sync traffic by kind (limits optional)",
    defaults={"max_xmit_requests": None, "max_resent_messages": None, "max_resent_bytes": None,
              "max_sync_messages": None, "max_sync_bytes": None},
    func=check,
    needs=frozenset({"xmit_req_tx", "xmit_req_rx", "data_tx", "resync_tx"}),
))
