"""One host reached over SSH: fabric's `Connection` does the connecting (keys, agent, ~/.ssh/config, known
hosts policy); commands run on a channel of its transport.

Why a channel of our own and not `Connection.run`: invoke's runner feeds stdin in 1000-byte reads with a 10 ms
sleep between them (an image of 100 MB would take minutes) and spends three threads on every command; the
controller runs many short commands in parallel (a partition applies on every host at once). A session channel
with stdout and stderr combined, stdin written and shut, and the exit status read is all a command needs here.

`RemoteHost.run` has the signature of `chaos.host.proc.run`, so the ledger and the doctor use either.
"""
from __future__ import annotations

import base64
import json
import shlex
import socket
import subprocess
import threading
import time
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import IO, Callable, Iterator, Mapping, Sequence, TypeVar

import docker
import fabric
import paramiko

from chaos.hosts import hostengine
from chaos.hosts.inventory import HostSpec
from node.errors import CommandFailed, EnvironmentProblem, SplitlabError

CONNECT_TIMEOUT_S = 10
T = TypeVar("T")
H = TypeVar("H", bound=Mapping[str, "RemoteHost"])
CHUNK_BYTES = 1 << 20


class RemoteHost:
    """A host of the inventory; connects on first use, thread-safe (one SSH transport, a channel per command)."""

    def __init__(self, spec: HostSpec, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.spec = spec
        self.connect_timeout_s = connect_timeout_s
        self._conn: fabric.Connection | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return f"RemoteHost({self.spec.user}@{self.spec.address}:{self.spec.port} as {self.name})"

    def _transport(self) -> paramiko.Transport:
        with self._lock:
            if self._conn is None or not self._conn.is_connected:
                kwargs: dict[str, object] = {"banner_timeout": self.connect_timeout_s,
                                             "auth_timeout": self.connect_timeout_s}
                if self.spec.key:
                    kwargs.update(key_filename=self.spec.key, look_for_keys=False, allow_agent=False)
                conn = fabric.Connection(self.spec.address, user=self.spec.user, port=self.spec.port,
                                         connect_timeout=self.connect_timeout_s, connect_kwargs=kwargs)
                conn.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
                try:
                    conn.open()
                except (paramiko.SSHException, OSError, EOFError) as exc:
                    raise EnvironmentProblem(
                        f"host {self.name}: cannot connect over SSH to {self.spec.user}@{self.spec.address}:"
                        f"{self.spec.port}: {exc or type(exc).__name__}",
                        hint="check the address, the key and that sshd runs ('splitlab doctor --inventory')"
                    ) from None
                # Commands are small writes answered at once: without TCP_NODELAY each waits out Nagle against
                # the host's delayed ACK (44 ms per command measured on the test bed, 4 ms with it).
                conn.client.get_transport().sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._conn = conn
            transport = self._conn.client.get_transport()
            assert transport is not None
            return transport

    def command_line(self, argv: Sequence[str], root: bool = True) -> str:
        """The shell line that runs `argv` on the host (through `sudo -n` when the inventory says so)."""
        line = shlex.join(list(argv))
        return f"sudo -n {line}" if root and self.spec.sudo and self.spec.user != "root" else line

    def run(self, argv: Sequence[str], *, input_text: str | None = None, timeout_s: float = 120,
            check: bool = True, hint: str | None = None, root: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `argv` on the host (no shell: each argument is quoted), output combined as text.

        Raises `EnvironmentProblem` when the host cannot be reached or the command times out, `CommandFailed`
        on a non-zero exit when `check`."""
        return self.run_line(self.command_line(argv, root), input_text=input_text, timeout_s=timeout_s,
                             check=check, hint=hint, argv=list(argv))

    def run_line(self, line: str, *, input_text: str | None = None, input_stream: IO[bytes] | None = None,
                 timeout_s: float = 120, check: bool = True, hint: str | None = None,
                 argv: list[str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run a shell `line` on the host, fed `input_text` or the bytes of `input_stream`. Raises as `run`."""
        shown = [f"{self.name}:", *(argv or [line])]
        deadline_s = time.monotonic() + timeout_s
        chan = self._open_session(hint)
        try:
            chan.set_combine_stderr(True)
            chan.settimeout(max(0.1, timeout_s))
            chan.exec_command(line)
            if input_text is not None:
                chan.sendall(input_text.encode())
            elif input_stream is not None:
                while chunk := input_stream.read(CHUNK_BYTES):
                    chan.sendall(chunk)
                    if time.monotonic() > deadline_s:
                        raise socket.timeout()
            chan.shutdown_write()
            out = bytearray()
            while True:
                chan.settimeout(max(0.1, deadline_s - time.monotonic()))
                data = chan.recv(CHUNK_BYTES)
                if not data:
                    break
                out += data
            code = chan.recv_exit_status()
        except socket.timeout:
            raise EnvironmentProblem(f"host {self.name}: command timed out after {timeout_s:g} s: {line}",
                                     hint=hint) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.close()
            raise EnvironmentProblem(f"host {self.name}: SSH failed during '{line}': {exc or type(exc).__name__}",
                                     hint=hint) from None
        finally:
            chan.close()
        text = out.decode(errors="replace")
        if check and code != 0:
            raise CommandFailed(shown, code, text, hint=hint)
        return subprocess.CompletedProcess(shown, code, text)

    def run_script(self, script: str, *, timeout_s: float = 120, what: str = "a script") -> \
            subprocess.CompletedProcess[str]:
        """Run a POSIX shell `script` on the host as root (`sh -s`, fed on stdin). Raises as `run`; a failure
        names `what`."""
        return self.run_line(self.command_line(["sh", "-s"]), input_text=script, timeout_s=timeout_s, argv=[what])

    def engine(self, timeout_s: float = 60) -> docker.DockerClient:
        """A docker SDK client of the host's engine whose requests travel over this host's SSH connection
        (`chaos.hosts.hostengine`); the caller closes it. Raises as `run` when the engine does not answer."""
        version = self.run(["docker", "version", "--format", "{{.Server.APIVersion}}"], timeout_s=timeout_s,
                           hint="the host needs a running Docker engine ('splitlab doctor --inventory')").stdout
        return hostengine.client(lambda: self._command_channel(self.command_line(hostengine.DIAL_STDIO)),
                                 version.strip(), timeout_s=timeout_s)

    def _open_session(self, hint: str | None = None) -> paramiko.Channel:
        """A new session channel on the host's connection. A session the host refuses (sshd's MaxSessions) leaves
        the connection and its other channels as they are; any other failure drops the connection (the next
        command makes it again). Raises `EnvironmentProblem`."""
        try:
            return self._transport().open_session(timeout=self.connect_timeout_s)
        except paramiko.ChannelException as exc:
            raise EnvironmentProblem(f"host {self.name}: sshd refused another session on the connection: {exc}",
                                     hint=f"sshd_config's MaxSessions must allow {hostengine.MAX_RELAYS + 2} "
                                          f"(OpenSSH's default is 10)") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self.close()
            raise EnvironmentProblem(f"host {self.name}: SSH channel failed: {exc or type(exc).__name__}",
                                     hint=hint) from None

    def _command_channel(self, line: str) -> paramiko.Channel:
        """A new session channel running the shell `line` (stdin and stdout are the channel's)."""
        chan = self._open_session()
        try:
            chan.exec_command(line)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            chan.close()
            raise EnvironmentProblem(f"host {self.name}: SSH channel failed: {exc or type(exc).__name__}") from None
        return chan

    def reach(self) -> None:
        """Connect and run `true` (not as root). Raises `EnvironmentProblem` when the host cannot be reached."""
        self.run(["true"], root=False, timeout_s=self.connect_timeout_s * 2)

    def read_bytes(self, path: str, timeout_s: float = 300) -> bytes:
        """The bytes of the file `path` on the host, read as root (base64 on the command's text channel).
        Raises as `run`."""
        return base64.b64decode(self.run(["base64", "-w0", path], timeout_s=timeout_s).stdout.strip())

    def clock_offset_s(self, samples: int = 7) -> tuple[float, float]:
        """(offset of the host's clock from ours in s, round trip in s), from the sample with the shortest round
        trip, the host's time taken as read at its middle. One shell on the host answers every sample (a new
        command per sample would put its start-up, not the network, into the round trip)."""
        best: tuple[float, float] | None = None
        try:
            chan = self._transport().open_session(timeout=self.connect_timeout_s)
            chan.settimeout(10)
            chan.exec_command("while read -r _; do date +%s.%N; done")
            reader = chan.makefile("r")
            for _ in range(samples):
                t0 = time.time()
                chan.sendall(b"\n")
                line = reader.readline()
                t1 = time.time()
                remote = float(line)
                if best is None or t1 - t0 < best[1]:
                    best = (remote - (t0 + t1) / 2, t1 - t0)
            chan.close()
        except (paramiko.SSHException, OSError, EOFError, ValueError) as exc:
            raise EnvironmentProblem(f"host {self.name}: cannot read its clock: {exc or type(exc).__name__}",
                                     hint="the host needs a POSIX sh and GNU date") from None
        assert best is not None
        return round(best[0], 6), round(best[1], 6)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


@contextmanager
def closing(hosts: H) -> Iterator[H]:
    """`hosts` (name -> `RemoteHost`), every connection closed on leaving."""
    try:
        yield hosts
    finally:
        for host in hosts.values():
            host.close()


def each(hosts: Mapping[str, RemoteHost], fn: Callable[[RemoteHost], T]) -> dict[str, T]:
    """`fn` on every host in parallel; raises one error naming every host that failed."""
    results: dict[str, T] = {}
    errors: list[str] = []

    def one(host: RemoteHost) -> None:
        try:
            results[host.name] = fn(host)
        except SplitlabError as exc:
            errors.append(f"{host.name}: {exc.message}")

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        list(pool.map(one, hosts.values()))
    if errors:
        raise EnvironmentProblem("\n".join(sorted(errors)))
    return results


def connect_all(specs: Sequence[HostSpec]) -> dict[str, RemoteHost]:
    """A `RemoteHost` per spec, connected in parallel. Raises `EnvironmentProblem` naming every host that failed."""
    hosts = {s.name: RemoteHost(s) for s in specs}
    try:
        each(hosts, RemoteHost.reach)
    except EnvironmentProblem as exc:
        for h in hosts.values():
            h.close()
        raise EnvironmentProblem("cannot reach host(s) over SSH:\n" + exc.message,
                                 hint="'splitlab doctor --inventory FILE' checks every host") from None
    return hosts


HOSTS_FILE = "hosts.json"  # in a multi-host run's directory (chaos.hosts.multi writes it)


def run_hosts(run_dir: Path) -> dict[str, RemoteHost]:
    """A (not yet connected) `RemoteHost` for each host of the multi-host run in `run_dir`; {} for a run on
    this machine. Raises `EnvironmentProblem` when the file cannot be read."""
    path = Path(run_dir) / HOSTS_FILE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as exc:
        raise EnvironmentProblem(f"cannot read {path}: {exc}") from None
    return {h["name"]: RemoteHost(HostSpec(**h)) for h in state["inventory"]["hosts"]}
