"""Check `latency`: send-to-first-delivery time per expected delivery, p50/p95/p99/max in milliseconds.

Informational unless a limit is set (`max_p99_ms`, `max_ms`). Times come from different hosts' clocks; a
negative latency means clock skew and is counted.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check

PERCENTILE_ACCURACY = 100_000


def latency_stats(ctx: CheckContext) -> dict[str, dict[str, Any]]:
    """{"all": {...}, "unicast": {...}, "multicast": {...}} with count, p50_ms, p95_ms, p99_ms, max_ms, ..."""
    delivered = ctx.tables.delivery_facts.filter(F.col("delivered"))
    rows = (delivered.rollup("kind")
            .agg(F.count(F.lit(1)).alias("count"),
                 F.percentile_approx("latency_ms", [0.5, 0.95, 0.99], PERCENTILE_ACCURACY).alias("p"),
                 F.min("latency_ms").alias("min_ms"), F.max("latency_ms").alias("max_ms"),
                 F.avg("latency_ms").alias("mean_ms"),
                 F.sum((F.col("latency_ms") < 0).cast("long")).alias("negative"))
            .collect())
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        p = r["p"] or [None, None, None]
        out[r["kind"] or "all"] = {"count": int(r["count"]), "p50_ms": p[0], "p95_ms": p[1], "p99_ms": p[2],
                                   "min_ms": r["min_ms"], "max_ms": r["max_ms"], "mean_ms": r["mean_ms"],
                                   "negative": int(r["negative"] or 0)}
    out.setdefault("all", {"count": 0, "p50_ms": None, "p95_ms": None, "p99_ms": None, "min_ms": None,
                           "max_ms": None, "mean_ms": None, "negative": 0})
    return out


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    stats = latency_stats(ctx)
    overall = stats["all"]
    details = {"latency": stats}
    if overall["count"] == 0:
        return Verdict(OK, "no delivered messages to time", details)
    problems = []
    if over(overall["p99_ms"], params["max_p99_ms"]):
        problems.append(f"p99 {overall['p99_ms']:.1f} ms > {params['max_p99_ms']} ms")
    if over(overall["max_ms"], params["max_ms"]):
        problems.append(f"max {overall['max_ms']:.1f} ms > {params['max_ms']} ms")
    text = (f"p50 {overall['p50_ms']:.1f} ms, p95 {overall['p95_ms']:.1f} ms, p99 {overall['p99_ms']:.1f} ms, "
            f"max {overall['max_ms']:.1f} ms over {overall['count']} deliveries")
    if problems:
        return Verdict(FAIL, "; ".join(problems) + f" ({text})", details)
    return Verdict(OK, text, details)


CHECK = register_check(Check(
    name="latency",
    summary="send -> first delivery latency p50/p95/p99/max (limits optional)",
    defaults={"max_p99_ms": None, "max_ms": None},
    func=check,
))
