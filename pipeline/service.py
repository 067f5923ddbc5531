"""The warm analysis service: one long-lived Spark driver behind a Unix socket (`splitlab spark up`).

Without it every `splitlab analyze` and `splitlab run` starts a JVM and pays its warm-up (the first analysis of a
15k-event history takes about three times as long as the third in the same JVM). The service keeps one session
and analyses each run it is sent with `pipeline.api.analyze`, streaming its steps back (protocol in
`pipeline.service_client`); the reports' plots are drawn in a process of its own (`pipeline.plot_process`, its pid
in the status). Once listening it warms itself up: it analyses a synthetic history
(`pipeline.synthetic`, `WARM_UP_EVENTS`) `warm_up` times, report included, between the requests it serves (a request
goes first), so that the JVM's compilers and Spark's cache of generated classes are warm before the first run it is
sent; its status tells how far it got. It takes dozens of analyses: C2 compiles the long tail of Catalyst's
methods as each reaches its invocation threshold, one compiler thread on two cores (a 15k-event history in
process after 8 warm-up analyses: 3.0-3.5 s while its JIT compiled for 2.3-3.3 s; after 40: 2.2-2.5 s and 1.1-1.5 s,
2026-12-03). `start()` spawns it detached and returns when it says it listens (a line on a pipe,
not polling); `stop()` asks it to stop and waits for its process to end; a stale socket (the service was killed) is
removed. Several connections are served at once on the one session (Spark jobs are thread-safe). A service for
a few analyses (the tests') can start its JVM short-lived (`pipeline.session`'s: C1 only, the serial collector,
expressions interpreted), which compiles far less than C2 and G1 would for the dozens of analyses a service in use
serves; its status lists the JVM's `-XX:` options as the JVM has them.

Run as `python -m pipeline.service --socket PATH [--master URL] [--ready-fd FD] [--warm-up N] [--short-lived]`.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socketserver
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Iterator

from node.errors import EnvironmentProblem, SplitlabError, UsageError, report_error
from pipeline.master import resolve_master
from pipeline.plot_process import PlotProcess
from pipeline.service_client import (LOG_NAME, MAX_LINE_BYTES, Connection, error_line, socket_path,
                                     status as service_status)
from pipeline.standalone import alive

READY_LINE = b"ready\n"
WARM_UP_ANALYSES = 40  # about 90 s on this 2-core machine, the analyses yielding to the requests
WARM_UP_EVENTS = 3_000
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
_LOG_TAIL_CHARS = 2000


def _jvm_options(spark: Any) -> list[str]:
    """The driver JVM's `-XX:` options, as the JVM was started with them."""
    arguments = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    return [str(arg) for arg in arguments if str(arg).startswith("-XX:")]


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, spark: Any, warm_up: int, plotter: PlotProcess) -> None:
        super().__init__(str(path), _Handler)
        self.spark = spark
        self.plotter = plotter
        self.path = path
        self.started_ts = time.time()
        self.analyses = 0
        self.jvm_options = _jvm_options(spark)
        self.count_lock = threading.Lock()
        self.serving = 0  # analyses being served now: the warm-up waits while there are any
        self.idle = threading.Condition(self.count_lock)
        self.stopping = threading.Event()
        # what `warm` has done of what it will do
        self.warm_up: dict[str, Any] = {"analyses": 0, "of": warm_up, "error": None}

    def stop_soon(self) -> None:
        self.stopping.set()
        threading.Thread(target=self.shutdown, name="service-stop", daemon=True).start()

    def warm(self) -> None:
        """Analyse a synthetic history as often as `warm_up` says, each time when no request is being served; stops
        early when the service stops. An analysis that raises ends the warm-up (the error in the status and the
        log), not the service."""
        from pipeline.api import analyze
        from pipeline.synthetic import synthetic_run

        with synthetic_run(WARM_UP_EVENTS, "splitlab-warm-up-") as run_dir:
            for _ in range(self.warm_up["of"]):
                with self.idle:
                    self.idle.wait_for(lambda: self.serving == 0 or self.stopping.is_set())
                if self.stopping.is_set():
                    return
                try:
                    analyze(run_dir, spark=self.spark, report=True, plotter=self.plotter)
                except Exception as exc:  # the warm-up's boundary: it ends, the service serves on without it
                    traceback.print_exc()
                    self.warm_up["error"] = f"{type(exc).__name__}: {exc}"
                    return
                with self.count_lock:
                    self.warm_up["analyses"] += 1


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def send(self, line: dict[str, Any]) -> None:
        self.wfile.write(json.dumps(line).encode() + b"\n")
        self.wfile.flush()

    def handle(self) -> None:
        try:
            request = self._request()
            op = request.get("op")
            if op == "status":
                self.send({"result": self._status()})
            elif op == "stop":
                self.send({"result": self._status()})
                self.server.stop_soon()
            elif op == "analyze":
                self.send({"result": self._analyze(request)})
            else:
                raise UsageError(f"unknown request {op!r} (analyze, status, stop)")
        except BrokenPipeError:
            return  # the client went away; nothing to answer
        except Exception as exc:  # the request's boundary: the client gets the error and raises it; we go on
            if not isinstance(exc, SplitlabError):
                traceback.print_exc()  # a bug: its traceback goes to the service's log
            self.send(error_line(exc))

    def _request(self) -> dict[str, Any]:
        raw = self.rfile.readline(MAX_LINE_BYTES + 1)
        if len(raw) > MAX_LINE_BYTES:
            raise UsageError(f"a request line over {MAX_LINE_BYTES} bytes")
        try:
            request = json.loads(raw)
        except ValueError:
            raise UsageError(f"a request that is not JSON: {raw[:80]!r}") from None
        if not isinstance(request, dict):
            raise UsageError(f"a request that is not a JSON object: {raw[:80]!r}")
        return request

    def _status(self) -> dict[str, Any]:
        spark = self.server.spark
        return {"pid": os.getpid(), "master": spark.sparkContext.master, "spark_version": spark.version,
                "started_ts": self.server.started_ts, "analyses": self.server.analyses,
                "warm_up": dict(self.server.warm_up), "socket": str(self.server.path),
                "jvm_options": self.server.jvm_options, "plot_pid": self.server.plotter.pid()}

    def _analyze(self, request: dict[str, Any]) -> dict[str, Any]:
        from contextlib import contextmanager

        from pipeline.api import analyze
        from pipeline.sequence import DiagramOptions

        @contextmanager
        def step(label: str) -> Iterator[None]:
            self.send({"step": label, "phase": "start"})
            yield
            self.send({"step": label, "phase": "end"})

        run_dir = request.get("run_dir")
        if not isinstance(run_dir, str):
            raise UsageError("an analyze request needs run_dir, a path")
        params = request.get("params")
        if params is not None and not isinstance(params, dict):
            raise UsageError(f"check parameters must be an object, not {type(params).__name__}")
        with self.server.idle:
            self.server.serving += 1
        try:
            summary = analyze(run_dir, params=params, spark=self.server.spark,
                              report=bool(request.get("report", True)), steps=step,
                              diagram=DiagramOptions.from_dict(request.get("diagram")),
                              on_verdict=lambda early: self.send({"verdict": early.to_dict()}),
                              plotter=self.server.plotter)
        finally:
            with self.server.idle:
                self.server.serving -= 1
                self.server.idle.notify_all()
        with self.server.count_lock:
            self.server.analyses += 1
        return summary.to_dict()


def serve(path: Path, master: str | None, ready_fd: int | None = None, warm_up: int = WARM_UP_ANALYSES,
          short_lived: bool = False) -> None:
    """Start Spark on `master` (its JVM `short_lived` or not: `pipeline.session.spark_session`), listen on `path`,
    write `READY_LINE` to `ready_fd`, warm up (`warm_up` analyses, in a thread) and serve until stopped (a `stop`
    request, SIGTERM or SIGINT); then end the warm-up (the analysis it is in finishes), stop Spark and remove the
    socket."""
    from pipeline.session import spark_session

    plotter = PlotProcess()
    plotter.start()  # it imports matplotlib while the JVM starts
    try:
        _serve(path, spark_session(master, short_lived=short_lived), ready_fd, warm_up, plotter)
    finally:
        plotter.close()


def _serve(path: Path, spark: Any, ready_fd: int | None, warm_up: int, plotter: PlotProcess) -> None:
    spark.range(1).count()  # the first job starts the executors: pay it now, not in the first analysis
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    other = Connection.open(path)
    if other is not None:
        other.close()
        raise EnvironmentProblem(f"an analysis service already listens on {path}")
    path.unlink(missing_ok=True)  # stale: nobody listens
    server = _Server(path, spark, warm_up, plotter)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stop_soon())
    warming = threading.Thread(target=server.warm, name="warm-up")
    try:
        if ready_fd is not None:
            os.write(ready_fd, READY_LINE)
            os.close(ready_fd)
        warming.start()
        server.serve_forever(poll_interval=0.5)
    finally:
        server.stopping.set()
        with server.idle:
            server.idle.notify_all()
        if warming.is_alive():
            warming.join()
        server.server_close()
        path.unlink(missing_ok=True)
        spark.stop()


def _log_tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-_LOG_TAIL_CHARS:].strip()
    except OSError:
        return ""


def start(master: str | None = None, path: Path | None = None, timeout_s: float = START_TIMEOUT_S,
          warm_up: int = WARM_UP_ANALYSES, short_lived: bool = False) -> dict[str, Any]:
    """Start the service detached (or find it up), to warm up with `warm_up` analyses, its JVM `short_lived` or
    not (`serve`); return its status with `"already": bool`.

    Raises `EnvironmentProblem` if it does not come up within `timeout_s` (its log's tail in the message).
    """
    if warm_up < 0:
        raise UsageError(f"the warm-up is a number of analyses, 0 or more, not {warm_up}")
    path = path or socket_path()
    running = service_status(path)
    if running is not None:
        if master and running["master"] != master:
            raise UsageError(f"the analysis service at {path} runs on {running['master']}, not {master}",
                             hint="splitlab spark down first")
        return {**running, "already": True}
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = path.parent / LOG_NAME
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, "-m", "pipeline.service", "--socket", str(path), "--master", resolve_master(master),
            "--ready-fd", str(write_fd), "--warm-up", str(warm_up), "--detach"]
    if short_lived:
        argv.append("--short-lived")
    with open(log, "ab") as log_file:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                                pass_fds=(write_fd,), start_new_session=True)
    os.close(write_fd)
    proc.wait()  # the first process forks the service and ends at once
    waited_from = time.monotonic()
    said = _read_until_ready(read_fd, timeout_s)
    if not said.endswith(READY_LINE):
        pid = said.split(b"\n")[0]
        if pid.isdigit() and alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)  # too slow: nothing is left running
        why = "did not come up within" if time.monotonic() - waited_from >= timeout_s else "exited before"
        raise EnvironmentProblem(f"the analysis service {why} {timeout_s:.0f} s:\n{_log_tail(log)}",
                                 hint=f"its log is {log}")
    up = service_status(path)
    if up is None:
        raise EnvironmentProblem(f"the analysis service said it was ready but does not answer on {path}",
                                 hint=f"its log is {log}")
    return {**up, "already": False}


def _read_until_ready(fd: int, timeout_s: float) -> bytes:
    """What the service wrote on its pipe (its pid line, then `READY_LINE`) until ready, EOF or `timeout_s`."""
    said = b""
    deadline = time.monotonic() + timeout_s
    try:
        while not said.endswith(READY_LINE):
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(fd, 64) if ready else b""
            if not chunk:
                break
            said += chunk
    finally:
        os.close(fd)
    return said


def stop(path: Path | None = None, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, Any] | None:
    """Stop the service and wait until its process ended; return its last status, or None if it was not up (a
    stale socket is removed). Raises `EnvironmentProblem` if it does not end within `timeout_s`."""
    path = path or socket_path()
    conn = Connection.open(path)
    if conn is None:
        path.unlink(missing_ok=True)
        return None
    last = conn.request("stop")
    deadline = time.monotonic() + timeout_s
    while alive(int(last["pid"])):
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"the analysis service (pid {last['pid']}) did not stop within {timeout_s:.0f} s",
                                     hint=f"kill {last['pid']}")
        time.sleep(0.05)
    return last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.service", description=__doc__.splitlines()[0])
    parser.add_argument("--socket", type=Path, default=None, help="the socket (default: see pipeline.service_client)")
    parser.add_argument("--master", default=None, help="the Spark master (default: pipeline.session's)")
    parser.add_argument("--ready-fd", type=int, default=None, help="write a line there once listening")
    parser.add_argument("--warm-up", type=int, default=WARM_UP_ANALYSES, metavar="N",
                        help=f"analyses of a synthetic history once listening (default {WARM_UP_ANALYSES})")
    parser.add_argument("--short-lived", action="store_true",
                        help="start the JVM for a few analyses (C1 only, the serial collector), as the tests do")
    parser.add_argument("--detach", action="store_true",
                        help="fork and serve from the child (no parent left to reap it: init does)")
    args = parser.parse_args(argv)
    if args.warm_up < 0:
        parser.error(f"--warm-up must be 0 or more, got {args.warm_up}")
    if args.detach and os.fork() > 0:
        os._exit(0)
    if args.ready_fd is not None:
        os.write(args.ready_fd, f"{os.getpid()}\n".encode())
    try:
        serve(args.socket or socket_path(), args.master, args.ready_fd, args.warm_up, args.short_lived)
    except SplitlabError as exc:
        return report_error(parser.prog, exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
