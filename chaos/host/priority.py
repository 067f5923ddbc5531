"""Raising a helper process's CPU priority on a busy host, and saying what was granted.

Some of our processes are instruments whose timing is the measurement: the NFQUEUE shaper stands in for a kernel
qdisc, and the netem VM's guest clock runs only while qemu runs. On a loaded machine (a test run's workers, a Spark
JVM) they must not queue behind the load. Linux groups a session's processes (an *autogroup*, when
`kernel.sched_autogroup_enabled` is 1) and shares the CPU between groups first: a process's own niceness weighs
only inside its group, so a process that leads its own session gets its group's niceness raised as well.
Raising needs CAP_SYS_NICE; without it the answer says so and the process runs as it was started.
"""
from __future__ import annotations

import os
from pathlib import Path


def realtime(priority: int) -> str | None:
    """SCHED_FIFO at `priority` for this process: 'fifo N', or None when refused."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError:  # EPERM without CAP_SYS_NICE or without a real-time budget in its cgroup
        return None
    return f"fifo {priority}"


def raise_niceness(pid: int, niceness: int) -> str:
    """Set `pid`'s niceness (and its autogroup's, if it leads its session): 'nice N', or why it is not raised."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    except PermissionError:
        return f"nice {os.getpriority(os.PRIO_PROCESS, pid)} (not raised: no CAP_SYS_NICE)"
    autogroup = Path(f"/proc/{pid}/autogroup")
    if autogroup.exists() and os.getsid(pid) == pid:  # its own session: the group is its alone
        try:
            autogroup.write_text(str(niceness))
        except OSError as exc:  # EPERM without CAP_SYS_NICE; EAGAIN seen in a container of a nested engine
            return f"nice {niceness} (its autogroup not raised: {exc.strerror or type(exc).__name__})"
    return f"nice {niceness}"
