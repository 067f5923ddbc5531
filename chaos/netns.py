"""Acting inside a container's network namespace from the host.

The controller runs as root on the host and enters a node's network namespace through the container's PID
(`nsenter -t PID -n`). It refuses any PID whose namespace is the host's own, and any container that is not
labelled by splitlab (see `target`).
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Sequence

from chaos.proc import run
from node.errors import EnvironmentProblem, UsageError


def _netns_inode(pid: int | str) -> int:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError as exc:
        raise EnvironmentProblem(f"cannot read the network namespace of pid {pid}: {exc}",
                                 hint="the controller must run as root on the Docker host") from None


@dataclass(frozen=True)
class Netns:
    """The network namespace of a splitlab node container, entered through `pid`."""

    node: str
    pid: int

    def exec(self, argv: Sequence[str], input_text: str | None = None, check: bool = True,
             timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside this namespace. Raises `CommandFailed` on failure when `check`."""
        return run(["nsenter", "-t", str(self.pid), "-n", *argv], input_text=input_text, check=check,
                   timeout_s=timeout_s)


def target(node: str, pid: int, labels: dict[str, str], run_id: str) -> Netns:
    """A `Netns` for a container with `labels` and `pid`, after refusing what splitlab must not touch.

    Raises `UsageError` for a container not labelled with this run, and `EnvironmentProblem` for a PID that is
    not running or whose network namespace is the host's own.
    """
    if labels.get("splitlab.run") != run_id:
        raise UsageError(f"refusing container {node!r}: it is not labelled splitlab.run={run_id}",
                         hint="splitlab only touches containers it started")
    if pid <= 0:
        raise EnvironmentProblem(f"node {node} is not running (no PID)", hint="start it first")
    if _netns_inode(pid) == _netns_inode("self"):
        raise UsageError(f"refusing node {node}: pid {pid} shares the host's network namespace")
    return Netns(node, pid)
