"""A host's Docker engine API over SSH: a docker SDK client whose every HTTP connection is a channel of the
host's SSH transport running `docker system dial-stdio` (the docker CLI relays the channel to the engine's
socket), so that many engine requests cost one SSH connection and a few relays instead of a docker CLI process
each.

Why not the SDK's own `ssh://` client: it makes its own SSH connection from ~/.ssh/config (not the inventory's
user, port and key, nor its sudo) or shells out to the `ssh` program. Here the connection is the host's
(`chaos.hosts.remote.RemoteHost` opens the channels) and only the channel's command is ours. The SDK's SSH
connection pool is kept for what it solves: urllib3 would ask a pooled channel for a file descriptor each time it
is reused (paramiko makes a pipe for each), which runs out of descriptors.
"""
from __future__ import annotations

from typing import Any, Callable

import docker
import paramiko
import urllib3
from docker.transport.basehttpadapter import BaseHTTPAdapter
from docker.transport.sshconn import SSHConnection, SSHConnectionPool

DIAL_STDIO = ["docker", "system", "dial-stdio"]
HINT = "the nodes start through the engine's API relayed by 'docker system dial-stdio' (Docker 18.09 or later)"
BASE_URL = "tcp://engine.invalid:2375"  # never resolved: every request of the client goes through the adapter below
# OpenSSH serves at most 10 sessions per connection (sshd_config MaxSessions): the relays leave two of them to
# the host's other commands
MAX_RELAYS = 8
OpenChannel = Callable[[], paramiko.Channel]  # a new session channel that runs the relay, already executing


class _RelayConnection(SSHConnection):
    def __init__(self, open_channel: OpenChannel, timeout_s: float) -> None:
        super().__init__(None, timeout_s)
        self._open_channel = open_channel

    def connect(self) -> None:
        chan = self._open_channel()
        chan.settimeout(self.timeout)
        self.sock = chan


class _RelayPool(SSHConnectionPool):
    def __init__(self, open_channel: OpenChannel, timeout_s: float, max_connections: int) -> None:
        super().__init__(None, timeout_s, max_connections)
        self.block = True  # never more relays than that: sshd refuses sessions past its MaxSessions
        self._open_channel = open_channel

    def _new_conn(self) -> urllib3.connection.HTTPConnection:
        return _RelayConnection(self._open_channel, self.timeout)


class _RelayAdapter(BaseHTTPAdapter):
    def __init__(self, open_channel: OpenChannel, timeout_s: float, max_connections: int) -> None:
        super().__init__()
        self._pool = _RelayPool(open_channel, timeout_s, max_connections)

    def get_connection(self, url: Any, proxies: Any = None) -> _RelayPool:
        return self._pool

    def close(self) -> None:
        super().close()
        self._pool.close()


def client(open_channel: OpenChannel, api_version: str, *, timeout_s: float = 60,
           max_connections: int = MAX_RELAYS) -> docker.DockerClient:
    """A docker SDK client of the engine behind `open_channel` speaking `api_version` (the engine's, asked by the
    caller: an SDK asking itself would connect before the adapter is in place), with at most `max_connections`
    relays open at once (requests beyond wait for one). Closing the client closes its channels, not the SSH
    connection."""
    engine = docker.DockerClient(base_url=BASE_URL, version=api_version, timeout=timeout_s)
    engine.api.mount(engine.api.base_url, _RelayAdapter(open_channel, timeout_s, max_connections))
    return engine
