"""Kept frames (`pipeline.kept`): a small history's frames are local checkpoints whose plans are one leaf, a large
history's are cached, the rows are the same either way, and nothing an analysis kept outlives it."""
from __future__ import annotations

import pytest

import pipeline_fixtures as pf
from pipeline_fixtures import spark  # noqa: F401  (the shared session fixture)

from pipeline import api
from pipeline.kept import KeptFrames


def _kept_rdds(session) -> int:
    return session.sparkContext._jsc.getPersistentRDDs().size()


def _plan(df) -> str:
    return df._jdf.queryExecution().analyzed().toString()


@pytest.mark.parametrize("small", [True, False])
def test_a_kept_frame_has_the_same_rows_and_release_frees_it(spark, small):  # noqa: F811
    source = spark.range(200).selectExpr("id", "id % 7 AS k").filter("k > 2")
    kept = KeptFrames(small)
    before = _kept_rdds(spark)

    frame = kept.keep(source)

    assert sorted(frame.collect()) == sorted(source.collect())
    if small:  # one leaf: the filter and the projection are not in the plan any more
        assert "Filter" in _plan(source) and _plan(frame).strip().count("\n") == 0
    else:
        assert frame.is_cached and "Filter" in _plan(frame)
    assert _kept_rdds(spark) == before + 1
    kept.release()
    assert _kept_rdds(spark) == before


def test_an_analysis_keeps_nothing_once_it_is_done(tmp_path, spark):  # noqa: F811
    run_dir = pf.clean_scenario().write(tmp_path / "run")
    before = _kept_rdds(spark)

    summary = api.analyze(run_dir, spark=spark, report=False)

    assert summary.checks["delivery"].status == "ok"
    assert _kept_rdds(spark) == before
