"""bench/BASELINE.md: the recorded figure of every benchmark row, and the regression warning against it.

A row is compared by its same-run ratio when it has one (that cancels most of the machine's speed), else by its
value, in the row's direction (`better`: "higher" or "lower"). A change of more than `REGRESSION` (20 %) the wrong
way is a warning, printed by `python -m bench`; nothing fails. `python -m bench --update-baseline [NAME...]`
rewrites the rows of the benchmarks it ran and keeps the others.
"""
from __future__ import annotations

import datetime
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

BASELINE_FILE = Path(__file__).with_name("BASELINE.md")
REGRESSION = 0.20
HEADER = "| benchmark | measure | value | unit | ratio | better |"
_ROW = re.compile(r"^\| (?P<bench>[^|]+?) \| (?P<name>[^|]+?) \| (?P<value>[^|]*?) \| (?P<unit>[^|]*?) \| "
                  r"(?P<ratio>[^|]*?) \| (?P<better>higher|lower) \|$")


@dataclass(frozen=True)
class Recorded:
    """One row of BASELINE.md."""

    bench: str
    name: str
    value: float | None
    unit: str
    ratio: float | None
    better: str

    @property
    def compared(self) -> tuple[str, float | None]:
        return ("ratio", self.ratio) if self.ratio is not None else ("value", self.value)


def _number(text: str) -> float | None:
    text = text.strip()
    return None if text in ("", "n/a") else float(text)


def read(path: Path = BASELINE_FILE) -> dict[tuple[str, str], Recorded]:
    """The rows of `path` by (benchmark, measure); empty when the file does not exist."""
    if not path.exists():
        return {}
    rows = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = _ROW.match(line.strip())
        if match is None or line.strip() == HEADER:
            continue
        try:
            row = Recorded(match["bench"], match["name"], _number(match["value"]), match["unit"].strip(),
                           _number(match["ratio"]), match["better"])
        except ValueError:
            raise ValueError(f"{path}:{number}: not a number in {line.strip()!r}") from None
        rows[(row.bench, row.name)] = row
    return rows


def of_run(bench: str, row: dict) -> Recorded:
    """A benchmark's result row as it would be recorded."""
    return Recorded(bench, row["name"], row.get("value"), row.get("unit", ""), row.get("ratio"),
                    row.get("better", "higher"))


def regressions(recorded: dict[tuple[str, str], Recorded], measured: list[Recorded]) -> list[str]:
    """A warning for every measured row more than `REGRESSION` worse than its recorded figure."""
    warnings = []
    for now in measured:
        before = recorded.get((now.bench, now.name))
        if before is None:
            continue
        what, old = before.compared
        new = now.ratio if what == "ratio" else now.value
        if old is None or new is None or old == 0:
            continue
        change = (new - old) / abs(old)
        worse = change < -REGRESSION if now.better == "higher" else change > REGRESSION
        if worse:
            warnings.append(f"regression over {REGRESSION:.0%}: {now.bench} / {now.name}: {what} {new:.4g} against "
                            f"{old:.4g} in {BASELINE_FILE.name} ({change:+.0%}; {now.better} is better)")
    return warnings


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def write(measured: list[Recorded], path: Path = BASELINE_FILE) -> None:
    """Record `measured` over the rows already in `path` (rows of benchmarks that did not run are kept)."""
    rows = read(path)
    ran = {r.bench for r in measured}
    rows = {key: row for key, row in rows.items() if row.bench not in ran}
    rows.update({(r.bench, r.name): r for r in measured})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=path.parent).stdout.strip() or "unknown"
    lines = [
        "# Benchmark baseline",
        "",
        "The figures `python -m bench` compares each run with (bench/baseline.py): a row more than 20 % worse than",
        "here, by its same-run ratio (else its value) in its `better` direction, is printed as a warning.",
        f"Last update: the rows of {', '.join(sorted(ran))}, {datetime.date.today()} at {commit} on {platform.node()}",
        "(full sizes, `python -m bench --update-baseline`); the other rows are from earlier updates. Quick runs are",
        "not compared.",
        "",
        HEADER,
        "|---|---|---|---|---|---|",
    ]
    for row in sorted(rows.values(), key=lambda r: (r.bench, r.name)):
        lines.append(f"| {row.bench} | {row.name} | {_fmt(row.value)} | {row.unit} | {_fmt(row.ratio)} | "
                     f"{row.better} |")
    path.write_text("\n".join(lines) + "\n")
