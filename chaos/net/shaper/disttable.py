"""The delay distribution tables of iproute2 (`normal.dist`, `pareto.dist`, `paretonormal.dist`), and netem's
correlated random numbers, so that the NFQUEUE shaper draws delays the way the kernel's netem does.

A table holds 4096 signed 16-bit values of a distribution with mean 0 and standard deviation 1, scaled by
`DIST_SCALE` (8192); netem delays a packet by `delay + jitter * table[u] / DIST_SCALE` for a uniform `u`.
`tc` reads these files and sends them to the kernel; the netem backend sends the same table (through pyroute2),
and the shaper looks values up in it. The tables come with iproute2 (a host dependency) rather than being
computed here, so both backends use the very same numbers.
"""
from __future__ import annotations

import functools
import os
import random
import sysconfig
from pathlib import Path

from node.errors import EnvironmentProblem

DIST_SCALE = 8192
TABLE_DIRS = tuple(dict.fromkeys(p for p in (
    os.environ.get("TC_LIB_DIR"),
    f"/usr/lib/{sysconfig.get_config_var('MULTIARCH') or 'x86_64-linux-gnu'}/tc",
    "/usr/lib/tc", "/usr/lib64/tc", "/usr/local/lib/tc") if p))


@functools.lru_cache(maxsize=None)
def table(name: str) -> tuple[int, ...]:
    """The values of iproute2's `<name>.dist`. Raises `EnvironmentProblem` when no directory has it."""
    for directory in TABLE_DIRS:
        path = Path(directory) / f"{name}.dist"
        try:
            text = path.read_text()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise EnvironmentProblem(f"cannot read the delay distribution table {path}: {exc}") from None
        values = []
        for line_no, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            try:
                values += [int(v) for v in line.split()]
            except ValueError:
                raise EnvironmentProblem(f"{path}:{line_no}: not a distribution table line: {line.strip()!r}") \
                    from None
        if not values or any(not -32768 <= v <= 32767 for v in values):
            raise EnvironmentProblem(f"{path} is not a distribution table (empty, or values beyond 16 bits)")
        return tuple(values)
    raise EnvironmentProblem(f"no delay distribution table {name}.dist in {', '.join(TABLE_DIRS)}",
                             hint="install iproute2 (make test does), or point TC_LIB_DIR at its tc directory")


class Correlated:
    """netem's correlated uniform numbers (get_crandom): each draw is `(1 - rho) * fresh + rho * last`, in
    0 <= u < 1. With rho = 0 the draws are independent."""

    def __init__(self, rng: random.Random, corr_pct: float) -> None:
        self.rng = rng
        self.rho = corr_pct / 100
        self.last = rng.random()

    def draw(self) -> float:
        fresh = self.rng.random()
        if not self.rho:
            return fresh
        self.last = (1 - self.rho) * fresh + self.rho * self.last
        return self.last


def draw_delay_ms(delay_ms: float, jitter_ms: float, distribution: str, u: float) -> float:
    """The delay for the uniform draw `u`: uniform within delay +- jitter, or from a table (never below 0)."""
    if not jitter_ms:
        return delay_ms
    if distribution == "uniform":
        return max(0.0, delay_ms - jitter_ms + 2 * jitter_ms * u)
    values = table(distribution)
    return max(0.0, delay_ms + jitter_ms * values[min(int(u * len(values)), len(values) - 1)] / DIST_SCALE)
