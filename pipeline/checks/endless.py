"""Check `endless_retransmission`: the JGRP-1873 signature, the same seqnos requested again and again in vain.

A (requester, sender, proto, seqno) is flagged when it was requested at least `min_requests` times and never
arrived at the requester afterwards (no `data_rx` with action deliver/buffer). The details say how often the
sender answered that it no longer held it (`missing`).
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict
from pipeline.checks.registry import register_check

KEYS = ["requester", "sender", "proto", "seqno"]


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    hot = ctx.tables.xmit_requests.filter(F.col("requests") >= params["min_requests"])
    flagged = (hot.filter(~F.col("received"))
               .join(ctx.tables.reported_missing, KEYS, "left")
               .withColumn("missing_replies", F.coalesce(F.col("missing_replies"), F.lit(0))))
    totals = hot.agg(F.count(F.lit(1)).alias("hot"),
                     F.sum((~F.col("received")).cast("long")).alias("flagged")).collect()[0]
    n_hot, n_flagged = int(totals["hot"] or 0), int(totals["flagged"] or 0)
    rows = [] if not n_flagged else (
        flagged.orderBy(F.desc("requests"), *KEYS).limit(params["show"])
        .select(*KEYS, "requests", "first_ts", "last_ts", "missing_replies").collect())
    examples = [{**{k: r[k] for k in KEYS}, "requests": int(r["requests"]),
                 "first_ts": r["first_ts"], "span_s": r["last_ts"] - r["first_ts"],
                 "sender_reported_missing": int(r["missing_replies"])}
                for r in rows]
    details = {"flagged": n_flagged, "requested_often_but_received": n_hot - n_flagged, "examples": examples}
    if n_flagged:
        top = examples[0]
        return Verdict(FAIL, f"{n_flagged} seqno(s) requested >= {params['min_requests']} times and never "
                             f"received (worst: {top['requester']} asked {top['sender']} for {top['proto']} "
                             f"#{top['seqno']} {top['requests']} times)", details)
    return Verdict(OK, f"no seqno requested {params['min_requests']}+ times in vain", details)


CHECK = register_check(Check(
    name="endless_retransmission",
    summary="same seqnos requested again and again and never received (JGRP-1873)",
    defaults={"min_requests": 20, "show": 20},
    func=check,
    needs=frozenset({"xmit_req_tx", "xmit_req_rx", "data_rx"}),
))
