"""bench/baseline.py: BASELINE.md round trip, the 20 % regression warning in each direction, partial updates."""
from __future__ import annotations

import pytest

from bench import baseline
from bench.baseline import Recorded


def _row(bench: str, name: str, value: float | None, ratio: float | None, better: str = "higher") -> Recorded:
    return Recorded(bench, name, value, "msg/s", ratio, better)


def test_rows_come_back_as_written(tmp_path):
    path = tmp_path / "BASELINE.md"
    rows = [_row("bench_a", "rate, bundled", 52000.0, 0.83), _row("bench_b", "apply", 35.0, None, "lower")]
    baseline.write(rows, path=path)
    assert baseline.read(path) == {(r.bench, r.name): r for r in rows}


@pytest.mark.parametrize("better, old, new, warned", [
    ("higher", 1.0, 0.75, True), ("higher", 1.0, 0.85, False), ("higher", 1.0, 1.5, False),
    ("lower", 10.0, 12.5, True), ("lower", 10.0, 11.5, False), ("lower", 10.0, 5.0, False),
])
def test_a_change_over_20_percent_the_wrong_way_is_a_warning(better, old, new, warned):
    recorded = {("b", "m"): _row("b", "m", 123.0, old, better)}
    warnings = baseline.regressions(recorded, [_row("b", "m", 1.0, new, better)])
    assert bool(warnings) is warned
    if warned:
        assert "b / m" in warnings[0] and "ratio" in warnings[0]


def test_a_row_without_ratio_is_compared_by_value_and_unknown_rows_are_skipped():
    recorded = {("b", "m"): _row("b", "m", 100.0, None)}
    assert baseline.regressions(recorded, [_row("b", "m", 70.0, None)])
    assert not baseline.regressions(recorded, [_row("b", "other", 1.0, None), _row("b", "m", None, None)])


def test_an_update_keeps_the_rows_of_benchmarks_that_did_not_run(tmp_path):
    path = tmp_path / "BASELINE.md"
    baseline.write([_row("bench_a", "x", 1.0, 1.0), _row("bench_b", "y", 2.0, 2.0)], path=path)
    baseline.write([_row("bench_a", "z", 3.0, 3.0)], path=path)
    assert set(baseline.read(path)) == {("bench_a", "z"), ("bench_b", "y")}


def test_a_bad_number_names_the_line(tmp_path):
    path = tmp_path / "BASELINE.md"
    path.write_text(f"{baseline.HEADER}\n|---|---|---|---|---|---|\n| b | m | fast | s | 1.0 | lower |\n")
    with pytest.raises(ValueError, match=r"BASELINE.md:3: not a number"):
        baseline.read(path)
