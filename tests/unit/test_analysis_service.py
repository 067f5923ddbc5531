"""The warm analysis service (pipeline.service): a real detached process with its own JVM, reached over its Unix
socket by `pipeline.api.analyze` and `splitlab spark`; its verdicts equal those of an analysis in process."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import pipeline_fixtures as pf
from pipeline_fixtures import spark  # noqa: F401  (the shared session fixture)

from chaos.cli.main import main as splitlab
from node.errors import EnvironmentProblem, UsageError
from pipeline import api, service, service_client, standalone
from pipeline.service_client import SOCKET_ENV

MASTER = "local[2]"
WARM_UPS = 1  # the module's service warms up once (a service's default is service.WARM_UP_ANALYSES)
WARM_UP_WAIT_S = 90.0


@pytest.fixture(scope="module")
def socket_dir():
    """A short directory for the sockets (a Unix socket path must stay under 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="sl-svc-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def served(socket_dir):
    """One service for the module, on its own socket, its JVM short-lived (a few analyses); stopped (and checked
    gone) at the end."""
    path = socket_dir / "a.sock"
    state = service.start(MASTER, path=path, warm_up=WARM_UPS, short_lived=True)
    try:
        yield path, state
    finally:
        last = service.stop(path)
        assert last is not None and not standalone.alive(int(last["pid"]))
        assert not standalone.alive(int(last["plot_pid"]))
        assert not path.exists()


@pytest.fixture
def use(monkeypatch, served):
    """Point `analyze` at the module's service."""
    monkeypatch.setenv(SOCKET_ENV, str(served[0]))
    monkeypatch.delenv("SPLITLAB_SPARK_MASTER", raising=False)
    return served[0]


def _steps(seen: list[str]):
    from contextlib import contextmanager

    @contextmanager
    def step(label: str):
        seen.append(label)
        yield
    return step


def _verdicts(summary) -> dict:
    data = summary.to_dict()
    return {"status": data["status"], "checks": data["checks"], "counts": data["counts"], "history": data["history"]}


def test_a_served_analysis_equals_the_one_in_process(tmp_path, spark, use):  # noqa: F811
    before = service_client.status(use)["analyses"]
    scenario = pf.with_lost_message()
    remote_dir, local_dir = scenario.write(tmp_path / "remote"), scenario.write(tmp_path / "local")
    seen: list[str] = []

    remote = api.analyze(remote_dir, master=MASTER, report=False, steps=_steps(seen))
    local = api.analyze(local_dir, spark=spark, report=False)

    assert service_client.status(use)["analyses"] == before + 1
    assert "reading history" in seen and any(label.startswith("running") for label in seen)
    assert remote.status == "fail" and "delivery" in remote.failed()
    assert _verdicts(remote) == _verdicts(local)
    on_disk = json.loads((remote_dir / "report" / "summary.json").read_text())
    assert on_disk["status"] == "fail" and on_disk["analysis"]["master"] == MASTER


def test_a_served_analysis_tells_the_verdict_before_it_draws_the_report(tmp_path, use):
    run_dir = pf.with_lost_message().write(tmp_path / "r")
    first: list[tuple[str, bool, bool]] = []  # at the verdict: (its status, summary.json written, report drawn)
    summary = api.analyze(run_dir, master=MASTER, on_verdict=lambda s: first.append((
        s.status, (run_dir / "report" / "summary.json").exists(), (run_dir / "report" / "report.html").exists())))
    assert first == [("fail", True, False)], "the service's verdict comes before its report"
    assert (run_dir / "report" / "report.html").exists() and summary.status == "fail"


def test_the_report_is_drawn_in_the_services_plot_process_which_a_kill_does_not_stop(tmp_path, use):
    """The plots are drawn in a process of the service's (pipeline.plot_process), started with it: a kill of that
    process costs no report, the next one is drawn in a new process, and `stop` ends it (the fixture)."""
    state = service_client.status(use)
    plot_pid = state["plot_pid"]
    assert plot_pid > 1 and Path(f"/proc/{plot_pid}/stat").read_text().split()[3] == str(state["pid"])
    os.kill(plot_pid, signal.SIGKILL)
    run_dir = pf.with_lost_message().write(tmp_path / "r")

    summary = api.analyze(run_dir, master=MASTER)

    assert summary.outputs["report_html"] == "report/report.html"
    assert (run_dir / "report" / "report.html").read_text().count("data:image/png;base64,") == 4
    assert service_client.status(use)["plot_pid"] not in (plot_pid, state["pid"])


def test_a_killed_services_plot_process_ends_by_itself(socket_dir):
    """SIGKILL runs none of the service's clean-up: its plot process sees that its parent is gone and ends (its JVM
    ends on its own, as the end of its stdin tells it)."""
    path = socket_dir / "killed.sock"
    state = service.start(MASTER, path=path, warm_up=0, short_lived=True)
    try:
        assert state["plot_pid"] > 1 and standalone.alive(state["plot_pid"])
    finally:
        os.kill(state["pid"], signal.SIGKILL)
    try:
        deadline = time.monotonic() + 30
        while standalone.alive(state["plot_pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not standalone.alive(state["plot_pid"]), "the plot process outlived its killed service"
    finally:
        if standalone.alive(state["plot_pid"]):
            os.kill(state["plot_pid"], signal.SIGKILL)  # what the failure left
        path.unlink(missing_ok=True)


def test_the_command_served_prints_the_verdict_without_loading_spark_in_its_process(tmp_path, use):
    before = service_client.status(use)["analyses"]
    run_dir = pf.with_lost_message().write(tmp_path / "r")
    env = {**os.environ, SOCKET_ENV: str(use), "SPLITLAB_SPARK_MASTER": MASTER}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "pipeline", str(run_dir), "--no-report"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "delivery" in done.stdout and "fail" in done.stdout, done.stdout + done.stderr
    assert service_client.status(use)["analyses"] == before + 1
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")]
    assert "pipeline.service_client" in imported
    assert not [m for m in imported if m.split(".")[0] in ("pyspark", "py4j", "docker", "fabric")], imported


def test_another_master_is_analysed_in_process(tmp_path, spark, use):  # noqa: F811
    before = service_client.status(use)["analyses"]
    run_dir = pf.clean_scenario().write(tmp_path / "r")
    # the test process's session is local[2] too: asking for local[1] must not reach the service; it raises
    # here because this process already runs another master, which shows the analysis stayed in process
    with pytest.raises(UsageError, match="already runs"):
        api.analyze(run_dir, master="local[1]", report=False)
    assert service_client.status(use)["analyses"] == before


def test_a_bad_run_directory_comes_back_as_the_same_usage_error(tmp_path, spark, use):  # noqa: F811
    missing = tmp_path / "nowhere"
    with pytest.raises(UsageError) as served_error:
        api.analyze(missing, master=MASTER)
    with pytest.raises(UsageError) as local_error:
        api.analyze(missing, spark=spark)
    assert served_error.value.message == local_error.value.message
    assert served_error.value.hint == local_error.value.hint


def test_bad_requests_get_an_error_line_and_the_service_keeps_serving(use):
    def ask(raw: bytes) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect(str(use))
            try:
                sock.sendall(raw)
                sock.shutdown(socket.SHUT_WR)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the service answered and closed before it read all of an oversized line
            return json.loads(sock.makefile("rb").readline())

    assert ask(b"not json\n")["error"]["type"] == "UsageError"
    assert ask(b"[1, 2]\n")["error"]["type"] == "UsageError"
    assert "unknown request" in ask(b'{"op": "reboot"}\n')["error"]["message"]
    assert "run_dir" in ask(b'{"op": "analyze"}\n')["error"]["message"]
    assert ask(b'{"op": "analyze", "run_dir": "/x", "params": 3}\n')["error"]["type"] == "UsageError"
    assert "over" in ask(b'{"op": "status", "pad": "' + b"x" * (2 << 20) + b'"}\n')["error"]["message"]
    assert service_client.status(use)["pid"] > 0


def test_it_warms_up_once_listening_and_status_shows_how_far(use, capsys):
    deadline = time.monotonic() + WARM_UP_WAIT_S
    while (state := service_client.status(use))["warm_up"]["analyses"] < WARM_UPS and time.monotonic() < deadline:
        assert state["warm_up"]["error"] is None, state
        time.sleep(0.2)
    assert state["warm_up"] == {"analyses": WARM_UPS, "of": WARM_UPS, "error": None}
    assert splitlab(["spark", "status"]) == 0
    assert f"warm-up {WARM_UPS} of {WARM_UPS}," in capsys.readouterr().out


def test_up_again_finds_it_up_and_status_shows_it(use, capsys):
    state = service.start(MASTER, path=use)
    assert state["already"] is True and state["pid"] == service_client.status(use)["pid"]
    assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"} <= set(state["jvm_options"])  # as the JVM has them
    assert splitlab(["spark", "status"]) == 0
    assert f"pid {state['pid']}," in capsys.readouterr().out
    with pytest.raises(UsageError, match="runs on local"):
        service.start("local[1]", path=use)
    with pytest.raises(UsageError, match="0 or more"):
        service.start(MASTER, path=use, warm_up=-1)


def test_a_stale_socket_is_ignored_by_analyze_and_removed_by_down(tmp_path, socket_dir, spark,  # noqa: F811
                                                                   monkeypatch, capsys):
    path = socket_dir / "stale.sock"
    monkeypatch.setenv(SOCKET_ENV, str(path))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))  # what a killed service leaves: the socket file, nobody listening
    assert path.exists() and service_client.status(path) is None

    summary = api.analyze(pf.clean_scenario().write(tmp_path / "r"), master=MASTER, report=False)
    assert summary.status == "ok" and summary.analysis["master"] == MASTER  # done in this process

    assert splitlab(["spark", "status"]) == 1
    assert "not up" in capsys.readouterr().out
    assert splitlab(["spark", "down"]) == 0
    assert "is not up" in capsys.readouterr().out
    assert not path.exists()


@pytest.mark.timeout(30)
def test_a_service_gone_mid_request_is_an_environment_problem_not_a_hang(socket_dir):
    """A listener that reads the request, reports a step and closes without an answer (as a killed service)."""
    path = socket_dir / "dies.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)

        def die_mid_request() -> None:
            accepted, _ = listener.accept()
            with accepted:
                accepted.makefile("rb").readline()
                accepted.sendall(b'{"step": "reading history", "phase": "start"}\n')

        server = threading.Thread(target=die_mid_request)
        server.start()
        conn = service_client.Connection.open(path)
        with pytest.raises(EnvironmentProblem, match="closed the connection without an answer"):
            conn.request("analyze", run_dir="/x")
        server.join()
    path.unlink()
