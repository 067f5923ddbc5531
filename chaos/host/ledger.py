"""The ledger: every rule, chain, qdisc, process and container state the controller changes, written down
*before* it is applied, so that `heal` undoes exactly that and nothing else, also after the controller died.

`runs/<run>/ledger.jsonl` holds one JSON object per line:

    {"op": "apply", "id", "ts", "group", "key", "node", "pid", "netns_ino", "what", "undo": [[argv], ...],
     "present": {"argv": [...], "stdout" | "contains": "..."} | null, "process": {"marker", "pid", "start_ticks"} | null}
    {"op": "started", "id", "pid", "start_ticks"}         a recorded process has started (its pid is known now)
    {"op": "undone", "id", "ts", "how": "undone" | "absent" | "namespace-gone" | "process-gone"}

An entry with a `host` was applied on that host of a multi-host run: its checks and undo steps run there, over
SSH (the hosts are read from the run's `hosts.json`, so this works after the controller died too).

An entry is *outstanding* until an `undone` line names it. `heal` walks the outstanding entries newest first:
- an entry bound to a network namespace (`pid` + `netns_ino`) whose namespace no longer exists (the container
  went, or the PID now belongs to another namespace) is marked `namespace-gone`: its rules went with it;
- a process entry is ended with SIGTERM (SIGKILL after a grace period) only when its PID still runs the recorded
  process (same start time and marker on the command line);
- otherwise its `undo` steps (argv lists, or `{"argv", "input"}` for a command fed on stdin) run in order; when
  one fails, the `present` check decides: absent means already undone (`absent`), present is an error.
Failures are collected and raised together as one `CommandFailed`/`EnvironmentProblem` after every entry was
tried. Writers serialise on `ledger.lock` (flock), so several controller processes can share one run.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from chaos.host.proc import run
from chaos.hosts.remote import HOSTS_FILE, closing, run_hosts
from node.errors import CommandFailed, EnvironmentProblem, SplitlabError

LEDGER_FILE = "ledger.jsonl"
PROCESS_GRACE_S = 3.0


def netns_inode(pid: int) -> int | None:
    """The inode of `pid`'s network namespace, or None when the process is gone."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except FileNotFoundError:
        return None
    except ProcessLookupError:
        return None


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks since boot), or None when `pid` is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(text[text.rindex(")") + 2:].split()[19])


def process_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


@dataclass
class Entry:
    """One thing the controller applied. See the module docstring for the fields."""

    group: str
    key: str
    what: str
    undo: list[Any] = field(default_factory=list)  # argv lists, or {"argv": [...], "input": "stdin text"}
    node: str | None = None
    pid: int | None = None
    netns_ino: int | None = None
    present: dict[str, Any] | None = None
    process: dict[str, Any] | None = None
    id: str = ""
    ts: float = 0.0
    host: str | None = None  # the inventory host it was applied on (a multi-host run); None: this machine

    def to_line(self) -> dict[str, Any]:
        return {"op": "apply", **asdict(self)}


@dataclass
class HealReport:
    """What `heal` did: entry id -> how it was settled."""

    settled: dict[str, str] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)

    def count(self, how: str) -> int:
        return sum(1 for v in self.settled.values() if v == how)


Runner = Callable[..., Any]


class Ledger:
    """The ledger of one run, in `run_dir/ledger.jsonl`."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LEDGER_FILE
        self._lock_path = self.run_dir / "ledger.lock"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot open the ledger lock {self._lock_path}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _append(self, lines: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
        try:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot write the ledger {self.path}: {exc}") from None

    def _read(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise EnvironmentProblem(f"cannot read the ledger {self.path}: {exc}") from None
        out = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                if number == len(text.splitlines()):
                    continue  # a line cut short by a kill while it was written: nothing was applied after it
                raise EnvironmentProblem(f"ledger {self.path} line {number} is not JSON") from None
        return out

    def _outstanding_unlocked(self) -> list[Entry]:
        entries: dict[str, Entry] = {}
        for line in self._read():
            op = line.get("op")
            if op == "apply":
                data = {k: v for k, v in line.items() if k != "op"}
                entries[line["id"]] = Entry(**data)
            elif op == "started" and line["id"] in entries:
                proc = entries[line["id"]].process or {}
                proc.update(pid=line["pid"], start_ticks=line["start_ticks"])
                entries[line["id"]].process = proc
            elif op == "undone":
                entries.pop(line["id"], None)
        return list(entries.values())

    def outstanding(self, select: Callable[[Entry], bool] | None = None) -> list[Entry]:
        """Entries applied and not undone, oldest first (optionally only those `select` accepts)."""
        with self._locked():
            entries = self._outstanding_unlocked()
        return [e for e in entries if select is None or select(e)]

    def record(self, entry: Entry) -> Entry:
        """Write `entry` before it is applied and return it with its id. An outstanding entry with the same
        `key` is returned instead (applying the same thing twice is recorded once)."""
        return self.record_many([entry])[0]

    def record_many(self, entries: list[Entry]) -> list[Entry]:
        """`record` for several entries under one lock and one write."""
        with self._locked():
            existing = {e.key: e for e in self._outstanding_unlocked()}
            out, new = [], []
            for entry in entries:
                if entry.key in existing:
                    out.append(existing[entry.key])
                    continue
                entry.id = uuid.uuid4().hex[:12]
                entry.ts = round(time.time(), 6)
                existing[entry.key] = entry
                out.append(entry)
                new.append(entry.to_line())
            if new:
                self._append(new)
        return out

    def started(self, entry: Entry, pid: int) -> None:
        """Note that the process of `entry` runs as `pid` (its start time is read now)."""
        ticks = process_start_ticks(pid)
        entry.process = {**(entry.process or {}), "pid": pid, "start_ticks": ticks}
        with self._locked():
            self._append([{"op": "started", "id": entry.id, "pid": pid, "start_ticks": ticks}])

    def mark_undone(self, entries: list[Entry], how: str) -> None:
        with self._locked():
            self._append([{"op": "undone", "id": e.id, "ts": round(time.time(), 6), "how": how} for e in entries])

    def heal(self, select: Callable[[Entry], bool] | None = None, runner: Runner = run) -> HealReport:
        """Undo the outstanding entries (those `select` accepts), newest first; namespaces in parallel.

        Idempotent. Raises `CommandFailed` / `EnvironmentProblem` after trying everything when some undo failed.
        """
        report = HealReport()
        with self._locked():
            entries = [e for e in self._outstanding_unlocked() if select is None or select(e)]
            report.entries = entries
            groups: dict[Any, list[Entry]] = {}
            for entry in entries:  # one namespace's entries (and all host-side ones) in order; namespaces in parallel
                groups.setdefault((entry.host, entry.netns_ino), []).append(entry)
            failures: list[SplitlabError] = []
            remotes: dict[str, Any] = run_hosts(self.run_dir) if any(e.host for e in entries) else {}

            def runner_of(entry: Entry) -> Runner:
                if not entry.host:
                    return runner
                if entry.host not in remotes:
                    raise EnvironmentProblem(f"ledger entry '{entry.what}' names host {entry.host}, which "
                                             f"{self.run_dir / HOSTS_FILE} does not list")
                return remotes[entry.host].run

            with closing(remotes), ThreadPoolExecutor(max_workers=max(1, min(16, len(groups)))) as pool:
                results = list(pool.map(lambda es: _undo_all(list(reversed(es)), runner_of), groups.values()))
            lines = []
            for settled, errors in results:
                failures += errors
                for entry_id, how in settled.items():
                    report.settled[entry_id] = how
                    lines.append({"op": "undone", "id": entry_id, "ts": round(time.time(), 6), "how": how})
            if lines:
                self._append(lines)
        if failures:
            if len(failures) == 1:
                raise failures[0]
            raise EnvironmentProblem(f"heal left {len(failures)} thing(s) in place:\n" +
                                     "\n".join(f.message for f in failures),
                                     hint=f"see {self.path}; run 'splitlab heal' again after fixing the cause")
        return report


def _undo_all(entries: list[Entry], runner_of: Callable[[Entry], Runner]) -> tuple[dict[str, str], list[SplitlabError]]:
    settled: dict[str, str] = {}
    errors: list[SplitlabError] = []
    for entry in entries:
        try:
            settled[entry.id] = undo_entry(entry, runner_of(entry))
        except SplitlabError as exc:
            errors.append(exc)
    return settled, errors


def namespace_gone(entry: Entry, runner: Runner = run) -> bool:
    """Whether the namespace `entry` was applied in has gone: its recorded PID is dead or lives elsewhere now.
    The PID decides, not the inode alone: the kernel reuses a dead namespace's inode number for a new one (a
    restarted container may get its old number back, without the rules). On a remote host, `runner` asks."""
    if entry.pid is None or entry.netns_ino is None:
        return False
    if not entry.host:
        return netns_inode(entry.pid) != entry.netns_ino
    proc = runner(["stat", "-L", "-c", "%i", f"/proc/{entry.pid}/ns/net"], check=False, timeout_s=30)
    return proc.returncode != 0 or proc.stdout.strip() != str(entry.netns_ino)


def undo_entry(entry: Entry, runner: Runner = run) -> str:
    """Undo one entry; returns how it was settled. Raises `CommandFailed` when an undo command fails."""
    if entry.process is not None:  # a process outlives its container's PID: end it whatever the namespace did
        return _end_process(entry)
    if namespace_gone(entry, runner):
        return "namespace-gone"
    for step in entry.undo:
        argv, text = (step["argv"], step.get("input")) if isinstance(step, dict) else (step, None)
        try:
            _undo_step(argv, text, entry.what, runner)
        except CommandFailed:
            # Undo first, look second: the common case costs one command. A failed undo is fine only when
            # the thing is not there (healed before, or never applied because the controller died first).
            if entry.present is not None and not _present(entry.present, runner):
                return "absent"
            raise
    return "undone"


def _undo_step(argv: list[str], text: str | None, what: str, runner: Runner) -> None:
    """Run one undo command; once more if it ended without saying how (killed by a signal: a negative return code
    from a local process, -1 from an SSH channel that closed without an exit status). Every undo can be repeated:
    one that finds its thing gone fails, and `undo_entry` then looks whether it is there. (Seen once: `docker
    stop` of a shaper container on a bed host came back -1, the container still there, and the heal failed.)"""
    hint = f"undoing '{what}' from the ledger"
    try:
        runner(argv, input_text=text, timeout_s=30, hint=hint)
    except CommandFailed as exc:
        if exc.returncode >= 0:
            raise
        runner(argv, input_text=text, timeout_s=30, hint=hint)


def _present(check: dict[str, Any], runner: Runner) -> bool:
    proc = runner(check["argv"], check=False, timeout_s=30)
    if proc.returncode != 0:
        return False
    if "stdout" in check:
        return proc.stdout.strip() == check["stdout"]
    if "contains" in check:
        return check["contains"] in proc.stdout
    return True


def find_marked_process(marker: str) -> int | None:
    """The PID of the process whose command line carries `--marker <marker>`, or None."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        argv = process_cmdline(int(name))
        for i, arg in enumerate(argv[:-1]):
            if arg == "--marker" and argv[i + 1] == marker:
                return int(name)
    return None


def _end_process(entry: Entry) -> str:
    proc = entry.process or {}
    pid, ticks, marker = proc.get("pid"), proc.get("start_ticks"), proc.get("marker")
    if pid is None:  # killed between starting it and noting its pid: find it by its unique marker
        pid = find_marked_process(marker) if marker else None
        ticks = process_start_ticks(pid) if pid else None
    if pid is None or process_start_ticks(pid) is None or process_start_ticks(pid) != ticks:
        return "process-gone"
    if marker and marker not in process_cmdline(pid):
        return "process-gone"
    for sig in (signal.SIGTERM, signal.SIGKILL):  # a grace period after each
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return "process-gone" if sig == signal.SIGTERM else "undone"
        if _ended_within_grace(pid, ticks):
            return "undone"
    raise EnvironmentProblem(f"process {pid} ({entry.what}) survived SIGKILL")


def _ended_within_grace(pid: int, ticks: int | None) -> bool:
    """Whether the process (pid and start time) is gone within PROCESS_GRACE_S."""
    deadline = time.monotonic() + PROCESS_GRACE_S
    while time.monotonic() < deadline:
        if _gone(pid, ticks):
            return True
        time.sleep(0.02)
    return False


def _gone(pid: int, ticks: int | None) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # our own child: reap it
        if waited == pid:
            return True
    except ChildProcessError:
        pass  # not our child: the /proc check below decides
    if process_start_ticks(pid) != ticks:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state[state.rindex(")") + 2] == "Z"  # a zombie of another parent has ended all the same
