"""Check `resends_without_request`: the same seqno resent again and again although nobody asked for it.

Per (sender, receiver, proto, seqno): the sender's resends (`data_tx` with `resend` true and that `to`) and
whether the sender ever received a retransmission request for it from that receiver (an `xmit_req_rx` listing
the seqno). Flagged when it was resent more than `max_resends` times and never requested: the JGRP-1873
signature seen from the sender's side (the receiver's requests are lost or go to another connection, and the
sender resends its tail forever). Unicast senders resend the tail of a stuck window about every second xmit run
(5 per second at the test defaults) and answer a first-seqno request (unicast2) with a resend, so the limit
must be above what a partition of the scenario's length causes.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict
from pipeline.checks.registry import register_check

KEYS = ["sender", "receiver", "proto", "seqno"]


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    resent = (ctx.tables.of_type("data_tx").filter(F.col("resend") == F.lit(True))
              .groupBy(F.col("node").alias("sender"), F.col("to").alias("receiver"), "proto", "seqno")
              .agg(F.count(F.lit(1)).alias("resends"), F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts")))
    requested = (ctx.tables.of_type("xmit_req_rx")
                 .select(F.col("node").alias("sender"), F.col("from").alias("receiver"), "proto",
                         F.explode("seqnos").alias("seqno")).distinct())
    unrequested = resent.join(requested, KEYS, "left_anti")
    too_many = F.col("resends") > params["max_resends"]
    worst = unrequested.agg(F.max("resends").alias("worst"), F.count(F.lit(1)).alias("seqnos"),
                            F.count(F.when(too_many, 1)).alias("flagged")).collect()[0]  # one job for the three
    n_flagged = int(worst["flagged"])
    rows = unrequested.filter(too_many).orderBy(F.desc("resends"), *KEYS).limit(params["show"]).collect() \
        if n_flagged else []
    examples = [{**{k: r[k] for k in KEYS}, "resends": int(r["resends"]), "first_ts": r["first_ts"],
                 "span_s": r["last_ts"] - r["first_ts"]} for r in rows]
    details = {"flagged": n_flagged, "unrequested_seqnos": int(worst["seqnos"] or 0),
               "most_resends_without_request": int(worst["worst"] or 0), "examples": examples}
    if n_flagged:
        top = examples[0]
        return Verdict(FAIL, f"{n_flagged} seqno(s) resent > {params['max_resends']} times without any xmit request "
                             f"(worst: {top['sender']} resent {top['proto']} #{top['seqno']} to {top['receiver']} "
                             f"{top['resends']} times in {top['span_s']:.1f} s)", details)
    return Verdict(OK, f"no seqno resent > {params['max_resends']} times without a request (most: "
                       f"{details['most_resends_without_request']})", details)


CHECK = register_check(Check(
    name="resends_without_request",
    summary="same seqno resent again and again with no xmit request for it (JGRP-1873, sender's side)",
    defaults={"max_resends": 100, "show": 20},
    func=check,
    needs=frozenset({"data_tx", "xmit_req_rx"}),
))
