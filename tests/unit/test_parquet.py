"""Tables written as Parquet (`pipeline.parquet`): from the driver with pyarrow or with Spark's writer, Spark reads
back the same columns, types and rows; the analysis' derived tables are the frames they come from."""
from __future__ import annotations

import json
import math

import pytest
from pyspark.sql import types as T

import pipeline_fixtures as pf
from pipeline_fixtures import spark  # noqa: F401  (the shared session fixture)

from pipeline import api
from pipeline.outputs import FAULTS, derived_tables
from pipeline.parquet import PART_FILE, write_frame, write_rows
from pipeline.reader import read_history
from pipeline.rundir import locate
from pipeline.tables import Tables
from pipeline.timeline import bucket_seconds, duration_s

EVERY_TYPE = T.StructType([
    T.StructField("text", T.StringType()), T.StructField("big", T.LongType(), nullable=False),
    T.StructField("int", T.IntegerType()), T.StructField("short", T.ShortType()), T.StructField("byte", T.ByteType()),
    T.StructField("real", T.DoubleType()), T.StructField("single", T.FloatType()),
    T.StructField("flag", T.BooleanType(), nullable=False), T.StructField("names", T.ArrayType(T.StringType())),
    T.StructField("nested", T.ArrayType(T.ArrayType(T.LongType()))),
])
ROWS = [
    ("a", 2**63 - 1, 2**31 - 1, 2**15 - 1, 127, math.nan, 1.5, True, ["x", None], [[1, 2], []]),
    (None, -(2**63), -(2**31), -(2**15), -128, -0.0, None, False, [], None),
    ("é\u0000\U0001f600", 0, None, None, None, math.inf, -math.inf, True, None, [None, [None]]),
]


def _read_back(spark, path) -> tuple[str, list[str]]:  # noqa: F811
    df = spark.read.parquet(str(path))
    return df.schema.simpleString(), sorted(map(repr, df.collect()))


def test_the_driver_and_spark_write_the_same_table(spark, tmp_path):  # noqa: F811
    df = spark.createDataFrame(ROWS, EVERY_TYPE)

    write_frame(df, tmp_path / "driver", max_rows=len(ROWS))
    write_frame(df, tmp_path / "spark", max_rows=len(ROWS) - 1)

    driver, by_spark = _read_back(spark, tmp_path / "driver"), _read_back(spark, tmp_path / "spark")
    assert driver == by_spark
    assert driver[0] == EVERY_TYPE.simpleString() and len(driver[1]) == len(ROWS)
    assert [p.name for p in (tmp_path / "driver").iterdir()] == [PART_FILE]
    assert "_SUCCESS" in {p.name for p in (tmp_path / "spark").iterdir()}  # a table above the cap: Spark wrote it


def test_no_rows_still_give_the_table_with_its_columns(spark, tmp_path):  # noqa: F811
    write_rows(tmp_path / "empty", EVERY_TYPE, [])

    assert _read_back(spark, tmp_path / "empty") == (EVERY_TYPE.simpleString(), [])


def test_writing_again_replaces_the_table_and_leaves_nothing_beside_it(spark, tmp_path):  # noqa: F811
    schema = T.StructType([T.StructField("n", T.LongType())])
    write_rows(tmp_path / "t", schema, [(1,), (2,), (3,)])

    write_rows(tmp_path / "t", schema, [(9,)])

    assert _read_back(spark, tmp_path / "t")[1] == ["Row(n=9)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


def test_a_type_no_table_uses_is_refused_by_name(tmp_path):
    schema = T.StructType([T.StructField("m", T.MapType(T.StringType(), T.IntegerType()))])

    with pytest.raises(ValueError, match=r"map<string,int>"):
        write_rows(tmp_path / "t", schema, [({"a": 1},)])
    assert not (tmp_path / "t").exists()


def test_the_analysis_writes_each_derived_table_as_the_frame_it_comes_from(spark, tmp_path):  # noqa: F811
    run_dir = pf.with_endless_retransmission().write(tmp_path / "run")
    summary = api.analyze(run_dir, spark=spark)  # small tables: every one written from the driver
    read = read_history(spark, locate(run_dir))
    tables = Tables(spark, read)
    try:
        frames = derived_tables(tables, bucket_seconds(duration_s(tables)))
        written = summary.outputs["tables"]
        assert set(written) == set(frames) | {FAULTS}
        for name, df in frames.items():
            schema, rows = _read_back(spark, run_dir / written[name])
            assert rows == sorted(map(repr, df.collect())) and len(rows) > 0, name
            assert schema == df.schema.simpleString(), name
        faults = spark.read.parquet(str(run_dir / written[FAULTS])).orderBy("start_ts", "fault_id").collect()
        assert [(r["fault_id"], r["kind"], r["start_ts"], r["end_ts"], json.loads(r["detail"])) for r in faults] == [
            (p.fault_id, p.kind, p.start_ts, p.end_ts, p.detail) for p in tables.fault_periods]
        assert faults
    finally:
        tables.release()
