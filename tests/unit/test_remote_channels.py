"""A host's command channels (`chaos.hosts.remote.RemoteHost._command_channel`, what the engine relays run on):
a session that sshd refuses (past its MaxSessions) is an error that names the limit and leaves the connection to
the channels already open; a connection that fails is dropped, to be made again. The transport is a stand-in
here; tests/cluster/test_multihost.py opens more relays than sshd allows at once against a real sshd."""
from __future__ import annotations

import paramiko
import pytest

from chaos.hosts.inventory import HostSpec
from chaos.hosts.remote import RemoteHost
from node.errors import EnvironmentProblem


class Transport:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def open_session(self, timeout: float) -> paramiko.Channel:
        raise self.error


def host_with(error: Exception) -> tuple[RemoteHost, list[str]]:
    host = RemoteHost(HostSpec(name="h1", address="192.0.2.1"))
    closed: list[str] = []
    host._transport = lambda: Transport(error)  # type: ignore[method-assign]
    host.close = lambda: closed.append("closed")  # type: ignore[method-assign]
    return host, closed


def test_a_refused_session_names_max_sessions_and_keeps_the_connection():
    host, closed = host_with(paramiko.ChannelException(1, "Administratively prohibited"))
    with pytest.raises(EnvironmentProblem, match="refused another session") as caught:
        host._command_channel("docker system dial-stdio")
    assert "MaxSessions" in (caught.value.hint or "") and closed == []


def test_a_failed_connection_is_dropped():
    host, closed = host_with(EOFError())
    with pytest.raises(EnvironmentProblem, match="SSH channel failed"):
        host._command_channel("docker system dial-stdio")
    assert closed == ["closed"]
