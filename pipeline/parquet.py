"""Write one table as Parquet, in a directory of its own: a small one from the driver with pyarrow, a large one with
Spark's writer.

Spark's writer costs about 0.1 s per table whatever its size (a job, its output committer, the writer's set-up):
of a warm analysis of 15k events, the six derived tables took about a second that way. A table of up to
`DRIVER_MAX_ROWS` rows comes to the driver instead and pyarrow (which pyspark's own Arrow paths use) writes it at
once. Rows cost the driver about 8 us each (Spark's conversion to Python), so beyond some 20k rows Spark's writer
is faster (a 35k-row table: 0.36 s from the driver, 0.25 s by Spark), and a large table stays on the executors.
Both give the same columns, types and rows (tests/unit/test_parquet.py); Spark reads every column back as
nullable, whichever wrote it.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import types as T

PART_FILE = "part-00000.parquet"
DRIVER_MAX_ROWS = 20_000
_SCALARS: dict[type, pa.DataType] = {
    T.StringType: pa.string(), T.LongType: pa.int64(), T.IntegerType: pa.int32(), T.DoubleType: pa.float64(),
    T.BooleanType: pa.bool_(), T.FloatType: pa.float32(), T.ShortType: pa.int16(), T.ByteType: pa.int8(),
}


def arrow_type(spark_type: T.DataType) -> pa.DataType:
    """The Arrow type Spark's Parquet writer would give `spark_type`; ValueError for a type no table uses."""
    if isinstance(spark_type, T.ArrayType):
        return pa.list_(arrow_type(spark_type.elementType))
    scalar = _SCALARS.get(type(spark_type))
    if scalar is None:
        raise ValueError(f"no Parquet mapping for the Spark type {spark_type.simpleString()}")
    return scalar


def arrow_schema(schema: T.StructType) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f.dataType), nullable=f.nullable) for f in schema.fields])


def write_rows(path: Path, schema: T.StructType, rows: Iterable[tuple[Any, ...]]) -> None:
    """Write `rows` (tuples in the order of `schema`'s fields) as `path/part-00000.parquet`, replacing `path`.

    The table is written beside `path` first and moved into place, so a reader sees the old table or the new one.
    """
    target = arrow_schema(schema)
    columns = list(zip(*rows)) or [() for _ in target]
    table = pa.Table.from_arrays([pa.array(list(values), type=field.type) for values, field in zip(columns, target)],
                                 schema=target)
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    pq.write_table(table, staging / PART_FILE)
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)


def write_frame(df: DataFrame, path: Path, max_rows: int = DRIVER_MAX_ROWS) -> None:
    """Write `df` as Parquet under the directory `path` (replacing it): from the driver when it has at most
    `max_rows` rows, else with Spark's writer (one file)."""
    rows = df.limit(max_rows + 1).collect()
    if len(rows) <= max_rows:
        write_rows(path, df.schema, rows)
    else:
        df.coalesce(1).write.mode("overwrite").parquet(str(path))
