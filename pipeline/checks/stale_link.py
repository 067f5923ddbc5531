"""Check `stale_link`: retransmission requests for seqnos the sender had already purged.

The signature of a broadcast link started at the wrong seqno (the TIPC race): an `xmit_req_rx` of a multicast
protocol (`protos`, default nakack4) whose `missing` list is not empty.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check
from pipeline.tables import length_or_zero


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    stale = (ctx.tables.of_type("xmit_req_rx")
             .filter(F.col("proto").isin(*params["protos"]) & (length_or_zero("missing") > 0)))
    rows = (stale.groupBy(F.col("node").alias("sender"), F.col("from").alias("requester"), "proto")
            .agg(F.count(F.lit(1)).alias("requests"), F.sum(F.size("missing")).alias("missing_seqnos"),
                 F.array_sort(F.array_distinct(F.flatten(F.collect_list("missing")))).alias("seqnos"),
                 F.min("ts").alias("first_ts"))
            .orderBy("sender", "requester", "proto").collect())
    links = [{"sender": r["sender"], "requester": r["requester"], "proto": r["proto"],
              "requests": int(r["requests"]), "missing_seqnos": int(r["missing_seqnos"]),
              "seqnos": list(r["seqnos"][:params["show"]]), "first_ts": r["first_ts"]} for r in rows]
    total = sum(link["requests"] for link in links)
    details = {"stale_requests": total, "links": links}
    if over(total, params["max_stale_requests"]):
        where = ", ".join(f"{x['requester']}->{x['sender']}" for x in links[:3])
        return Verdict(FAIL, f"{total} xmit request(s) for seqnos the sender had purged ({where})", details)
    return Verdict(OK, "no request for purged seqnos", details)


CHECK = register_check(Check(
    name="stale_link",
    summary="xmit requests for seqnos the sender had already purged (stale broadcast link)",
    defaults={"max_stale_requests": 0, "protos": ["nakack4"], "show": 20},
    func=check,
    needs=frozenset({"xmit_req_rx"}),
))
