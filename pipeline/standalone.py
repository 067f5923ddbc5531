"""A Spark standalone cluster on this machine for the analysis: start a master and N workers, stop them, show them.

The processes come from the Spark that the pip `pyspark` package ships (`<pyspark>/bin/spark-class`), each in a
session and process group of its own, detached from the caller, bound to 127.0.0.1 only (`--host`,
`SPARK_LOCAL_IP`). A cluster lives in a state directory (`splitlab spark-cluster` uses `$SPLITLAB_SPARK_DIR`, else
`<runs root>/spark`): `cluster.json` (what was started), `<name>.pid` and `<name>.log` per process, `work/` (the
workers' executor directories). Every process of a cluster, the executors the workers start included, carries
`SPLITLAB_SPARK_CLUSTER=<state dir>` in its environment: that mark, read from /proc, is how `stop()` finds
everything to end (SIGTERM to each process group, SIGKILL after a grace) and how `start()` sees that a cluster
already runs, and it never matches another user's Spark, another state directory's cluster, or a reused pid.

`start()` returns once the master's JSON status (`http://127.0.0.1:<webui>/json/`) shows every worker ALIVE;
when that does not happen within `timeout_s`, or a process exits, it stops what it started and raises
`EnvironmentProblem` with the tail of every log. No CLI here: chaos/cli/spark.py is the command line.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

from node.errors import EnvironmentProblem, UsageError

STATE_DIR_ENV = "SPLITLAB_SPARK_DIR"
MARK_ENV = "SPLITLAB_SPARK_CLUSTER"
HOST = "127.0.0.1"
DEFAULT_MASTER_PORT = 7077
DEFAULT_WEBUI_PORT = 8080
DEFAULT_WORKERS = 2
DEFAULT_CORES_PER_WORKER = 1
DEFAULT_MEMORY_PER_WORKER = "1g"
MIN_MEMORY_PER_WORKER_MB = 1024  # spark.executor.memory's default: a worker offering less never gets an executor
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
KILL_WAIT_S = 5.0
POLL_INTERVAL_S = 0.25
STATUS_TIMEOUT_S = 2.0
LOG_TAIL_CHARS = 1500
STATE_FILE = "cluster.json"
WORK_DIR = "work"
MASTER = "master"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
JAVA_HINT = "Java 17 must be on PATH (or JAVA_HOME set), as for any analysis"
_MEMORY = re.compile(r"^([1-9][0-9]*)([kmgt])$", re.IGNORECASE)
_MB_PER_UNIT = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}

Log = Callable[[str], None]


def _quiet(text: str) -> None:
    """The default progress log: nothing."""


def memory_mb(text: str) -> int:
    """MiB in a Spark memory size with its unit (`512m`, `1g`, `2G`). Raises `UsageError` otherwise."""
    match = _MEMORY.match(text.strip())
    if match is None:
        raise UsageError(f"--memory-per-worker {text}: not a size with a unit",
                         hint="a whole number with k, m, g or t, e.g. 1g or 1536m")
    return int(int(match.group(1)) * _MB_PER_UNIT[match.group(2).lower()])


def spark_home() -> Path:
    """The Spark that pyspark ships (its package directory). Raises `EnvironmentProblem` without spark-class."""
    import pyspark  # the package only: no JVM starts

    home = Path(pyspark.__file__).resolve().parent
    if not os.access(home / "bin" / "spark-class", os.X_OK):
        raise EnvironmentProblem(f"no executable bin/spark-class in {home}",
                                 hint="reinstall pyspark in this environment (make venv)")
    return home


def _java() -> str:
    """The java Spark's scripts will run: $JAVA_HOME/bin/java when JAVA_HOME is set, else java on PATH. Raises
    `EnvironmentProblem` when there is none."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if os.access(java, os.X_OK):
            return str(java)
        raise EnvironmentProblem(f"cannot start a Spark cluster: $JAVA_HOME ({java_home}) has no bin/java",
                                 hint=JAVA_HINT)
    found = shutil.which("java")
    if found is None:
        raise EnvironmentProblem("cannot start a Spark cluster: no java on PATH", hint=JAVA_HINT)
    return found


# --- the processes of a cluster, found by their mark ---------------------------------------------------------
def _mark(state_dir: Path) -> bytes:
    return f"{MARK_ENV}={state_dir}".encode()


def alive(pid: int) -> bool:
    """`pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _marked(pid: int, mark: bytes) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return False
    return mark in environ.split(b"\0")


def processes(state_dir: Path) -> list[int]:
    """The live processes of the cluster in `state_dir`: master, workers, executors and their children."""
    mark = _mark(state_dir.resolve())
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _marked(int(entry.name), mark) and alive(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def _signal_groups(pids: list[int], sig: int) -> None:
    """Send `sig` to the process group of every process in `pids` that leads its group, and to each other one
    of `pids` alone (its group may hold processes that are not the cluster's)."""
    leaders = set(pids)
    for pid in pids:
        try:
            pgid = os.getpgid(pid)
            if pgid in leaders:
                os.killpg(pgid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            continue  # ended meanwhile


def _reap(pids: list[int]) -> None:
    """Collect the exit status of those of `pids` that are this process's children (a cluster started by
    `start()` in this process), so none stays a zombie."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue  # not our child: init reaps it


def _wait_gone(state_dir: Path, timeout_s: float, started: list[int]) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        _reap(started)
        left = processes(state_dir)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(POLL_INTERVAL_S / 2)


# --- the state directory ----------------------------------------------------------------------------------------
def _state(state_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):  # none, or half-written by a killed `up`: the processes' marks say what runs
        return None


def _pid_files(state_dir: Path) -> list[Path]:
    return sorted(state_dir.glob("*.pid")) if state_dir.is_dir() else []


def _pids(state_dir: Path) -> dict[str, int]:
    """Name -> pid from the pid files (a file cut off by a killed `start()` is skipped)."""
    pids = {}
    for path in _pid_files(state_dir):
        text = path.read_text().strip()
        if text.isdigit():
            pids[path.stem] = int(text)
    return pids


def _log_tails(state_dir: Path) -> str:
    tails = []
    for log in sorted(state_dir.glob("*.log")):
        text = log.read_text(errors="replace").strip()
        tails.append(f"--- {log.name} (last {LOG_TAIL_CHARS} characters)\n{text[-LOG_TAIL_CHARS:]}")
    return "\n".join(tails)


def _remove_state(state_dir: Path) -> None:
    """Remove what `start()` wrote in `state_dir` (only that), and the directory when that leaves it empty."""
    for path in [state_dir / STATE_FILE, *_pid_files(state_dir), *state_dir.glob("*.log")]:
        path.unlink(missing_ok=True)
    shutil.rmtree(state_dir / WORK_DIR, ignore_errors=True)
    try:
        state_dir.rmdir()
    except OSError:
        pass  # absent, or someone else's files are in it: they stay


# --- ports --------------------------------------------------------------------------------------------------------
def _free_port(other_than: int = 0) -> int:
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
        if port != other_than:
            return port


def _claim_port(port: int, what: str, flag: str, other_than: int = 0) -> int:
    """`port` when it is free on 127.0.0.1 (0: any free port but `other_than`). Raises `EnvironmentProblem` when
    it is taken."""
    if port == 0:
        return _free_port(other_than)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            raise EnvironmentProblem(f"the {what} port {HOST}:{port} is taken ({exc.strerror})",
                                     hint=f"another Spark master? `splitlab spark-cluster status` shows ours; "
                                          f"{flag} 0 picks a free port") from None
    return port


# --- start, status, stop ------------------------------------------------------------------------------------------
def master_json(webui_port: int, timeout_s: float = STATUS_TIMEOUT_S) -> dict[str, Any] | None:
    """The master's JSON status (`/json/`: workers with state, cores, memory, apps), or None when it does not
    answer."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{webui_port}/json/", timeout=timeout_s) as resp:
            return json.load(resp)
    except (OSError, ValueError):  # not listening yet, or cut off while it starts
        return None


def _validate(workers: int, cores_per_worker: int, memory_per_worker: str, master_port: int,
              webui_port: int) -> None:
    if workers < 1:
        raise UsageError(f"--workers {workers}: a cluster needs at least 1 worker")
    if cores_per_worker < 1:
        raise UsageError(f"--cores-per-worker {cores_per_worker}: a worker needs at least 1 core")
    if memory_mb(memory_per_worker) < MIN_MEMORY_PER_WORKER_MB:
        raise UsageError(f"--memory-per-worker {memory_per_worker}: less than 1g",
                         hint="an executor asks for 1g (Spark's spark.executor.memory default); a worker with "
                              "less never runs one")
    for flag, port in (("--port", master_port), ("--webui-port", webui_port)):
        if not 0 <= port <= 65535:
            raise UsageError(f"{flag} {port}: not a TCP port (0 for any free one)")
    if master_port and master_port == webui_port:
        raise UsageError(f"--port and --webui-port are both {master_port}")


def _spawn(argv: list[str], env: dict[str, str], state_dir: Path, name: str) -> tuple[str, subprocess.Popen]:
    """Start one daemon detached: its own session and process group, output to `<name>.log`, pid to
    `<name>.pid`."""
    with open(state_dir / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(argv, env=env, cwd=state_dir, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    (state_dir / f"{name}.pid").write_text(f"{proc.pid}\n")
    return name, proc


def _daemon_env(home: Path, state_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOCAL_HOSTNAME": HOST,
        # one port each, no silent move to the next one when it is taken (the URL we print would be wrong)
        "SPARK_DAEMON_JAVA_OPTS": (env.get("SPARK_DAEMON_JAVA_OPTS", "") + " -Dspark.port.maxRetries=0").strip(),
        MARK_ENV: str(state_dir),
    })
    return env


def start(state_dir: Path, workers: int = DEFAULT_WORKERS, cores_per_worker: int = DEFAULT_CORES_PER_WORKER,
          memory_per_worker: str = DEFAULT_MEMORY_PER_WORKER, master_port: int = DEFAULT_MASTER_PORT,
          webui_port: int = DEFAULT_WEBUI_PORT, timeout_s: float = START_TIMEOUT_S,
          log: Log = _quiet) -> dict[str, Any]:
    """Start a master and `workers` workers on 127.0.0.1 with their state in `state_dir`; return `status()`
    once every worker is ALIVE at the master. Ports 0: any free port.

    Raises `UsageError` for bad sizes or when a cluster of `state_dir` already runs, `EnvironmentProblem` when
    Java or spark-class is missing, a port is taken, or the workers are not alive within `timeout_s` (then
    nothing it started is left running and the message holds the tail of every log).
    """
    _validate(workers, cores_per_worker, memory_per_worker, master_port, webui_port)
    state_dir = state_dir.resolve()
    running = processes(state_dir)
    if running:
        url = (_state(state_dir) or {}).get("master_url", "a master")
        raise UsageError(f"a Spark cluster already runs from {state_dir} ({url}, {len(running)} processes)",
                         hint="splitlab spark-cluster status shows it; splitlab spark-cluster down stops it")
    _remove_state(state_dir)  # what a cluster that is gone left (killed, or the machine rebooted)
    home, java = spark_home(), _java()
    master_port = _claim_port(master_port, "master", "--port")
    webui_port = _claim_port(webui_port, "master web UI", "--webui-port", other_than=master_port)
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot create the Spark cluster's state directory {state_dir}: {exc.strerror}",
                                 hint=f"set ${STATE_DIR_ENV} to a directory you can write") from None
    url = f"spark://{HOST}:{master_port}"
    spark_class = str(home / "bin" / "spark-class")
    env = _daemon_env(home, state_dir)
    state = {"master_url": url, "webui_url": f"http://{HOST}:{webui_port}", "master_port": master_port,
             "webui_port": webui_port, "workers": workers, "cores_per_worker": cores_per_worker,
             "memory_per_worker": memory_per_worker, "spark_home": str(home), "java": java,
             "started_ts": time.time()}
    (state_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    started: list[tuple[str, subprocess.Popen]] = []
    ready = False
    try:
        log(f"starting a Spark master at {url} (web UI {state['webui_url']}) and {workers} worker(s) of "
            f"{cores_per_worker} core(s) and {memory_per_worker}; state in {state_dir}")
        started.append(_spawn([spark_class, MASTER_CLASS, "--host", HOST, "--port", str(master_port),
                               "--webui-port", str(webui_port)], env, state_dir, MASTER))
        for i in range(1, workers + 1):
            work = state_dir / WORK_DIR / f"worker-{i}"
            work.mkdir(parents=True, exist_ok=True)
            started.append(_spawn([spark_class, WORKER_CLASS, url, "--host", HOST, "--port", "0", "--webui-port",
                                   "0", "--cores", str(cores_per_worker), "--memory", memory_per_worker,
                                   "--work-dir", str(work)], env, state_dir, f"worker-{i}"))
        _wait_alive(state_dir, webui_port, workers, timeout_s, started)
        ready = True
        log(f"{workers} worker(s) alive at {url}")
    finally:
        if not ready:  # a timeout, an exited process, Ctrl-C: leave nothing behind (the error holds the logs)
            _end(state_dir, STOP_GRACE_S, [proc.pid for _, proc in started])
            _remove_state(state_dir)
    up = status(state_dir)
    if up is None:
        raise EnvironmentProblem(f"the Spark cluster at {url} ended right after it came up")
    return up


def _wait_alive(state_dir: Path, webui_port: int, workers: int, timeout_s: float,
                started: list[tuple[str, subprocess.Popen]]) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        exited = [(name, proc.returncode) for name, proc in started if proc.poll() is not None]
        if exited:
            raise EnvironmentProblem(
                "a Spark process exited while the cluster started: "
                + ", ".join(f"{name} with code {code}" for name, code in exited) + "\n" + _log_tails(state_dir),
                hint="see the logs above; a port taken meanwhile, or not enough memory?")
        seen = master_json(webui_port)
        alive = sum(1 for w in (seen or {}).get("workers", []) if w.get("state") == "ALIVE")
        if alive >= workers:
            return
        if time.monotonic() >= deadline:
            said = "does not answer" if seen is None else f"shows {alive} of {workers} worker(s) ALIVE"
            raise EnvironmentProblem(
                f"the Spark cluster did not come up within {timeout_s:g} s: the master's status {said}\n"
                + _log_tails(state_dir), hint="a slow machine? --timeout-s gives it longer")
        time.sleep(POLL_INTERVAL_S)


def status(state_dir: Path) -> dict[str, Any] | None:
    """The cluster of `state_dir` as started (`cluster.json`: `master_url`, `webui_url`, ports, sizes) with what
    its master says now: `master_answers`, `workers_alive`, `cores`, `cores_used`, `memory_mb`,
    `memory_used_mb`, `active_apps`; `pids` (name -> pid of each daemon), `processes` (every live process of
    the cluster, executors included). None when no process of it runs."""
    state_dir = state_dir.resolve()
    live = processes(state_dir)
    if not live:
        return None
    state = _state(state_dir) or {"master_url": None, "webui_port": None}  # its file was removed by hand
    seen = master_json(int(state["webui_port"])) if state["webui_port"] else None
    workers = (seen or {}).get("workers", [])
    return {**state, "state_dir": str(state_dir), "pids": _pids(state_dir), "processes": live,
            "master_answers": seen is not None,
            "workers_alive": sum(1 for w in workers if w.get("state") == "ALIVE"),
            "cores": (seen or {}).get("cores", 0), "cores_used": (seen or {}).get("coresused", 0),
            "memory_mb": (seen or {}).get("memory", 0), "memory_used_mb": (seen or {}).get("memoryused", 0),
            "active_apps": [a.get("name") for a in (seen or {}).get("activeapps", [])]}


def _end(state_dir: Path, grace_s: float, started: list[int]) -> None:
    """SIGTERM every process group of the cluster, SIGKILL what is left after `grace_s`. Raises
    `EnvironmentProblem` if a process outlives SIGKILL."""
    left = processes(state_dir)
    if left:
        _signal_groups(left, signal.SIGTERM)
        left = _wait_gone(state_dir, grace_s, started)
    if left:
        _signal_groups(left, signal.SIGKILL)
        left = _wait_gone(state_dir, KILL_WAIT_S, started)
    _reap(started)
    if left:
        raise EnvironmentProblem(f"Spark processes {left} of {state_dir} outlived SIGKILL",
                                 hint="look at them with ps; they may be stuck in the kernel")


def stop(state_dir: Path, grace_s: float = STOP_GRACE_S) -> dict[str, Any] | None:
    """Stop the cluster of `state_dir` (and the warm analysis service if it runs on this cluster's master): every
    process of it ends, its state is removed. Returns what was stopped (`cluster.json` with `processes`, the pids
    that were live, and `service` when the analysis service was stopped), or None when nothing ran. Idempotent;
    also cleans up after a killed `start()`."""
    state_dir = state_dir.resolve()
    state = _state(state_dir)
    live = processes(state_dir)
    if not live and state is None and not _pid_files(state_dir):
        return None
    stopped: dict[str, Any] = {**(state or {}), "state_dir": str(state_dir), "processes": live}
    if live and state is not None:
        stopped["service"] = _stop_service_on(state["master_url"])
    _end(state_dir, grace_s, list(_pids(state_dir).values()))
    _remove_state(state_dir)
    return stopped


def _stop_service_on(master_url: str) -> dict[str, Any] | None:
    """Stop the warm analysis service when it runs on `master_url` (its context would outlive the master
    useless); return its last status, else None."""
    from pipeline import service, service_client

    running = service_client.status()
    if running is None or running.get("master") != master_url:
        return None
    return service.stop()
