"""`splitlab analyze RUN_DIR [--master URL] [--check-param name.key=value ...]`, with progress on the terminal.

Exit codes: 0 every check passed, 1 a check failed or could not decide (or another splitlab error), 2 a bad run
directory or bad arguments. Progress goes to stderr; the verdict table to stdout.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import Iterator, Sequence

from pyspark.sql import SparkSession
from rich.console import Console
from rich.table import Table

from node.errors import SplitlabError, report_error
from pipeline.api import analyze
from pipeline.checks import CHECKS
from pipeline.params import parse_assignments
from pipeline.session import MASTER_ENV
from pipeline.summary import Summary

_STYLES = {"ok": "green", "fail": "bold red", "unknown": "yellow"}


def build_parser() -> argparse.ArgumentParser:
    checks = "; ".join(f"{c.name}: {', '.join(f'{k}={v!r}' for k, v in c.defaults.items())}" for c in CHECKS)
    parser = argparse.ArgumentParser(
        prog="splitlab analyze",
        description="Analyse a run's history with Spark; write report/summary.json and report/report.html.",
        epilog=f"check parameters and defaults: {checks}")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory, runs/<run-id>")
    parser.add_argument("--master", metavar="URL",
                        help=f"Spark master (default ${MASTER_ENV}, else local[*])")
    parser.add_argument("--check-param", metavar="NAME.KEY=VALUE", action="append", default=[],
                        help="override a check parameter, e.g. endless_retransmission.min_requests=10 (repeatable)")
    parser.add_argument("--no-report", action="store_true",
                        help="write only summary.json (no Parquet tables, no HTML report)")
    return parser


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


def _verdict_table(summary: Summary) -> Table:
    table = Table(title=f"run {summary.run_id}: {summary.status}", title_justify="left")
    table.add_column("check")
    table.add_column("status")
    table.add_column("reason", overflow="fold")
    for name, result in summary.checks.items():
        style = _STYLES.get(result.status, "")
        table.add_row(name, f"[{style}]{result.status}[/{style}]", result.reason)
    return table


def analyze_main(argv: Sequence[str] | None = None) -> int:
    """Run `splitlab analyze` with `argv` (without the program and sub-command); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse exits on --help (0) and on bad arguments (2)
        return int(exc.code or 0)
    err = Console(stderr=True)
    out = Console()
    session_before = SparkSession.getActiveSession()
    try:
        params = parse_assignments(args.check_param)
        summary = analyze(args.run_dir, master=args.master, params=params, report=not args.no_report,
                          steps=_Steps(err))
    except SplitlabError as exc:
        return report_error("splitlab analyze", exc)
    finally:
        session = SparkSession.getActiveSession()
        if session_before is None and session is not None:
            session.stop()  # started here: stop it; a caller's session stays up
    out.print(_verdict_table(summary))
    for key in ("summary", "report_html"):
        if key in summary.outputs:
            out.print(f"{key}: {summary.run_dir}/{summary.outputs[key]}", highlight=False)
    return summary.exit_code


def main() -> None:
    """Entry point of `python -m pipeline`."""
    sys.exit(analyze_main(sys.argv[1:]))


__all__ = ["analyze_main", "build_parser", "main"]
