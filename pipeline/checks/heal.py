"""Check `heal_recovery`: after the last heal, every message sent before it is delivered, and soon.

Recovery time is the last first-delivery of the expected (message, receiver) pairs sent before the last heal,
minus the heal time (0 if all were delivered before it). A heal is a `heal` event or the `fault_end` that ended
the last open fault (`Tables.heal_times`); its time is the event's `effective_ts`, else `applied_ts`, else its
`ts`. A run without a heal passes.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    heals = ctx.tables.heal_times
    if not heals:
        return Verdict(OK, "no heal in this run", {"heal_ts": None, "recovery_s": None})
    heal_ts = heals[-1]
    before = ctx.tables.delivery_facts.filter(F.col("send_ts") < heal_ts)
    row = before.agg(F.count(F.lit(1)).alias("n"), F.sum((~F.col("delivered")).cast("long")).alias("undelivered"),
                     F.max("deliver_ts").alias("last_deliver_ts")).collect()[0]
    expected, undelivered = int(row["n"]), int(row["undelivered"] or 0)
    last = row["last_deliver_ts"]
    recovery_s = max(0.0, last - heal_ts) if last is not None else 0.0
    details = {"heal_ts": heal_ts, "heals": len(heals), "expected_before_heal": expected,
               "undelivered": undelivered, "recovery_s": None if undelivered else recovery_s}
    if undelivered:
        return Verdict(FAIL, f"{undelivered} of {expected} deliveries of messages sent before the last heal never "
                             "happened", details)
    if over(recovery_s, params["max_recovery_s"]):
        return Verdict(FAIL, f"full delivery {recovery_s:.2f} s after the last heal (limit "
                             f"{params['max_recovery_s']:g} s)", details)
    return Verdict(OK, f"full delivery {recovery_s:.2f} s after the last heal", details)


CHECK = register_check(Check(
    name="heal_recovery",
    summary="time from the last heal to full delivery of the messages sent before it",
    defaults={"max_recovery_s": 30.0},
    func=check,
))
