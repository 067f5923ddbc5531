"""The analysis verbs of `splitlab`: `splitlab analyze RUN_DIR` runs the Spark analysis of a run's history
(pipeline.api.analyze) with its steps shown on stderr and the verdict table on stdout; `splitlab spark up | down
| status` start, stop and show the warm analysis service (pipeline.service) that `analyze` and `run` use when it
is up.

Exit codes: 0 every check passed, 1 a check failed or could not decide (or another splitlab error), 2 a bad run
directory or bad arguments.
"""
from __future__ import annotations

import argparse
import contextlib
import time
from typing import Callable, Iterator

from rich.console import Console
from rich.table import Table

from chaos.cli.verbs import add_verb, progress, subverbs
from node.errors import UsageError
from pipeline.sequence import DiagramOptions
from pipeline.summary import Summary

STYLES = {"ok": "green", "fail": "bold red", "unknown": "yellow"}
EXAMPLES = ["splitlab analyze runs/261121-231947-589f",
            "splitlab analyze runs/261121-231947-589f --master spark://spark-master:7077",
            "splitlab analyze runs/261121-231947-589f --check-param endless_retransmission.min_requests=10",
            "splitlab analyze runs/261121-231947-589f --diagram-window 5:9.5 --diagram-arrows 300"]


class _Steps:
    """Shows the running step with a spinner and prints each finished step with its duration."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @contextlib.contextmanager
    def __call__(self, label: str) -> Iterator[None]:
        started = time.monotonic()
        with self.console.status(f"{label} ..."):
            yield
        self.console.print(f"[dim]  {label}: {time.monotonic() - started:.1f} s[/dim]")


def _verdict_table(summary) -> Table:
    table = Table(title=f"run {summary.run_id}: {summary.status}", title_justify="left")
    table.add_column("check")
    table.add_column("status")
    table.add_column("reason", overflow="fold")
    for name, result in summary.checks.items():
        style = STYLES.get(result.status, "")
        table.add_row(name, f"[{style}]{result.status}[/{style}]", result.reason)
    return table


def cmd_analyze(args: argparse.Namespace) -> int:
    from pipeline import service_client
    from pipeline.params import parse_assignments
    from pipeline.sequence import parse_window

    diagram = DiagramOptions(window_s=parse_window(args.diagram_window) if args.diagram_window else None,
                             max_arrows=args.diagram_arrows)
    params = parse_assignments(args.check_param)
    steps = _Steps(Console(stderr=True))
    out = Console()

    def show(done: Summary) -> None:  # the verdict as soon as the checks are done, before the tables and the report
        out.print(_verdict_table(done))

    # the warm service first, without loading Spark here (pyspark and the analysis: 0.23 s of imports)
    summary = service_client.analyze(args.run_dir, args.master, params, not args.no_report, steps, diagram, show)
    if summary is None:
        summary = _analyze_here(args, params, steps, diagram, show)
    for key in ("summary", "report_html"):
        if key in summary.outputs:
            out.print(f"{key}: {summary.run_dir}/{summary.outputs[key]}", highlight=False)
    return summary.exit_code


def _analyze_here(args: argparse.Namespace, params: dict, steps: _Steps, diagram: DiagramOptions,
                  show: Callable[[Summary], None]) -> Summary:
    """The analysis in this process (no service up on the master asked for); a Spark session started for it is
    stopped after, a caller's stays up."""
    from pyspark.sql import SparkSession

    from pipeline.api import analyze
    from pipeline.session import stop_session

    session_before = SparkSession.getActiveSession()
    try:
        return analyze(args.run_dir, master=args.master, params=params, report=not args.no_report, steps=steps,
                       diagram=diagram, on_verdict=show)
    finally:
        session = SparkSession.getActiveSession()
        if session_before is None and session is not None:
            stop_session(session)


def _show_service(state: dict | None, what: str) -> None:
    out = Console(highlight=False)
    if state is None:
        out.print("the analysis service is not up")
        return
    up_s = time.time() - state["started_ts"]
    warm = state["warm_up"]
    warming = f", warm-up {warm['analyses']} of {warm['of']}" + (f" (ended: {warm['error']})" if warm["error"] else "")
    out.print(f"the analysis service{what}: pid {state['pid']}, Spark {state['spark_version']} on {state['master']}, "
              f"up {up_s:.0f} s, {state['analyses']} analyses{warming}, socket {state['socket']}")


def cmd_spark_up(args: argparse.Namespace) -> int:
    from chaos.cli import spark
    from pipeline import service, standalone

    master = args.master
    if args.workers:  # a standalone cluster first (pipeline.standalone), then the service as its driver
        if master:
            raise UsageError("--workers starts its own Spark cluster: leave out --master")
        cluster = standalone.start(spark.state_dir(), workers=args.workers, cores_per_worker=args.cores_per_worker,
                                   memory_per_worker=args.memory_per_worker, timeout_s=args.timeout_s, log=progress)
        master = cluster["master_url"]
        spark.show_cluster(cluster)
    state = service.start(master, timeout_s=args.timeout_s, warm_up=args.warm_up)
    _show_service(state, " was already up" if state.pop("already") else " is up")
    if args.workers:
        Console(highlight=False).print(f"analyses on it: splitlab analyze RUN --master {master}  (or "
                                       f"SPLITLAB_SPARK_MASTER={master} for analyze and run)")
    return 0


def cmd_spark_down(args: argparse.Namespace) -> int:
    from chaos.cli import spark
    from pipeline import service, standalone

    state = service.stop()
    _show_service(state, " stopped")
    stopped = standalone.stop(spark.state_dir())
    if stopped is not None and stopped["processes"]:
        Console(highlight=False).print(f"stopped the Spark cluster {stopped.get('master_url') or ''} "
                                       f"({len(stopped['processes'])} processes)")
    return 0


def cmd_spark_status(args: argparse.Namespace) -> int:
    from pipeline import service_client

    state = service_client.status()
    _show_service(state, "")
    return 0 if state is not None else 1


def cmd_spark_archive(args: argparse.Namespace) -> int:
    """Record the short-lived JVM's class archive (`pipeline.jvm_archive`) unless there is one: a short-lived
    session analyses a synthetic history (the service's warm-up, report included) and ends its JVM."""
    from pipeline import jvm_archive
    from pipeline.api import analyze
    from pipeline.service import WARM_UP_EVENTS
    from pipeline.session import spark_session, stop_session
    from pipeline.synthetic import synthetic_run

    out = Console(highlight=False)
    found = jvm_archive.archive()
    if found is None:
        started = time.monotonic()
        with synthetic_run(WARM_UP_EVENTS, "sl-archive-") as run_dir:
            spark = spark_session("local[*]", short_lived=True)
            try:
                analyze(run_dir, spark=spark)
            finally:
                stop_session(spark)
        found = jvm_archive.keep_now()
        if found is None:
            out.print("the JVM's class archive is being recorded by another process (or was not kept: see above)")
            return 1
        out.print(f"recorded the JVM's class archive in {time.monotonic() - started:.1f} s")
    out.print(f"the JVM's class archive: {found} ({found.stat().st_size >> 20} MiB)")
    return 0


def _epilog() -> str:
    """The default master and the checks' parameters with their defaults (this imports Spark: only when the help
    is shown)."""
    from pipeline.checks import CHECKS
    from pipeline.master import DEFAULT_MASTER, MASTER_ENV

    checks = "\n  ".join(f"{c.name}: {', '.join(f'{k}={v!r}' for k, v in c.defaults.items())}" for c in CHECKS)
    return ("examples:\n  " + "\n  ".join(EXAMPLES) + f"\n\nthe Spark master is --master, else ${MASTER_ENV}, "
            f"else {DEFAULT_MASTER}\n\ncheck parameters and defaults:\n  " + checks)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from pipeline.sequence import DEFAULT_MAX_ARROWS
    from pipeline.service import WARM_UP_ANALYSES
    from pipeline.standalone import DEFAULT_CORES_PER_WORKER, DEFAULT_MEMORY_PER_WORKER

    p = add_verb(sub, "analyze", "analyse a run's history with Spark (report/summary.json and report.html)",
                 cmd_analyze, description="Analyse a run's history with Spark; write report/summary.json and "
                                          "report/report.html.", epilog=_epilog)
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory, runs/<run-id>")
    p.add_argument("--master", metavar="URL", help="Spark master (default: see below)")
    p.add_argument("--check-param", metavar="NAME.KEY=VALUE", action="append", default=[],
                   help="override a check parameter, e.g. endless_retransmission.min_requests=10 (repeatable)")
    p.add_argument("--no-report", action="store_true",
                   help="write only summary.json (no Parquet tables, no HTML report)")
    p.add_argument("--diagram-window", metavar="START_S:END_S",
                   help="the report's message sequence diagram shows this window, in seconds since the run's first "
                        "event (default: around the first finding, else the first fault)")
    p.add_argument("--diagram-arrows", type=int, default=DEFAULT_MAX_ARROWS, metavar="N",
                   help=f"draw at most N messages in the diagram (default {DEFAULT_MAX_ARROWS}); the report says "
                        "how many were left out")

    p = add_verb(sub, "spark", "the warm analysis service: one Spark driver that analyze and run use when it is up",
                 None, description="A long-lived Spark driver behind a Unix socket ($SPLITLAB_ANALYSIS_SOCKET, "
                                   "else <tmp>/splitlab-<uid>/analysis.sock): analyze and run hand it their runs "
                                   "instead of starting a JVM each.")
    verbs = subverbs(p)
    up = add_verb(verbs, "up", "start the service (nothing if it is up); with --workers N on a standalone Spark "
                  "cluster of N workers started here first", cmd_spark_up,
                  examples=["splitlab spark up", "splitlab spark up --workers 2",
                            "splitlab spark up --master spark://spark-master:7077"])
    up.add_argument("--master", metavar="URL", help="its Spark master (default: as for analyze)")
    up.add_argument("--workers", type=int, default=0, metavar="N",
                    help="start a standalone Spark cluster of N workers on 127.0.0.1 first and run on it "
                         "(see 'splitlab spark-cluster' for ports); 'spark down' stops both")
    up.add_argument("--cores-per-worker", type=int, default=DEFAULT_CORES_PER_WORKER, metavar="C",
                    help=f"with --workers (default {DEFAULT_CORES_PER_WORKER})")
    up.add_argument("--memory-per-worker", default=DEFAULT_MEMORY_PER_WORKER, metavar="SIZE",
                    help=f"with --workers (default {DEFAULT_MEMORY_PER_WORKER})")
    up.add_argument("--warm-up", type=int, default=WARM_UP_ANALYSES, metavar="N",
                    help="once up, analyse a synthetic history N times between the runs it is sent, so that the "
                         "first runs find the JVM warm (default %(default)s; 0: none)")
    up.add_argument("--timeout-s", type=float, default=120.0, metavar="S",
                    help="give up when it is not ready after S seconds (default 120)")
    add_verb(verbs, "down", "stop the service (and the Spark cluster 'spark up --workers' started)", cmd_spark_down,
             examples=["splitlab spark down"])
    add_verb(verbs, "archive", "record the class archive that every analysis JVM maps, unless there is one "
             "(the first short-lived analysis would; make test does it beside building the images)",
             cmd_spark_archive, examples=["splitlab spark archive"])
    add_verb(verbs, "status", "show the service (exit 1 when it is not up)", cmd_spark_status,
             examples=["splitlab spark status", "SPLITLAB_ANALYSIS_SOCKET=/tmp/my.sock splitlab spark status"])
