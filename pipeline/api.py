"""`analyze()`: the whole analysis of one run directory, from event files to summary.json and report.html.

Steps: validate the run directory and the check parameters (both before Spark starts), read and validate the
history, run every check (a crashing check gives `unknown`) beside writing the Parquet tables, write
`report/summary.json`, then `report/report.html` (with the message sequence diagram of `diagram`'s window,
`pipeline.sequence_source`). The analysis runs in a Spark session of its own (SQL settings sized to the history,
`pipeline.session.analysis_session`), or in the warm analysis service when it is up. `steps` lets a caller show
progress: it is called with each step's label and must return a context manager that wraps the step.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import time
from concurrent.futures import ThreadPoolExecutor
from collections import Counter
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping

from pyspark.sql import SparkSession

from pipeline import html_report, service_client
from pipeline.checks import CHECKS, CheckContext, CheckResult, run_check
from pipeline.outputs import write_tables
from pipeline.params import resolve
from pipeline.plot_process import PLOTS_MODULE, PlotProcess, draw_plots
from pipeline.reader import HistoryStats, read_history
from pipeline.report_data import PlotData
from pipeline.rundir import RunFiles, locate
from pipeline.sequence import DiagramOptions
from pipeline.service_client import StepReporter
from pipeline.session import analysis_session, small_history, spark_session
from pipeline.summary import Summary
from pipeline.tables import Tables
from pipeline.timeline import bucket_seconds, duration_s, plot_data, timeline
from pipeline.verdict import read_expectation, run_verdict

SUMMARY_FILE = "summary.json"
CHECK_THREADS = 4
REPORT_FILE = "report.html"


def _no_progress(label: str) -> ContextManager[None]:
    return contextlib.nullcontext()


def _import_beside(name: str) -> None:
    """Import module `name` in a thread of its own, which ends with it. Its result is not waited for: whoever
    imports the module later gets it (or waits for the import to end), and an import that failed fails again,
    with its own error, where the module is imported."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import")
    pool.submit(importlib.import_module, name)
    pool.shutdown(wait=False)


def _run_id(history: HistoryStats, run_dir: Path) -> str:
    if history.run_ids:
        return Counter(history.run_ids).most_common(1)[0][0]
    return run_dir.name


def _duration_s(history: HistoryStats) -> float | None:
    first, last = history.first_ts, history.last_ts
    return (last - first) if first is not None and last is not None else None


def _counts(tables: Tables, history: HistoryStats, results: dict[str, CheckResult]) -> dict[str, Any]:
    by_type = history.events_by_type
    sent = history.sent_by_kind
    delivery = results.get("delivery")
    facts = delivery.details if delivery is not None and delivery.status != "unknown" else {}
    first, last = history.first_ts, history.last_ts
    return {
        "events": history.events,
        "files": len(history.files),
        "nodes": history.nodes,
        "first_ts": first,
        "last_ts": last,
        "duration_s": _duration_s(history),
        "msgs_sent": sum(sent.values()),
        "msgs_sent_by_kind": dict(sorted(sent.items())),
        "deliveries": by_type.get("app_deliver", 0),
        "expected_deliveries": facts.get("expected"),
        "missing_deliveries": facts.get("missing"),
        "faults": len(tables.fault_periods),
        "heals": len(tables.heal_times),
        "events_by_type": dict(sorted(by_type.items())),
    }


def analyze(run_dir: Path | str, master: str | None = None, params: Mapping[str, Mapping[str, Any]] | None = None,
            *, spark: SparkSession | None = None, report: bool = True,
            steps: StepReporter | None = None, check_threads: int = CHECK_THREADS,
            diagram: DiagramOptions | None = None, on_verdict: Callable[[Summary], None] | None = None,
            plotter: PlotProcess | None = None) -> Summary:
    """Analyse the run in `run_dir` and write its outputs under `run_dir/report/`.

    `master`: a Spark master URL (default `$SPLITLAB_SPARK_MASTER`, else `local[*]`); `params`: check
    parameters `{check: {key: value}}` over the defaults; `spark`: use this session instead; `report`: also
    write the Parquet tables and report.html (summary.json is always written); `check_threads`: checks and the
    table writes run concurrently as Spark jobs from this many threads (a table they share is built by the
    first that asks, `pipeline.tables.shared`); `diagram`: the window and size of the report's message sequence
    diagram (default: `DiagramOptions()`); `plotter`: the process that draws the report's plots (the service's),
    else they are drawn in this one.
    Without `spark`, the run goes to the warm analysis service when it is up on that master (`pipeline.service`).
    The verdict comes first: summary.json is written as soon as the checks are done (`analysis.verdict_s`) and
    `on_verdict(summary)` called, then the tables and the report follow and summary.json is written again with
    their paths (a served analysis the same: the service sends the verdict when its checks are done).
    Raises `UsageError` for a bad run directory or bad parameters, `EnvironmentProblem` when Spark cannot start.
    """
    step = steps or _no_progress
    if spark is None:
        served = service_client.analyze(run_dir, master, params, report, step, diagram or DiagramOptions(), on_verdict)
        if served is not None:
            return served
    started = time.monotonic()
    run = locate(run_dir)
    resolved = resolve(CHECKS, params)
    if report and plotter is None:
        # the plotting module (matplotlib: 0.4 s of imports) loads while Spark starts and reads the history
        _import_beside(PLOTS_MODULE)
    with step("starting Spark"):
        session = analysis_session(spark or spark_session(master, short_lived=small_history(run.size_bytes)),
                                   run.size_bytes)
    with step("reading history"):
        read = read_history(session, run)
    history = read.stats
    tables = Tables(session, read)
    try:
        with step("reading the walked events"):
            tables.prepare()
        ctx = CheckContext(spark=session, tables=tables, history=history)
        report_dir = run.report_dir
        label = f"running {len(CHECKS)} checks" + (" beside writing the tables" if report else "")
        pool = ThreadPoolExecutor(max_workers=max(1, check_threads), thread_name_prefix="check")
        try:
            with step(label):
                bucket_s = bucket_seconds(duration_s(tables))
                # the timeline is both a table and a plot: its rows come to the driver once, before the checks
                timeline_rows = pool.submit(timeline(tables, bucket_s).collect).result if report else None
                pending = {c.name: pool.submit(run_check, c, ctx, resolved[c.name]) for c in CHECKS}
                written = (write_tables(tables, report_dir, bucket_s, pool, collected={"timeline": timeline_rows})
                           if timeline_rows is not None else None)
                plotted = pool.submit(plot_data, tables, timeline_rows) if timeline_rows is not None else None
                results = {name: future.result() for name, future in pending.items()}
            with step("counting"):
                counts = _counts(tables, history, results)
            summary = Summary(
                run_id=_run_id(history, run.run_dir), run_dir=str(run.run_dir), checks=results, counts=counts,
                history=history.to_dict(),
                analysis={"master": session.sparkContext.master, "spark_version": session.version,
                          "analysed_ts": time.time()},
                outputs={"summary": f"{run.report_dir.name}/{SUMMARY_FILE}"})
            expectation = read_expectation(run.run_dir)
            if expectation is not None:
                summary.verdict = run_verdict(expectation, {n: (r.status, r.reason) for n, r in results.items()})
            # the verdict first: summary.json as soon as the checks are done, the tables and the report after
            summary.analysis["verdict_s"] = summary.analysis["elapsed_s"] = time.monotonic() - started
            summary.write(report_dir / SUMMARY_FILE)
            if on_verdict is not None:
                on_verdict(summary)
            if written is not None and plotted is not None:  # (both or neither: a report is drawn)
                with step("writing the tables"):
                    summary.outputs["tables"] = written()
                with step("drawing report"):
                    summary.outputs["report_html"] = f"{run.report_dir.name}/{REPORT_FILE}"
                    _write_report(tables, summary, run, diagram or DiagramOptions(), plotted.result(), plotter)
                summary.analysis["elapsed_s"] = time.monotonic() - started
                summary.write(report_dir / SUMMARY_FILE)
        finally:
            pool.shutdown(wait=True)
    finally:
        tables.release()
    return summary


def _write_report(tables: Tables, summary: Summary, run: RunFiles, options: DiagramOptions, data: PlotData,
                  plotter: PlotProcess | None) -> None:
    """report.html: the plots of `data` (with the checks' pairs and latency percentiles) are drawn, by `plotter` or
    in a thread, while the message sequence diagram's events are read."""
    from pipeline.sequence_source import diagram

    delivery = summary.checks.get("delivery")
    latency = summary.checks.get("latency")
    data = dataclasses.replace(
        data, pairs=delivery.details.get("pairs", []) if delivery is not None else [],
        latency_percentiles=latency.details.get("latency", {}).get("all", {}) if latency is not None else {})
    details = {name: result.details for name, result in summary.checks.items()}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="plots") as pool:
        images = plotter.draw(data) if plotter is not None else pool.submit(draw_plots, data).result
        drawn = diagram(tables, run.run_dir, details, options)
        html_report.write(run.report_dir / REPORT_FILE, summary, images(), drawn)
