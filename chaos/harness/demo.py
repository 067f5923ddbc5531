"""`make demo`: reproduce JGRP-1873 under unicast2 on real containers, run the very same realised schedule under
unicast3, and print both verdicts side by side with the paths of the two reports.

The scenario is `scenarios/jgrp1873.yaml` (asymmetric views, late STABLEs, lost retransmission requests). The
second run replays the first run's realised schedule (each step at the time it was really applied) with the
`fixed` variant. With `jgroups` (`splitlab demo --jgroups`, `make demo-jgroups`) a third run shows the same bug in
the real UNICAST2 of JGroups 2.12.2 (`scenarios/jgroups/jgrp1873.yaml`: the same faults, aimed at JGroups' own
wire). Exit code 0 when every run went as its scenario expects (the bug showed where it should, not elsewhere).
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
JGROUPS_SCENARIO = REPO / "scenarios" / "jgroups" / "jgrp1873.yaml"
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


def side_by_side(runs: dict[str, runner.RunResult]) -> Table:
    """The runs' verdicts, one column per run (labelled by the keys of `runs`)."""
    table = Table(title=f"JGRP-1873: {', '.join(runs)}", title_justify="left")
    table.add_column("")
    for label in runs:
        table.add_column(label)
    for check in CHECKS:
        row = []
        for result in runs.values():
            status = result.status(check)
            style = {"ok": "green", "fail": "bold red"}.get(status, "yellow")
            row.append(f"[{style}]{status}[/]: {result.reason(check)}")
        table.add_row(check, *row)
    facts = [_facts(result) for result in runs.values()]
    for key in facts[0]:
        table.add_row(f"[dim]{key}[/]", *[f[key] for f in facts])
    table.add_row("verdict", *[("[green]as expected[/]" if r.verdict.held else "[bold red]NOT as expected[/]")
                               for r in runs.values()])
    return table


def main(log: Callable[[str], None], jgroups: bool = False) -> int:
    """Run the demo; returns the exit code (0: the bug showed under unicast2, and in the real UNICAST2 with
    `jgroups`, and not under unicast3)."""
    progress = Progress(console)
    steps = 3 if jgroups else 2
    console.rule(f"1/{steps}  JGRP-1873 under unicast2 (splitlab's model of the legacy protocol)")
    legacy = runner.run(load_scenario(SCENARIO, variant="legacy"), progress=progress)
    console.rule(f"2/{steps}  the same realised schedule under unicast3 (the fix)")
    saved = schedule.load(legacy.run_dir)
    same = from_data(schedule.replay_document(saved), str(legacy.run_dir / schedule.FILE), "fixed")
    fixed = runner.run(same, seed=saved.seed, progress=progress, replay_of=str(legacy.run_dir))
    runs = {"unicast2 (model, legacy)": legacy, "unicast3 (model, fixed)": fixed}
    if jgroups:
        console.rule(f"3/{steps}  JGRP-1873 in the real UNICAST2 of JGroups 2.12.2 (Debian's libjgroups-java)")
        runs["UNICAST2 (real JGroups 2.12.2)"] = runner.run(load_scenario(JGROUPS_SCENARIO), progress=progress)
    console.print(side_by_side(runs))
    for label, result in runs.items():
        console.print(f"{label} report: {result.report_html}")
    shown = all(result.verdict.held for result in runs.values())
    log(("JGRP-1873 reproduced under unicast2" + (" and in the real UNICAST2" if jgroups else "") +
         ", absent under unicast3") if shown else
        "[red]the demo did not show what it should: see the tables above and the reports[/]")
    return 0 if shown else 1
