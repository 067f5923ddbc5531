"""The ledger (chaos.host.ledger): recorded before applying, healed exactly once, processes ended safely.

Commands here are harmless programs (true/false/sh) and a sleeping child process; no root needed.
"""
import json
import subprocess
import sys
import time

import pytest

from chaos.host.ledger import Entry, Ledger, find_marked_process, process_start_ticks
from node.errors import CommandFailed


def entry(key, undo, present=None, **kw):
    return Entry(group="test", key=key, what=f"thing {key}", undo=undo, present=present, **kw)


def lines(ledger):
    return [json.loads(line) for line in ledger.path.read_text().splitlines()]


def test_record_is_written_first_and_deduplicated_by_key(tmp_path):
    ledger = Ledger(tmp_path)
    first = ledger.record(entry("a", [["true"]]))
    again = ledger.record(entry("a", [["false"]]))
    assert again.id == first.id and again.undo == [["true"]]
    assert [line["op"] for line in lines(ledger)] == ["apply"]
    assert [e.key for e in ledger.outstanding()] == ["a"]


def test_heal_undoes_newest_first_once_and_is_idempotent(tmp_path):
    order = tmp_path / "order"
    ledger = Ledger(tmp_path)
    for key in ("a", "b"):
        ledger.record(entry(key, [["sh", "-c", f"echo {key} >> {order}"]]))
    report = ledger.heal()
    assert order.read_text().split() == ["b", "a"]
    assert sorted(report.settled.values()) == ["undone", "undone"]
    assert ledger.outstanding() == []
    assert ledger.heal().settled == {}  # nothing left to do
    assert order.read_text().split() == ["b", "a"]


def test_undo_with_stdin_and_select(tmp_path):
    out = tmp_path / "out"
    ledger = Ledger(tmp_path)
    ledger.record(entry("x", [{"argv": ["sh", "-c", f"cat > {out}"], "input": "hello\n"}]))
    ledger.record(Entry(group="other", key="y", what="y", undo=[["true"]]))
    ledger.heal(lambda e: e.group == "test")
    assert out.read_text() == "hello\n"
    assert [e.key for e in ledger.outstanding()] == ["y"]


def test_failed_undo_is_fine_only_when_the_thing_is_absent(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.record(entry("gone", [["false"]], present={"argv": ["false"]}))
    assert list(ledger.heal().settled.values()) == ["absent"]
    ledger.record(entry("stuck", [["false"]], present={"argv": ["sh", "-c", "echo yes"], "stdout": "yes"}))
    ledger.record(entry("fine", [["true"]]))
    with pytest.raises(CommandFailed):
        ledger.heal()
    assert [e.key for e in ledger.outstanding()] == ["stuck"]  # the others were still settled


# Kills itself with SIGHUP, which it first sets to its default action: under nohup a shell inherits SIGHUP ignored
# and may not undo that.
HANG_UP = f"exec {sys.executable} -c 'import os, signal; signal.signal(signal.SIGHUP, signal.SIG_DFL); " \
          f"os.kill(os.getpid(), signal.SIGHUP)'"


def test_an_undo_killed_by_a_signal_is_run_once_more_and_a_failed_one_is_not(tmp_path):
    """A command that ends without saying how (here a real process killed by SIGHUP: return code -1, as an SSH
    channel closed without an exit status gives) runs again once; one that exits non-zero does not."""
    tries = tmp_path / "tries"
    killed_first = f"echo x >> {tries}; [ $(wc -l < {tries}) -ge 2 ] || {HANG_UP}"
    ledger = Ledger(tmp_path)
    ledger.record(entry("flaky", [["sh", "-c", killed_first]]))
    assert list(ledger.heal().settled.values()) == ["undone"]
    assert len(tries.read_text().split()) == 2
    tries.unlink()
    ledger.record(entry("killed", [["sh", "-c", f"echo x >> {tries}; {HANG_UP}"]]))
    with pytest.raises(CommandFailed) as killed:
        ledger.heal()
    assert killed.value.returncode == -1 and len(tries.read_text().split()) == 2  # twice, not more
    tries.unlink()
    ledger.record(entry("failed", [["sh", "-c", f"echo x >> {tries}; exit 3"]]))
    with pytest.raises(CommandFailed):
        ledger.heal(lambda e: e.key == "failed")
    assert len(tries.read_text().split()) == 1


def test_namespace_gone_is_settled_without_running_anything(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.record(entry("ns", [["false"]], pid=2 ** 22 + 7, netns_ino=1))  # no such pid
    assert list(ledger.heal().settled.values()) == ["namespace-gone"]


def test_a_cut_last_line_is_ignored(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.record(entry("a", [["true"]]))
    with open(ledger.path, "a") as fh:
        fh.write('{"op": "apply", "id": "tr')
    assert [e.key for e in ledger.outstanding()] == ["a"]


def sleeper(marker):
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--marker", marker])


# Notes in file argv[1] that it is ready (its SIGTERM handler is set), then that it got SIGTERM.
TERMINABLE = """\
import pathlib, signal, sys, time
def stop(*_):
    pathlib.Path(sys.argv[1]).write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
pathlib.Path(sys.argv[1]).write_text("ready")
time.sleep(60)
"""


def test_process_entries_are_ended_by_pid_and_start_time(tmp_path):
    """heal ends the process whose pid and start time the entry noted, SIGTERM first (so it can clean up), and
    it has ended when heal returns; another process with the same marker stays (the marker only serves to find
    a process whose pid was never noted)."""
    ledger = Ledger(tmp_path)
    notes = tmp_path / "notes"
    decoy = sleeper("m-1")
    proc = subprocess.Popen([sys.executable, "-c", TERMINABLE, str(notes), "--marker", "m-1"])
    try:
        deadline = time.monotonic() + 10
        while not notes.exists() or notes.read_text() != "ready":
            assert time.monotonic() < deadline, "the sleeper did not start"
            time.sleep(0.01)
        e = ledger.record(Entry(group="test", key="p", what="sleeper", process={"marker": "m-1"}))
        ledger.started(e, proc.pid)
        assert ledger.outstanding()[0].process["start_ticks"] == process_start_ticks(proc.pid)
        assert list(ledger.heal().settled.values()) == ["undone"]
        assert proc.poll() is not None, "heal returned while the process still ran"
        assert notes.read_text() == "SIGTERM"
        assert decoy.poll() is None, "heal ended another process that carries the same marker"
    finally:
        for p in (proc, decoy):
            p.kill()
            p.wait()


def test_a_process_whose_pid_was_never_noted_is_found_by_its_marker(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.record(Entry(group="test", key="p", what="sleeper", process={"marker": "m-2"}))
    proc = sleeper("m-2")  # the controller died between starting it and noting its pid
    deadline = time.monotonic() + 5
    while find_marked_process("m-2") != proc.pid:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert list(ledger.heal().settled.values()) == ["undone"]
    proc.wait(timeout=5)


def test_a_reused_pid_is_not_killed(tmp_path):
    ledger = Ledger(tmp_path)
    proc = sleeper("m-3")
    e = ledger.record(Entry(group="test", key="p", what="sleeper", process={"marker": "m-3"}))
    e.process = {"marker": "m-3"}
    with ledger._locked():  # as if the pid now belonged to a process started at another time
        ledger._append([{"op": "started", "id": e.id, "pid": proc.pid, "start_ticks": 1}])
    assert list(ledger.heal().settled.values()) == ["process-gone"]
    assert proc.poll() is None
    proc.kill()
    proc.wait()
