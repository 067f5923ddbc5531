"""Check `fifo`: each receiver delivers each sender's messages in send order, per channel (unicast, multicast).

Order is the per-boot counter in the message id (`<node>.<boot>.<n>`); only the first delivery of an id counts
(repeats are the `duplicates` check's business), and a gap (a lost message) is not a violation.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check
from pipeline.tables import MSG_ID_PATTERN


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    counter = F.regexp_extract("msg_id", MSG_ID_PATTERN, 3)
    first = ctx.tables.first_deliveries.select(
        "receiver", "msg_id", "sender", "kind", "deliver_ts", "deliver_seq",
        F.regexp_extract("msg_id", MSG_ID_PATTERN, 2).alias("boot"),
        F.when(counter != "", counter.cast("long")).alias("n"))
    before = (Window.partitionBy("receiver", "sender", "boot", "kind").orderBy("deliver_ts", "deliver_seq")
              .rowsBetween(Window.unboundedPreceding, -1))
    marked = first.withColumn("max_before", F.max("n").over(before))
    late = marked.filter(F.col("n") < F.col("max_before"))
    totals = marked.agg(F.sum((F.col("n") < F.col("max_before")).cast("long")).alias("late"),
                        F.sum(F.col("n").isNull().cast("long")).alias("unparsed")).collect()[0]
    count, unparsed = int(totals["late"] or 0), int(totals["unparsed"] or 0)
    examples = [] if not count else (
        late.orderBy("deliver_ts", "receiver").limit(params["show"])
        .select("receiver", "sender", "kind", "msg_id", "max_before").collect())
    details = {"violations": count, "unparsed_msg_ids": unparsed,
               "examples": [{"receiver": r["receiver"], "sender": r["sender"], "kind": r["kind"],
                             "msg_id": r["msg_id"], "delivered_after_counter": r["max_before"]} for r in examples]}
    if over(count, params["max_violations"]):
        return Verdict(FAIL, f"{count} message(s) delivered after a later message of the same sender", details)
    return Verdict(OK, "per-sender order kept", details)


CHECK = register_check(Check(
    name="fifo",
    summary="per-sender FIFO order at each receiver (unicast and multicast channels apart)",
    defaults={"max_violations": 0, "show": 20},
    func=check,
))
