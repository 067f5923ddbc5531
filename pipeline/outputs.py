"""Write the derived tables of a run as Parquet under `report/tables/<name>.parquet` (one directory each; how, in
`pipeline.parquet`)."""
from __future__ import annotations

import json
from concurrent.futures import Executor
from functools import partial
from pathlib import Path
from typing import Callable, Mapping

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline.parquet import write_frame, write_rows
from pipeline.tables import Tables
from pipeline.timeline import timeline

TABLES_DIR = "tables"
FAULTS = "faults"
FAULTS_SCHEMA = T.StructType([
    T.StructField("fault_id", T.StringType()), T.StructField("kind", T.StringType()),
    T.StructField("start_ts", T.DoubleType()), T.StructField("end_ts", T.DoubleType()),
    T.StructField("detail", T.StringType()),
])


def derived_tables(tables: Tables, bucket_s: float) -> dict[str, DataFrame]:
    """Name -> DataFrame of every table written but `faults`, which is the driver's already (see SCHEMA.md,
    "Derived tables")."""
    facts = tables.delivery_facts
    pairs = (facts.groupBy("sender", "receiver")
             .agg(F.count(F.lit(1)).alias("expected"), F.sum(F.col("delivered").cast("long")).alias("delivered"),
                  F.sum(F.greatest(F.col("copies") - 1, F.lit(0))).alias("extra_copies"))
             .withColumn("missing", F.col("expected") - F.col("delivered")))
    return {
        "deliveries": facts,
        "pairs": pairs,
        "xmit_requests": tables.xmit_requests,
        "views": tables.views,
        "timeline": timeline(tables, bucket_s),
    }


def write_tables(tables: Tables, report_dir: Path, bucket_s: float, pool: Executor | None = None,
                 collected: Mapping[str, Callable[[], list[Row]]] | None = None) -> Callable[[], dict[str, str]]:
    """Write every derived table (overwriting), each as a task of `pool` (in this thread without one); returns
    a function that waits for the writes and gives name -> path relative to the run directory.

    `collected`: tables whose rows the caller has on the driver already (the timeline, which the report plots),
    as name -> a function giving the rows; they are written from those rows.
    """
    collected = collected or {}

    def path_of(name: str) -> Path:
        return report_dir / TABLES_DIR / f"{name}.parquet"

    def write(name: str, df: DataFrame) -> str:
        if name in collected:
            write_rows(path_of(name), df.schema, collected[name]())
        else:
            write_frame(df, path_of(name))
        return str(path_of(name).relative_to(report_dir.parent))

    def write_faults() -> str:
        rows = [(p.fault_id, p.kind, p.start_ts, p.end_ts, json.dumps(p.detail)) for p in tables.fault_periods]
        write_rows(path_of(FAULTS), FAULTS_SCHEMA, rows)
        return str(path_of(FAULTS).relative_to(report_dir.parent))

    writes: dict[str, Callable[[], str]] = {name: partial(write, name, df)
                                            for name, df in derived_tables(tables, bucket_s).items()}
    writes[FAULTS] = write_faults
    if pool is None:
        written = {name: job() for name, job in writes.items()}
        return lambda: written
    futures = {name: pool.submit(job) for name, job in writes.items()}
    return lambda: {name: future.result() for name, future in futures.items()}
