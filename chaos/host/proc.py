"""The one way the controller runs host commands: `run(argv)`, raising `CommandFailed` with the output.

Every docker, iptables, tc or nsenter call goes through here, so errors carry the command and its output and
tests can replace the executor.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Sequence

from node.errors import CommandFailed, EnvironmentProblem


def run(argv: Sequence[str], *, input_text: str | None = None, timeout_s: float = 120,
        check: bool = True, hint: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `argv` (no shell, in `cwd` if given), capturing stdout and stderr together as text.

    Raises `EnvironmentProblem` when the program does not exist or times out, and `CommandFailed` on a non-zero
    exit when `check` is set.
    """
    argv = list(argv)
    if shutil.which(argv[0]) is None:
        raise EnvironmentProblem(f"program {argv[0]!r} not found on PATH", hint=hint)
    try:
        proc = subprocess.run(argv, input=input_text, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout_s, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"command timed out after {timeout_s:g} s: {' '.join(argv)}", hint=hint) from None
    if check and proc.returncode != 0:
        raise CommandFailed(argv, proc.returncode, proc.stdout, hint=hint)
    return proc


def run_armed(jobs: Sequence[tuple[Sequence[str], str]], *, timeout_s: float = 120,
              hint: str | None = None) -> list[subprocess.CompletedProcess[str]]:
    """Run several commands that act on their input (`iptables-restore`, say) so that they act together: every
    process is started first and waits on its input, then all inputs are handed over in one loop. The commands
    then act within a moment of each other, not one process start apart. Raises as `run`, for the first
    failing command (the others are still waited for)."""
    jobs = [(list(argv), text) for argv, text in jobs]
    for argv, _ in jobs:
        if shutil.which(argv[0]) is None:
            raise EnvironmentProblem(f"program {argv[0]!r} not found on PATH", hint=hint)
    procs: list[subprocess.Popen[str]] = []
    unreleased: list[int] = []  # the write ends of the inputs not yet handed over
    try:
        for argv, _ in jobs:
            read_fd, write_fd = os.pipe()
            unreleased.append(write_fd)
            try:
                procs.append(subprocess.Popen(argv, stdin=read_fd, text=True, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT))
            finally:
                os.close(read_fd)
        for write_fd, (_, text) in zip(list(unreleased), jobs):  # armed: now release them all
            data = text.encode()
            while data:
                data = data[os.write(write_fd, data):]
            os.close(write_fd)
            unreleased.remove(write_fd)
        results = []
        deadline_s = time.monotonic() + timeout_s
        for proc, (argv, _) in zip(procs, jobs):
            try:
                out, _ = proc.communicate(timeout=max(0.0, deadline_s - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise EnvironmentProblem(f"command timed out after {timeout_s:g} s: {' '.join(argv)}",
                                         hint=hint) from None
            results.append(subprocess.CompletedProcess(argv, proc.returncode, out))
    finally:
        for write_fd in unreleased:
            os.close(write_fd)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    failed = next((r for r in results if r.returncode != 0), None)
    if failed is not None:
        raise CommandFailed(failed.args, failed.returncode, failed.stdout, hint=hint)
    return results
