"""Check `duplicates`: no receiver delivered the same message id more than once."""
from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    dups = ctx.tables.first_deliveries.filter(F.col("copies") > 1)
    totals = dups.agg(F.count(F.lit(1)).alias("msgs"), F.sum(F.col("copies") - 1).alias("extra")).collect()[0]
    msgs, extra = int(totals["msgs"] or 0), int(totals["extra"] or 0)
    examples = [] if not msgs else (
        dups.orderBy("deliver_ts", "receiver", "msg_id").limit(params["show"])
        .select("receiver", "msg_id", "sender", "copies").collect())
    details = {"duplicated_msgs": msgs, "extra_deliveries": extra, "examples": [r.asDict() for r in examples]}
    if over(extra, params["max_duplicates"]):
        return Verdict(FAIL, f"{msgs} message(s) delivered more than once ({extra} extra deliveries)", details)
    return Verdict(OK, "no message delivered twice" if not extra else f"{extra} extra deliveries allowed", details)


CHECK = register_check(Check(
    name="duplicates",
    summary="no (receiver, message id) delivered twice",
    defaults={"max_duplicates": 0, "show": 20},
    func=check,
))
