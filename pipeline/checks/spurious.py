"""Check `spurious_xmit`: retransmission requests for seqnos whose original arrived later anyway.

Every seqno of an `xmit_req_tx` (requester = its node, sender = its `to`, `proto`, at its `ts`) is one request.
It is *spurious* when the requester later records a `data_rx` of that sender, proto and seqno with `resend`
false: the original was late (reordered, delayed), not lost, and the request only cost traffic (NAKACK4 counts
these as `spurious_xmit_reqs`). Only protocols whose `data_rx` records `resend` (nakack4) can be judged; the
requests of the others are counted apart (`unjudged_requests`). Informational unless a limit is set.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check

KEYS = ["requester", "sender", "proto", "seqno"]


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    tables = ctx.tables
    asked = (tables.of_type("xmit_req_tx")
             .select(F.col("node").alias("requester"), F.col("to").alias("sender"), "proto",
                     F.explode("seqnos").alias("seqno"), F.col("ts").alias("req_ts")))
    # an original is a data_rx whose `resend` is false: only a judged protocol's (one whose data_rx records it)
    originals = (tables.of_type("data_rx").filter(F.col("resend") == F.lit(False))
                 .select(F.col("node").alias("o_requester"), F.col("from").alias("o_sender"),
                         F.col("proto").alias("o_proto"), F.col("seqno").alias("o_seqno"), F.col("ts").alias("o_ts")))
    later = ((F.col("requester") == F.col("o_requester")) & (F.col("sender") == F.col("o_sender"))
             & (F.col("proto") == F.col("o_proto")) & (F.col("seqno") == F.col("o_seqno"))
             & (F.col("o_ts") > F.col("req_ts")))
    links_df = (asked.join(originals, later, "left_semi").groupBy("requester", "sender", "proto")
                .agg(F.count(F.lit(1)).alias("spurious"), F.countDistinct("seqno").alias("seqnos"),
                     F.array_sort(F.collect_set("seqno")).alias("examples")))
    # one job for the three: the requests per protocol, the judged protocols, the spurious requests per link
    rows = (asked.groupBy("proto").agg(F.count(F.lit(1)).alias("requests")).withColumn("part", F.lit("asked"))
            .unionByName(tables.of_type("data_rx").filter(F.col("resend").isNotNull()).select("proto").distinct()
                         .withColumn("part", F.lit("judged")), allowMissingColumns=True)
            .unionByName(links_df.withColumn("part", F.lit("link")), allowMissingColumns=True)
            .collect())
    judged = sorted(r["proto"] for r in rows if r["part"] == "judged")
    requested = sum(int(r["requests"]) for r in rows if r["part"] == "asked")
    judged_n = sum(int(r["requests"]) for r in rows if r["part"] == "asked" and r["proto"] in judged)
    links = sorted((r for r in rows if r["part"] == "link"),
                   key=lambda r: (-r["spurious"], r["requester"], r["sender"], r["proto"]))
    n_spurious = sum(int(r["spurious"]) for r in links)
    pct = 100.0 * n_spurious / judged_n if judged_n else 0.0
    details = {"requests": requested, "judged_requests": judged_n, "unjudged_requests": requested - judged_n,
               "spurious_requests": n_spurious, "spurious_seqnos": sum(int(r["seqnos"]) for r in links),
               "spurious_pct": round(pct, 3), "judged_protos": judged,
               "links": [{"requester": r["requester"], "sender": r["sender"], "proto": r["proto"],
                          "spurious": int(r["spurious"]), "seqnos": list(r["examples"][:params["show"]])}
                         for r in links[:params["show"]]]}
    problems = []
    if over(n_spurious, params["max_spurious"]):
        problems.append(f"{n_spurious} spurious xmit request(s) > {params['max_spurious']:g}")
    if over(pct, params["max_spurious_pct"]):
        problems.append(f"{pct:.1f}% of {judged_n} requests spurious > {params['max_spurious_pct']:g}%")
    text = f"{n_spurious} of {judged_n} judged xmit request(s) spurious ({pct:.1f}%)"
    if problems:
        worst = links[0]
        return Verdict(FAIL, "; ".join(problems) + f" (most: {worst['requester']} asked {worst['sender']} "
                                                   f"{int(worst['spurious'])} times in {worst['proto']})", details)
    return Verdict(OK, text, details)


CHECK = register_check(Check(
    name="spurious_xmit",
    summary="xmit requests for seqnos whose original arrived later anyway (limits optional)",
    defaults={"max_spurious": None, "max_spurious_pct": None, "show": 20},
    func=check,
    needs=frozenset({"xmit_req_tx", "data_rx"}),
))
