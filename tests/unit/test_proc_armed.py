"""chaos.host.proc.run_armed: several commands started first, then handed their inputs together; their outputs
come back in order, a refusal raises for the command that refused, and no process is left behind."""
from __future__ import annotations

import os

import pytest

from chaos.host import proc
from node.errors import CommandFailed, EnvironmentProblem


def test_each_command_gets_its_own_input_and_the_results_keep_their_order():
    jobs = [(["sh", "-c", "tr a-z A-Z"], f"job {i}\n") for i in range(6)]
    results = proc.run_armed(jobs)
    assert [r.stdout for r in results] == [f"JOB {i}\n" for i in range(6)]
    assert all(r.returncode == 0 for r in results)


def test_a_refusing_command_raises_with_its_argv_and_output_after_all_have_run(tmp_path):
    done = tmp_path / "done"
    jobs = [(["sh", "-c", "cat >/dev/null; echo refused; exit 3"], "x\n"),
            (["sh", "-c", f"cat >/dev/null; touch {done}"], "y\n")]
    with pytest.raises(CommandFailed) as err:
        proc.run_armed(jobs)
    assert err.value.returncode == 3 and "refused" in str(err.value)
    assert done.exists()  # the other command was released and waited for, not abandoned


def test_a_missing_program_starts_nothing():
    with pytest.raises(EnvironmentProblem, match="no-such-program"):
        proc.run_armed([(["sh", "-c", "cat"], "x"), (["no-such-program-xyz"], "y")])


def test_a_command_that_hangs_is_killed_at_the_timeout(tmp_path):
    pidfile = tmp_path / "pid"
    with pytest.raises(EnvironmentProblem, match="timed out"):
        proc.run_armed([(["sh", "-c", f"echo $$ > {pidfile}; cat >/dev/null; exec sleep 30"], "")], timeout_s=0.5)
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped
