"""Write the derived tables of a run as Parquet under `report/tables/<name>.parquet` (one directory each)."""
from __future__ import annotations

import json
from concurrent.futures import Executor
from pathlib import Path
from typing import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.tables import Tables
from pipeline.timeline import timeline

TABLES_DIR = "tables"


def derived_tables(tables: Tables, bucket_s: float) -> dict[str, DataFrame]:
    """Name -> DataFrame of every table written (see SCHEMA.md, "Derived tables")."""
    facts = tables.delivery_facts
    pairs = (facts.groupBy("sender", "receiver")
             .agg(F.count(F.lit(1)).alias("expected"), F.sum(F.col("delivered").cast("long")).alias("delivered"),
                  F.sum(F.greatest(F.col("copies") - 1, F.lit(0))).alias("extra_copies"))
             .withColumn("missing", F.col("expected") - F.col("delivered")))
    faults = tables.spark.createDataFrame(
        [(p.fault_id, p.kind, p.start_ts, p.end_ts, json.dumps(p.detail)) for p in tables.fault_periods],
        "fault_id string, kind string, start_ts double, end_ts double, detail string")
    return {
        "deliveries": facts,
        "pairs": pairs,
        "xmit_requests": tables.xmit_requests,
        "views": tables.views,
        "faults": faults,
        "timeline": timeline(tables, bucket_s),
    }


def write_tables(tables: Tables, report_dir: Path, bucket_s: float,
                 pool: Executor | None = None) -> Callable[[], dict[str, str]]:
    """Write every derived table (overwriting), each as a task of `pool` (in this thread without one); returns
    a function that waits for the writes and gives name -> path relative to the run directory."""
    def write(name: str, df: DataFrame) -> str:
        path = report_dir / TABLES_DIR / f"{name}.parquet"
        df.coalesce(1).write.mode("overwrite").parquet(str(path))
        return str(path.relative_to(report_dir.parent))

    frames = derived_tables(tables, bucket_s)
    if pool is None:
        written = {name: write(name, df) for name, df in frames.items()}
        return lambda: written
    futures = {name: pool.submit(write, name, df) for name, df in frames.items()}
    return lambda: {name: future.result() for name, future in futures.items()}
