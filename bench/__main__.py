"""Run every benchmark under bench/ and print one table (`make bench`; `BENCH_QUICK=1` for smaller sizes,
`python -m bench NAME...` for some only)."""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time

from rich.console import Console
from rich.table import Table

import bench


def main(argv: list[str]) -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
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
    for name in names:
        started = time.monotonic()
        console.print(f"running {name} ...")
        rows = importlib.import_module(f"bench.{name}").run(quick)
        for row in rows:
            ratio = row.get("ratio")
            table.add_row(name, row["name"], "n/a" if row["value"] is None else f"{row['value']:.4g} {row['unit']}",
                          "" if row.get("baseline") is None else f"{row['baseline']:.4g} {row['unit']}",
                          "" if ratio is None else f"{ratio:.2f}x", row.get("note", ""))
        console.print(f"{name}: {time.monotonic() - started:.1f} s")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
