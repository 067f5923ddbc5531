"""`make demo`: reproduce JGRP-1873 under unicast2 on real containers, run the very same realised schedule under
unicast3, and print both verdicts side by side with the paths of the two reports.

The scenario is `scenarios/jgrp1873.yaml` (asymmetric views, late STABLEs, lost retransmission requests). The
second run replays the first run's realised schedule (each step at the time it was really applied) with the
`fixed` variant. Exit code 0 when the bug showed under unicast2 and unicast3 stayed clean (both verdicts hold).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

from chaos.harness import runner, schedule
from chaos.harness.load import from_data, load_scenario
from chaos.harness.progress import Progress

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "jgrp1873.yaml"
CHECKS = ("delivery", "duplicates", "endless_retransmission", "fifo", "heal_recovery", "views")
console = Console(highlight=False)


def _facts(result: runner.RunResult) -> dict[str, str]:
    """A few numbers that tell the story of one run."""
    checks = result.summary.checks
    endless = checks["endless_retransmission"].details
    sync = checks["retransmission"].details.get("sync", {})
    worst = endless.get("examples") or [{}]
    return {
        "missing deliveries": str(result.summary.counts.get("missing_deliveries")),
        "extra deliveries (duplicates)": str(checks["duplicates"].details.get("extra_deliveries", 0)),
        "seqnos asked for in vain": str(endless.get("flagged", 0)),
        "most requests for one seqno": str(worst[0].get("requests", 0)),
        "resync messages": str(sum(v.get("messages", 0) for v in sync.values())),
    }


def side_by_side(legacy: runner.RunResult, fixed: runner.RunResult) -> Table:
    table = Table(title="JGRP-1873: the same schedule under unicast2 and unicast3", title_justify="left")
    table.add_column("")
    table.add_column("unicast2 (legacy)")
    table.add_column("unicast3 (fixed)")
    for check in CHECKS:
        row = []
        for result in (legacy, fixed):
            status = result.status(check)
            style = {"ok": "green", "fail": "bold red"}.get(status, "yellow")
            row.append(f"[{style}]{status}[/]: {result.reason(check)}")
        table.add_row(check, *row)
    left, right = _facts(legacy), _facts(fixed)
    for key in left:
        table.add_row(f"[dim]{key}[/]", left[key], right[key])
    table.add_row("verdict", *[("[green]as expected[/]" if r.verdict.held else "[bold red]NOT as expected[/]")
                               for r in (legacy, fixed)])
    return table


def main(log: Callable[[str], None]) -> int:
    """Run the demo; returns the exit code (0: the bug showed under unicast2 and not under unicast3)."""
    progress = Progress(console)
    console.rule("1/2  JGRP-1873 under unicast2 (the legacy protocol)")
    legacy = runner.run(load_scenario(SCENARIO, variant="legacy"), progress=progress)
    console.rule("2/2  the same realised schedule under unicast3 (the fix)")
    saved = schedule.load(legacy.run_dir)
    same = from_data(schedule.replay_document(saved), str(legacy.run_dir / schedule.FILE), "fixed")
    fixed = runner.run(same, seed=saved.seed, progress=progress, replay_of=str(legacy.run_dir))
    console.print(side_by_side(legacy, fixed))
    for label, result in (("unicast2", legacy), ("unicast3", fixed)):
        console.print(f"{label} report: {result.report_html}")
    shown = legacy.verdict.held and fixed.verdict.held
    log("JGRP-1873 reproduced under unicast2 and absent under unicast3" if shown else
        "[red]the demo did not show what it should: see the tables above and the reports[/]")
    return 0 if shown else 1
