"""`splitlab spark-cluster up | down | status` (chaos/cli/spark.py over pipeline.standalone) where nothing comes
up: bad arguments exit 2 before anything starts, `down` with nothing running is fine and idempotent, `status`
says no cluster runs, a port that is taken or a missing Java is a one-line error, what a killed `up` left is
cleaned up, and an `up` that does not come up in time stops every process it started and shows the logs."""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from chaos.cli.main import main as splitlab
from pipeline import standalone


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    path = (tmp_path / "spark").resolve()
    monkeypatch.setenv(standalone.STATE_DIR_ENV, str(path))
    yield path
    standalone.stop(path, grace_s=5.0)  # whatever a failing test left running


@pytest.mark.parametrize("argv, fragment", [
    (["--workers", "0"], "--workers 0: a cluster needs at least 1 worker"),
    (["--cores-per-worker", "0"], "--cores-per-worker 0: a worker needs at least 1 core"),
    (["--memory-per-worker", "512m"], "--memory-per-worker 512m: less than 1g"),
    (["--memory-per-worker", "2"], "--memory-per-worker 2: not a size with a unit"),
    (["--port", "70000"], "--port 70000: not a TCP port"),
    (["--port", "7177", "--webui-port", "7177"], "--port and --webui-port are both 7177"),
    (["--workers", "two"], "argument --workers: invalid int value: 'two'"),
])
def test_bad_arguments_exit_2_and_start_nothing(argv, fragment, state_dir, capsys):
    assert splitlab(["spark-cluster", "up", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("splitlab spark-cluster up: error: ") and fragment in err, err
    assert not state_dir.exists()


def test_down_with_nothing_running_is_fine_and_idempotent(state_dir, capsys):
    for _ in range(2):
        assert splitlab(["spark-cluster", "down"]) == 0
        assert capsys.readouterr().out == f"no Spark cluster runs from {state_dir}\n"


def test_status_with_nothing_running_exits_1(state_dir, capsys):
    assert splitlab(["spark-cluster", "status"]) == 1
    assert capsys.readouterr().out == f"no Spark cluster runs from {state_dir}\n"


def test_a_taken_port_is_a_one_line_error_and_starts_nothing(state_dir, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert splitlab(["spark-cluster", "up", "--port", str(port), "--webui-port", "0"]) == 1
    err = capsys.readouterr().err
    assert f"error: the master port 127.0.0.1:{port} is taken" in err and "--port 0 picks a free port" in err, err
    assert not state_dir.exists()


def test_without_java_up_says_so(state_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert splitlab(["spark-cluster", "up", "--port", "0", "--webui-port", "0"]) == 1
    err = capsys.readouterr().err
    assert "has no bin/java" in err and "hint: Java 17 must be on PATH" in err, err
    assert not state_dir.exists()


def test_down_removes_what_a_killed_up_left(state_dir, capsys):
    state_dir.mkdir()
    (state_dir / standalone.STATE_FILE).write_text(json.dumps({"master_url": "spark://127.0.0.1:1"}))
    (state_dir / "master.pid").write_text("999999999\n")  # no such process
    (state_dir / "master.log").write_text("a log\n")
    (state_dir / "mine.txt").write_text("not the cluster's\n")
    assert splitlab(["spark-cluster", "status"]) == 1
    assert splitlab(["spark-cluster", "down"]) == 0
    assert capsys.readouterr().out.endswith(f"no Spark cluster ran from {state_dir}; removed what one left there\n")
    assert sorted(p.name for p in state_dir.iterdir()) == ["mine.txt"]  # only what `up` writes is removed


@pytest.mark.slow
def test_an_up_that_does_not_come_up_in_time_stops_what_it_started_and_shows_the_logs(state_dir, capsys):
    assert splitlab(["spark-cluster", "up", "--workers", "1", "--port", "0", "--webui-port", "0",
                     "--timeout-s", "1"]) == 1
    err = capsys.readouterr().err
    assert "error: the Spark cluster did not come up within 1 s" in err, err
    assert "error: --- master.log" in err and "error: --- worker-1.log" in err, err
    assert standalone.processes(state_dir) == []
    marked = f"{standalone.MARK_ENV}={state_dir}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):  # read /proc here too, not only through the module
        try:
            assert marked not in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"), pid
        except OSError:
            continue
    assert not state_dir.exists()
