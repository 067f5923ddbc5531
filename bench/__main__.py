"""Run every benchmark under bench/ and print one table (`make bench`; `BENCH_QUICK=1` for smaller sizes,
`python -m bench NAME...` for some only), then a warning for every row more than 20 % worse than bench/BASELINE.md
(`--update-baseline` records this run's rows there instead)."""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time

from rich.console import Console
from rich.table import Table

import bench
from bench import baseline


def main(argv: list[str]) -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    update = "--update-baseline" in argv
    argv = [a for a in argv if a != "--update-baseline"]
    if update and quick:
        print(f"quick sizes are not recorded in {baseline.BASELINE_FILE.name}; run without BENCH_QUICK",
              file=sys.stderr)
        return 2
    names = sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    if argv:
        unknown = set(argv) - set(names)
        if unknown:
            print(f"unknown benchmark(s): {', '.join(sorted(unknown))}; have: {', '.join(names)}", file=sys.stderr)
            return 2
        names = [n for n in names if n in argv]
    table = Table(title=f"splitlab benchmarks{' (quick)' if quick else ''}")
    for col in ("benchmark", "measure", "value", "baseline (same run)", "ratio", "note"):
        table.add_column(col)
    console = Console(width=int(os.environ.get("COLUMNS", "160")))
    measured: list[baseline.Recorded] = []
    for name in names:
        started = time.monotonic()
        console.print(f"running {name} ...")
        rows = importlib.import_module(f"bench.{name}").run(quick)
        measured += [baseline.of_run(name, row) for row in rows]
        for row in rows:
            ratio = row.get("ratio")
            table.add_row(name, row["name"], "n/a" if row["value"] is None else f"{row['value']:.4g} {row['unit']}",
                          "" if row.get("baseline") is None else f"{row['baseline']:.4g} {row['unit']}",
                          "" if ratio is None else f"{ratio:.2f}x", row.get("note", ""))
        console.print(f"{name}: {time.monotonic() - started:.1f} s")
    console.print(table)
    if update:
        baseline.write(measured)
        console.print(f"recorded {len(measured)} row(s) in {baseline.BASELINE_FILE}")
        return 0
    if quick:
        console.print(f"quick sizes: not compared with {baseline.BASELINE_FILE.name} (full sizes)")
        return 0
    recorded = baseline.read()
    for warning in baseline.regressions(recorded, measured):
        console.print(f"[bold yellow]WARNING[/bold yellow] {warning}", highlight=False)
    unrecorded = [r for r in measured if (r.bench, r.name) not in recorded]
    if unrecorded:
        console.print(f"{len(unrecorded)} row(s) have no figure in {baseline.BASELINE_FILE.name} to compare with: "
                      + "; ".join(f"{r.bench} / {r.name}" for r in unrecorded), highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
