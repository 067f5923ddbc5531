"""Check `history`: the event files are intact: no bad lines, no lost lines (gaps in `seq`), one run id.

A cut-off last line (a node killed mid-write) is tolerated and only reported. A `seq` back at 1 starts a new
boot of the writer (a restarted node appends to its file), not a gap.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check


def _seq_gaps(ctx: CheckContext, show: int) -> tuple[int, int, list[dict[str, Any]]]:
    """(gaps, lost events, first gaps) over each file's events ordered by (ts, seq) (a lost run line of the
    node's history loses every event of its rows)."""
    order = Window.partitionBy("file").orderBy("ts", "seq")
    rows = ctx.tables.events.select("file", "ts", "seq", F.lag("seq").over(order).alias("prev"))
    gaps = rows.filter((F.col("prev").isNull() & (F.col("seq") > 1))
                       | (F.col("prev").isNotNull() & (F.col("seq") > F.col("prev") + 1)))
    gaps = gaps.withColumn("lost", F.col("seq") - F.coalesce(F.col("prev"), F.lit(0)) - 1)
    total = gaps.agg(F.count(F.lit(1)).alias("n"), F.sum("lost").alias("lost")).collect()[0]
    if not total["n"]:
        return 0, 0, []
    first = (gaps.orderBy("file", "ts", "seq").limit(show)
             .select("file", F.col("prev").alias("after_seq"), F.col("seq").alias("next_seq"), "lost").collect())
    return int(total["n"]), int(total["lost"] or 0), [r.asDict() for r in first]


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    stats = ctx.history
    gaps, lost, first_gaps = _seq_gaps(ctx, params["show"])
    details: dict[str, Any] = {
        "lines": stats.lines, "events": stats.events, "bad_lines": stats.bad_lines,
        "bad_line_examples": [vars(b) for b in stats.bad_line_examples],
        "truncated": stats.truncated, "seq_gaps": gaps, "lost_lines": lost, "first_seq_gaps": first_gaps,
        "run_ids": stats.run_ids,
    }
    problems = []
    if over(stats.bad_lines, params["max_bad_lines"]):
        problems.append(f"{stats.bad_lines} bad line(s)")
    if over(lost, params["max_lost_lines"]):
        problems.append(f"{lost} event(s) lost ({gaps} gap(s) in seq)")
    if len(stats.run_ids) > 1:
        problems.append(f"events of {len(stats.run_ids)} runs mixed: {', '.join(sorted(stats.run_ids))}")
    notes = [f"{len(stats.truncated)} truncated last line(s) tolerated"] if stats.truncated else []
    if problems:
        return Verdict(FAIL, "; ".join(problems + notes), details)
    return Verdict(OK, "; ".join([f"{stats.events} events in {len(stats.files)} files"] + notes), details)


CHECK = register_check(Check(
    name="history",
    summary="event files intact: no bad lines, no seq gaps, one run id (a truncated last line is tolerated)",
    defaults={"max_bad_lines": 0, "max_lost_lines": 0, "show": 5},
    func=check,
))
