"""Per-node activity over time and the other small aggregates the report plots, computed in Spark.

Time is cut into buckets of `bucket_s` seconds from the run's first event; each row of the timeline holds, per
node and bucket, first deliveries, xmit requests sent and messages resent. Everything returned here is small
enough for the driver.
"""
from __future__ import annotations

import math
from typing import Callable

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from pipeline.report_data import PlotData
from pipeline.tables import Tables

TARGET_BUCKETS = 120
HISTOGRAM_BINS = 50


def bucket_seconds(duration_s: float, target: int = TARGET_BUCKETS) -> float:
    """A round bucket width (1, 2, 5 x 10^k seconds) giving about `target` buckets over `duration_s`."""
    raw = max(duration_s, 1e-3) / target
    exp = math.floor(math.log10(raw))
    for step in (1, 2, 5, 10):
        width = step * 10 ** exp
        if width >= raw:
            return float(width)
    return float(10 ** (exp + 1))


def timeline(tables: Tables, bucket_s: float) -> DataFrame:
    """Per (node, bucket): `t_s` (bucket start, seconds since the first event), `deliveries`, `xmit_requests`,
    `resent` (counts in the bucket)."""
    t0 = tables.first_ts
    bucket = (F.floor((F.col("ts") - F.lit(t0)) / F.lit(bucket_s)) * F.lit(bucket_s)).alias("t_s")
    deliveries = tables.first_deliveries.select(F.col("receiver").alias("node"), F.col("deliver_ts").alias("ts"),
                                                F.lit(1).alias("d"), F.lit(0).alias("x"), F.lit(0).alias("r"))
    activity = (tables.of_type("xmit_req_tx", "data_tx")
                .filter((F.col("type") == "xmit_req_tx") | F.coalesce(F.col("resend"), F.lit(False)))
                .select("node", "ts", F.lit(0).alias("d"),
                        (F.col("type") == "xmit_req_tx").cast("int").alias("x"),
                        (F.col("type") == "data_tx").cast("int").alias("r")))
    return (deliveries.unionByName(activity).groupBy("node", bucket)
            .agg(F.sum("d").alias("deliveries"), F.sum("x").alias("xmit_requests"), F.sum("r").alias("resent")))


def latency_histogram(tables: Tables, bins: int = HISTOGRAM_BINS) -> list[tuple[float, float]]:
    """Equal-width histogram of delivery latencies: (bin start ms, deliveries), bin width from min to max (one job:
    the bounds are joined to every latency, not collected first)."""
    delivered = tables.delivery_facts.filter(F.col("delivered")).select("latency_ms")
    bounds = delivered.agg(F.min("latency_ms").alias("low"), F.max("latency_ms").alias("high"))
    even = (F.col("high") - F.col("low")) / F.lit(bins)
    width = F.when(even != 0, even).otherwise(F.lit(1.0))
    index = F.least(F.floor((F.col("latency_ms") - F.col("low")) / F.col("width")), F.lit(bins - 1)).alias("i")
    rows = (delivered.crossJoin(bounds).withColumn("width", width)
            .groupBy("low", "width", index).agg(F.count(F.lit(1)).alias("n")).collect())
    if not rows:
        return []
    low, width_ms = rows[0]["low"], rows[0]["width"]
    counts = {int(r["i"]): int(r["n"]) for r in rows}
    return [(low + i * width_ms, float(counts.get(i, 0))) for i in range(bins)]


def duration_s(tables: Tables) -> float:
    return max(tables.last_ts - tables.first_ts, 0.0)


def plot_data(tables: Tables, timeline_rows: Callable[[], list[Row]]) -> PlotData:
    """Collect everything the report draws from the tables (the checks' `pairs` and `latency_percentiles` are
    the caller's to add); the analysis runs this beside the checks. `timeline_rows` gives the rows of
    `timeline(tables, bucket_seconds(duration_s(tables)))`, which the analysis also writes as a table."""
    bucket_s = bucket_seconds(duration_s(tables))
    data = PlotData(t0_ts=tables.first_ts, bucket_s=bucket_s, nodes=list(tables.nodes),
                    faults=list(tables.fault_periods), heals_ts=list(tables.heal_times))
    n_buckets = int(duration_s(tables) // bucket_s) + 1
    dense: dict[str, dict[str, list[float]]] = {"deliveries": {}, "xmit_requests": {}, "resent": {}}
    for row in timeline_rows():
        index = min(int(round(row["t_s"] / bucket_s)), n_buckets - 1)
        for name, series in dense.items():
            if row[name]:
                series.setdefault(row["node"], [0.0] * n_buckets)[index] += row[name] / bucket_s
    starts = [i * bucket_s for i in range(n_buckets)]
    data.deliveries, data.xmit_requests, data.resent = (
        {node: list(zip(starts, values)) for node, values in dense[name].items()}
        for name in ("deliveries", "xmit_requests", "resent"))
    data.latency_histogram = latency_histogram(tables)
    return data
