"""The one way the controller runs host commands: `run(argv)`, raising `CommandFailed` with the output.

Every docker, iptables, tc or nsenter call goes through here, so errors carry the command and its output and
tests can replace the executor.
"""
from __future__ import annotations

import shutil
import subprocess
from typing import Sequence

from node.errors import CommandFailed, EnvironmentProblem


def run(argv: Sequence[str], *, input_text: str | None = None, timeout_s: float = 120,
        check: bool = True, hint: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `argv` (no shell), capturing stdout and stderr together as text.

    Raises `EnvironmentProblem` when the program does not exist or times out, and `CommandFailed` on a non-zero
    exit when `check` is set.
    """
    argv = list(argv)
    if shutil.which(argv[0]) is None:
        raise EnvironmentProblem(f"program {argv[0]!r} not found on PATH", hint=hint)
    try:
        proc = subprocess.run(argv, input=input_text, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(f"command timed out after {timeout_s:g} s: {' '.join(argv)}", hint=hint) from None
    if check and proc.returncode != 0:
        raise CommandFailed(argv, proc.returncode, proc.stdout, hint=hint)
    return proc
