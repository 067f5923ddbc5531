"""Faults with a lease (`--ttl-s`, `ttl_s`): a fault that outlives its controller by at most its TTL.

A lease is a file `runs/<run>/chaos/leases/<fault_id>.json` holding `{fault_id, ttl_s, expires_ts}`. The
controller that applied the fault renews it (a daemon thread of its process, `Renewer`, every third of the TTL);
when that process dies, nobody renews it. A watchdog (`python -m chaos.net.watchdog`), started with the lease and
recorded in the ledger like the shaper, waits inside the network namespace of the fault's first node (entered
with nsenter, as the shaper; on another host of a multi-host run it waits on this machine) and ends exactly that
fault once `expires_ts` passes, through the controller's own code (`DockerNet.end_fault`), with a `fault_end`
that says `lease_expired`. A fault ended by its controller loses its lease file, and its watchdog exits.

Between the fault's start and its lease's first write there is a moment in which a killed controller leaves a
fault without a lease; `splitlab heal` (the ledger) covers that moment, as it covers every fault.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from chaos.host.ledger import Entry, Ledger
from chaos.host.netns import Netns, in_netns
from node.errors import EnvironmentProblem, UsageError

GROUP = "lease"
MIN_TTL_S = 0.5
MAX_TTL_S = 86_400.0
RENEW_FRACTION = 3  # renewed every ttl_s / 3: two renewals may be late before the lease expires


def check_ttl(ttl_s: float) -> float:
    """`ttl_s` when it is a usable TTL; else `UsageError`."""
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)) or not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
        raise UsageError(f"ttl_s must be a number of seconds in {MIN_TTL_S:g}..{MAX_TTL_S:g}, got {ttl_s!r}")
    return float(ttl_s)


def lease_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "chaos" / "leases"


def lease_path(run_dir: Path, fault_id: str) -> Path:
    return lease_dir(run_dir) / f"{fault_id}.json"


def write(run_dir: Path, fault_id: str, ttl_s: float, now_ts: float | None = None) -> None:
    """Write (or renew) the lease of `fault_id`: it expires `ttl_s` from now. Atomic."""
    path = lease_path(run_dir, fault_id)
    now_ts = time.time() if now_ts is None else now_ts
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"fault_id": fault_id, "ttl_s": ttl_s, "expires_ts": now_ts + ttl_s}))
        os.replace(tmp, path)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot write the lease {path}: {exc}") from None


def read(run_dir: Path, fault_id: str) -> dict | None:
    """The lease of `fault_id`, None when it has none (ended, or never leased)."""
    path = lease_path(run_dir, fault_id)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as exc:  # written atomically: a bad file was not ours
        raise EnvironmentProblem(f"cannot read the lease {path}: {exc}") from None


def drop(run_dir: Path, fault_id: str) -> None:
    """Remove the lease of `fault_id` (the fault ended): its watchdog exits."""
    lease_path(run_dir, fault_id).unlink(missing_ok=True)


def drop_all(run_dir: Path) -> None:
    """Remove every lease of the run (everything was healed)."""
    for path in lease_dir(run_dir).glob("*.json"):
        path.unlink(missing_ok=True)


def start_watchdog(ledger: Ledger, run_id: str, fault_id: str, ns: Netns | None) -> None:
    """Start the watchdog of `fault_id`'s lease, in `ns` when it is on this machine; recorded in the ledger first
    (so `splitlab heal` ends it too). Raises `EnvironmentProblem` when it does not start."""
    marker = uuid.uuid4().hex[:16]
    entry = ledger.record(Entry(group=GROUP, key=f"watchdog:{fault_id}", node=ns.node if ns else None,
                                what=f"lease watchdog of {fault_id} (marker {marker}); undone by SIGTERM",
                                process={"marker": marker}))
    # this process's namespace (the host's) goes with it, open: the watchdog ends the fault from there, where a
    # partition on the run's bridge is (chaos.net.partition)
    host_fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    argv = [sys.executable, "-m", "chaos.net.watchdog", "--run-dir", str(ledger.run_dir), "--run-id", run_id,
            "--fault", fault_id, "--marker", marker, "--host-netns-fd", str(host_fd)]
    if ns is not None and ns.remote is None:
        argv = in_netns(ns.pid, argv)
    log_path = lease_path(ledger.run_dir, fault_id).with_suffix(".log")
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                    cwd=Path(__file__).resolve().parents[2], pass_fds=(host_fd,))
    finally:
        os.close(host_fd)
    ledger.started(entry, proc.pid)


class Renewer:
    """Renews the leases of one controller process while it lives (a daemon thread: it dies with the process)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.leases: dict[str, float] = {}  # fault_id -> ttl_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, fault_id: str, ttl_s: float) -> None:
        write(self.run_dir, fault_id, ttl_s)
        with self._lock:
            self.leases[fault_id] = ttl_s
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lease-renewer", daemon=True)
                self._thread.start()
        self._wake.set()

    def end(self, fault_id: str) -> None:
        with self._lock:
            self.leases.pop(fault_id, None)
        drop(self.run_dir, fault_id)

    def end_all(self) -> None:
        with self._lock:
            self.leases.clear()
        drop_all(self.run_dir)

    def _run(self) -> None:
        while True:
            with self._lock:
                leases = dict(self.leases)
            for fault_id, ttl_s in leases.items():
                if read(self.run_dir, fault_id) is not None:  # gone: its watchdog or a heal ended the fault
                    write(self.run_dir, fault_id, ttl_s)
            period_s = min(leases.values(), default=1.0) / RENEW_FRACTION
            self._wake.wait(period_s)
            self._wake.clear()
