"""Acting inside a container's network namespace from the host.

The controller runs as root on the host and enters a node's network namespace through the container's PID
(`nsenter -t PID -n`). It refuses any PID whose namespace is the host's own, and any container that is not
labelled by splitlab (see `target`).

`Netns.socket` opens a socket *inside* the namespace from this very process (setns(2) on the calling thread,
then back), so probes, injection and capture need no helper process: a socket stays in the namespace it was
created in.

A node of a multi-host run lives on another host: its `Netns` carries that host's runner (`remote`, a
`chaos.hosts.remote.RemoteHost`), and commands enter the namespace there, over SSH. Sockets cannot be made
there from this process: injection and capture go through the wire agent there (chaos.wire.remote), probes
stay with nodes on this machine. `socket_in(None, ...)` is the agent's own namespace.
"""
from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from functools import cached_property
from dataclasses import dataclass, field
from typing import Any, Sequence

from chaos.host.proc import run
from node.errors import EnvironmentProblem, UsageError


def _netns_inode(pid: int | str) -> int:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError as exc:
        raise EnvironmentProblem(f"cannot read the network namespace of pid {pid}: {exc}",
                                 hint="the controller must run as root on the Docker host") from None


def in_netns(pid: int | None, argv: Sequence[str]) -> list[str]:
    """`argv` run inside the network namespace of `pid` (the form every namespaced undo takes); None: in the
    namespace of whoever runs it (the host's, for the controller and `splitlab heal`)."""
    return list(argv) if pid is None else ["nsenter", "-t", str(pid), "-n", *argv]


@dataclass(frozen=True)
class Netns:
    """The network namespace of a splitlab node container, entered through `pid` (None: this process's own, the
    host's, where a run's bridge is)."""

    node: str
    pid: int | None
    host: str = ""  # the inventory host it lives on; "" for this machine
    remote: Any = field(default=None, compare=False, repr=False)  # that host's `RemoteHost`

    def exec(self, argv: Sequence[str], input_text: str | None = None, check: bool = True,
             timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside this namespace (on its host). Raises `CommandFailed` on failure when `check`."""
        return self.runner(in_netns(self.pid, argv), input_text=input_text, check=check, timeout_s=timeout_s)

    @property
    def runner(self) -> Any:
        """What runs host commands where this namespace lives: `proc.run`, or the remote host's `run`."""
        return self.remote.run if self.remote is not None else run

    @cached_property
    def inode(self) -> int:
        """The inode of this namespace (it identifies the namespace; a restarted container gets a new one)."""
        if self.remote is None:
            return _netns_inode("self" if self.pid is None else self.pid)
        proc = self.remote.run(["stat", "-L", "-c", "%i", f"/proc/{self.pid}/ns/net"], timeout_s=30)
        return int(proc.stdout.strip())

    def socket(self, family: int, type_: int, proto: int = 0) -> socket.socket:
        """A socket created inside this namespace. Raises `EnvironmentProblem` when setns(2) fails or the
        namespace is on another host."""
        if self.remote is not None:
            raise EnvironmentProblem(f"node {self.node} runs on host {self.host}: sockets of this process "
                                     f"reach only namespaces on this machine")
        return socket_in(self.pid, family, type_, proto)


_CLONE_NEWNET = 0x40000000
_setns_lock = threading.Lock()


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise EnvironmentProblem(f"setns(2) into a network namespace failed: {os.strerror(err)}",
                                 hint="the controller must run as root on the Docker host")


def address_family(ip: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 address, AF_INET otherwise: the family of a socket bound to or sending to `ip`."""
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def host_rule(ip: str) -> str:
    """`ip` as an iptables/ip6tables address of one host: `/32` for IPv4, `/128` for IPv6."""
    return f"{ip}/{128 if address_family(ip) == socket.AF_INET6 else 32}"


def enter(fd: int) -> None:
    """Move the calling thread into the network namespace open as `fd` (what it runs after, and the threads and
    processes it starts, live there). Raises `EnvironmentProblem`."""
    with _setns_lock:
        _setns(fd)


SO_RCVBUFFORCE = 33  # <asm-generic/socket.h>; Python's socket module does not export it


def force_receive_buffer(sock: socket.socket, rcvbuf_bytes: int) -> None:
    """Give `sock` a receive buffer of `rcvbuf_bytes`, past net.core.rmem_max when root (SO_RCVBUFFORCE), else
    as much as rmem_max allows."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf_bytes)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf_bytes)


def socket_in(pid: int | None, family: int, type_: int, proto: int = 0) -> socket.socket:
    """A socket created in the network namespace of `pid`; the calling thread returns to its own namespace.
    `pid` None: this process's own namespace (an agent started inside the node's namespace, which has no right
    to setns(2)).

    Python 3.11 has no os.setns, hence ctypes. Raises `EnvironmentProblem`.
    """
    if pid is None:
        return socket.socket(family, type_, proto)
    with _setns_lock:
        try:
            own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            target_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot open the network namespace of pid {pid}: {exc}") from None
        try:
            _setns(target_fd)
            try:
                return socket.socket(family, type_, proto)
            finally:
                _setns(own)
        finally:
            os.close(own)
            os.close(target_fd)


def target(node: str, pid: int, labels: dict[str, str], run_id: str) -> Netns:
    """A `Netns` for a container with `labels` and `pid`, after refusing what splitlab must not touch.

    Raises `UsageError` for a container not labelled with this run, and `EnvironmentProblem` for a PID that is
    not running or whose network namespace is the host's own.
    """
    if labels.get("splitlab.run") != run_id:
        raise UsageError(f"refusing container {node!r}: it is not labelled splitlab.run={run_id}",
                         hint="splitlab only touches containers it started")
    if pid <= 0:
        raise EnvironmentProblem(f"node {node} is not running (no PID)", hint="start it first")
    if _netns_inode(pid) == _netns_inode("self"):
        raise UsageError(f"refusing node {node}: pid {pid} shares the host's network namespace")
    return Netns(node, pid)
