"""chaos.host.priority: a helper process gets the CPU priority asked for, its session's autogroup included (the
test suite runs as root, as the controller does)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.host import priority


def test_a_session_leader_gets_its_niceness_and_its_autogroups():
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert priority.raise_niceness(proc.pid, -5) == "nice -5"
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == -5
        autogroup = Path(f"/proc/{proc.pid}/autogroup")
        if autogroup.exists():
            assert autogroup.read_text().split()[-1] == "-5", autogroup.read_text()
    finally:
        proc.kill()
        proc.wait()


def test_a_process_in_our_session_keeps_our_autogroup_untouched():
    ours = Path("/proc/self/autogroup")
    before = ours.read_text() if ours.exists() else None
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert priority.raise_niceness(proc.pid, -3) == "nice -3"
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == -3
    finally:
        proc.kill()
        proc.wait()
    assert (ours.read_text() if ours.exists() else None) == before


def test_realtime_is_sched_fifo():
    code = ("import os; from chaos.host import priority; print(priority.realtime(1)); "
            "print(os.sched_getscheduler(0) == os.SCHED_FIFO)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == ["fifo 1", "True"], out


def test_an_autogroup_that_refuses_leaves_the_niceness_raised_and_says_why(monkeypatch):
    def refuse(self, *args, **kwargs):  # what /proc/PID/autogroup answered in a container of a nested engine
        raise BlockingIOError(11, "Resource temporarily unavailable")

    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        if not Path(f"/proc/{proc.pid}/autogroup").exists():
            pytest.skip("no autogroups on this kernel: nothing to refuse")
        monkeypatch.setattr(Path, "write_text", refuse)
        assert priority.raise_niceness(proc.pid, -4) == \
            "nice -4 (its autogroup not raised: Resource temporarily unavailable)"
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == -4
    finally:
        proc.kill()
        proc.wait()
