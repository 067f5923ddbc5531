"""Check `delivery`: every expected (message, receiver) pair was delivered, and for those that were not, why.

Expected receivers are defined in `pipeline.tables.Tables.expected` (unicast: the target; multicast: the nodes
whose view at send time contained the sender). Reports sent vs delivered per (sender, receiver), what became of
every missing message at its receiver (`Tables.missing_fates`: never arrived, discarded and why, buffered
behind a gap, never sent by the protocol), counted by fate and reason, and the first missing messages with
their fate.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import Row
from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    facts = ctx.tables.delivery_facts
    ignored = list(params["ignore_receivers"])
    if ignored:
        facts = facts.filter(~F.col("receiver").isin(*ignored))
    pairs = (facts.groupBy("sender", "receiver")
             .agg(F.count(F.lit(1)).alias("expected"), F.sum(F.col("delivered").cast("long")).alias("delivered")))
    first = ctx.tables.first_deliveries
    unexpected = (first.filter(F.col("receiver") != F.col("sender"))
                  .join(ctx.tables.delivery_facts.select("msg_id", "receiver"), ["msg_id", "receiver"], "left_anti"))
    strays_df = (unexpected.join(ctx.tables.sends.select("msg_id", F.lit(True).alias("was_sent")), "msg_id", "left")
                 .agg(F.count(F.lit(1)).alias("unexpected"),
                      F.sum(F.col("was_sent").isNull().cast("long")).alias("unsent")))
    # one job for both: the pairs' counts, and the deliveries nobody expected
    rows = (pairs.withColumn("part", F.lit("pair"))
            .unionByName(strays_df.withColumn("part", F.lit("strays")), allowMissingColumns=True).collect())
    [strays] = [r for r in rows if r["part"] == "strays"]
    table = sorted(({"sender": r["sender"], "receiver": r["receiver"], "expected": int(r["expected"]),
                     "delivered": int(r["delivered"]), "missing": int(r["expected"] - r["delivered"])}
                    for r in rows if r["part"] == "pair"), key=lambda p: (p["sender"], p["receiver"]))
    expected = sum(p["expected"] for p in table)
    missing = sum(p["missing"] for p in table)
    first_missing, fate_counts = _fates(ctx, ignored, params["show"]) if missing else ([], {})
    details = {
        "expected": expected, "delivered": expected - missing, "missing": missing,
        "pairs": table, "missing_msgs": [r.asDict() for r in first_missing],
        "missing_fates": dict(sorted(fate_counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "unexpected_deliveries": int(strays["unexpected"]), "deliveries_of_unsent_ids": int(strays["unsent"] or 0),
        "ignored_receivers": ignored,
    }
    if over(missing, params["max_missing"]):
        worst = sorted((p for p in table if p["missing"]), key=lambda p: -p["missing"])[:3]
        where = ", ".join(f"{p['sender']}->{p['receiver']}: {p['missing']}" for p in worst)
        why = ", ".join(f"{n} {label}" for label, n in details["missing_fates"].items())
        return Verdict(FAIL, f"{missing} of {expected} expected deliveries missing ({where}); at the receivers: "
                             f"{why}", details)
    return Verdict(OK, f"{expected - missing} of {expected} expected deliveries made", details)


def _fates(ctx: CheckContext, ignored: list[str], show: int) -> tuple[list[Row], dict[str, int]]:
    """The first `show` missing deliveries with their fates, and the missing counted by fate and reason. Asked only
    when some are missing: `Tables.missing_fates` is a kept frame, and keeping one costs its planning (70-80 ms of a
    warm analysis) even when nothing reads it."""
    fates = ctx.tables.missing_fates.filter(~F.col("receiver").isin(*ignored)) if ignored \
        else ctx.tables.missing_fates
    first_missing = (fates.orderBy("send_ts", "msg_id", "receiver").limit(show)
                     .select("msg_id", "sender", "receiver", "kind", "send_ts", "seqno", "fate", "reasons", "resends")
                     .collect())
    counts = {_fate_label(r["fate"], r["reason"]): int(r["n"]) for r in
              fates.select("fate", F.explode_outer(F.when(F.size("reasons") > 0, F.col("reasons"))).alias("reason"))
              .groupBy("fate", "reason").agg(F.count(F.lit(1)).alias("n")).collect()}
    return first_missing, counts


def _fate_label(fate: str, reason: str | None) -> str:
    """`discarded (below_window)`, `never_arrived`, ...: a fate with the data_rx action that explains it."""
    return fate if reason is None else f"{fate} ({reason})"


CHECK = register_check(Check(
    name="delivery",
    summary="sent vs delivered per (sender, receiver); missing message ids",
    defaults={"max_missing": 0, "ignore_receivers": [], "show": 20},
    func=check,
))
