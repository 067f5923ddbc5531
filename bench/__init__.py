"""splitlab's benchmarks: each `bench_*.py` module has `run(quick: bool) -> list[dict]`; `python -m bench` runs
them all and prints one table of rows {bench, name, value, unit, baseline, ratio}. Targets are printed, never
asserted."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

OUTPUT_DIR = Path("runs") / "bench"
FLAME_RATE_HZ = 250


def wait_until(done: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.05) -> None:
    """Poll `done` until it is true. Raises `TimeoutError` saying `what` did not happen within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s:g} s")
        time.sleep(poll_s)


def cpu_s(pid: int) -> float:
    """CPU time (user and system, all threads) that process `pid` has used so far, in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


@contextlib.contextmanager
def flame_graph(pid: int, name: str) -> Iterator[Path]:
    """Sample process `pid` (a node: its container's main process) with py-spy while the block runs and write
    the flame graph to `runs/bench/<name>.svg` (yields that path). Non-blocking sampling: the node is not paused;
    only stacks holding the GIL: the node's work, not its idle threads.
    Without py-spy (not installed) the block runs unsampled and the path says so."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out = OUTPUT_DIR / f"{name}.svg"
    if not Path(spy).exists():
        yield out.with_name(f"{name}: no py-spy")
        return
    OUTPUT_DIR.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([spy, "record", "--pid", str(pid), "--nonblocking", "--gil", "--rate", str(FLAME_RATE_HZ),
                             "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield out
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes the graph when interrupted
        _, err = proc.communicate(timeout=60)
        if proc.returncode not in (0, -signal.SIGINT) and not out.exists():
            raise RuntimeError(f"py-spy failed on pid {pid}: {err.strip()[-500:]}")
