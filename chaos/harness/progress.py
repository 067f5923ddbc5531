"""Progress of a run on the terminal (rich): the cluster starting, each step as it is applied with its planned
and actual time, waits with a countdown, the analysis steps, and the verdict table.

`Progress(quiet=True)` prints nothing (tests and benchmarks); `Progress.log` is what the controller's verbs log
through.
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterator

from rich.console import Console
from rich.table import Table

_STYLES = {"ok": "green", "fail": "bold red", "unknown": "yellow"}
LATE_SHOWN_S = 0.25  # a step this late or later is said to be late; an opening this long, that it moved the timeline


class Progress:
    """Terminal output of one run (or nothing, with `quiet`)."""

    def __init__(self, console: Console | None = None, quiet: bool = False, prefix: str = "") -> None:
        self.console = console or Console(highlight=False)
        self.quiet = quiet
        self.prefix = prefix

    def log(self, text: str) -> None:
        if not self.quiet:
            self.console.print(f"{self.prefix}[dim]{text}[/dim]", markup=True, highlight=False)

    def say(self, text: str) -> None:
        if not self.quiet:
            self.console.print(f"{self.prefix}{text}", highlight=False)

    def step(self, index: int, total: int, at_s: float, applied_at_s: float, text: str) -> None:
        late = applied_at_s - at_s
        lateness = f" [yellow](+{late:.2f} s late)[/yellow]" if late > LATE_SHOWN_S else ""
        self.say(f"[bold]t={applied_at_s:6.2f} s[/bold]  step {index + 1}/{total}: {text}{lateness}")

    def opened(self, opening_s: float) -> None:
        """The opening (the steps at t=0) is in place: said when it took long enough to move the timeline."""
        if opening_s > LATE_SHOWN_S:
            self.say(f"the opening (the steps at t=0) took {opening_s:.2f} s: the timeline starts now, every later "
                     "time counts from here")

    def wait(self, seconds: float, label: str) -> None:
        """Sleep `seconds`, showing a countdown."""
        if seconds <= 0:
            return
        if self.quiet:
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        with self.console.status(f"{label} ...") as status:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                status.update(f"{self.prefix}{label}: {left:4.1f} s left")
                time.sleep(min(0.2, left))

    @contextlib.contextmanager
    def analysis_step(self, label: str) -> Iterator[None]:
        """A step reporter for `pipeline.analyze(steps=...)`."""
        started = time.monotonic()
        if self.quiet:
            yield
            return
        with self.console.status(f"{self.prefix}analysis: {label} ..."):
            yield
        self.console.print(f"{self.prefix}[dim]  analysis: {label}: {time.monotonic() - started:.1f} s[/dim]")

    def verdict_table(self, title: str, outcomes: list, held: bool) -> Table:
        table = Table(title=f"{title}: {'[green]expectations hold[/]' if held else '[bold red]expectations do not hold[/]'}",
                      title_justify="left")
        for col in ("check", "expected", "actual", "reason"):
            table.add_column(col, overflow="fold")
        for o in outcomes:
            style = "green" if o.held else "bold red"
            table.add_row(o.check, o.expected, f"[{_STYLES.get(o.actual, '')}]{o.actual}[/]",
                          f"[{style}]{'' if o.held else 'UNEXPECTED: '}[/]{o.reason}")
        return table
