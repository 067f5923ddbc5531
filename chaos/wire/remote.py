"""Forged packets and captures of nodes on other hosts of a multi-host run: the wire agent (chaos.wire.agent) in
a container of the agent image inside the node's namespace on its host (`--network container:<node>`, only
NET_RAW and NET_ADMIN), reached over SSH.

- `send`: one `docker run --rm -i` per sending node, its packets framed on the container's stdin. The container
  ends with its input, also when the controller dies while sending.
- `RemoteCapture`: an agent container per node, started on every host in parallel and waited for until its
  socket is open; each is recorded in the ledger, so `heal` stops and removes one that a killed controller
  left. `stop` ends them (SIGTERM: the agent closes its file), brings their files over and writes one pcap of
  every node's received packets in time order, each host's timestamps moved onto the controller's clock by the
  offset measured at `up`, as the histories are (chaos.hosts.multi.collect).
"""
from __future__ import annotations

import io
import json
import shlex
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from chaos.cluster.model import NodeInfo
from chaos.cluster.naming import container_name
from chaos.host.ledger import Entry, Ledger
from chaos.hosts import multi
from chaos.hosts.remote import RemoteHost, each
from chaos.wire import agent
from chaos.wire.capture import read_pcap, write_pcap
from node.errors import CommandFailed, EnvironmentProblem

AGENT_CAPS = ("NET_RAW", "NET_ADMIN")  # raw and packet sockets; NET_ADMIN sets SO_MARK (the shaper's bypass mark)
START_TIMEOUT_S = 10.0
STOP_GRACE_S = 5
SEND_TIMEOUT_S = 300.0
GROUP = "capture"  # the ledger group of capture containers


def _docker_run(run_dir: Path, run_id: str, node: str, options: Sequence[str], verb: Sequence[str]) -> list[str]:
    """The `docker run` of the wire agent in `node`'s namespace."""
    return multi.agent_run(run_dir, run_id, node, AGENT_CAPS, options, verb,
                           entrypoint=("python3", "-m", "chaos.wire.agent"))


def _result(output: str, key: str, what: str) -> int:
    """The count the agent printed as its last line (a JSON object). Raises `EnvironmentProblem`."""
    lines = output.strip().splitlines()
    try:
        return int(json.loads(lines[-1])[key])
    except (IndexError, ValueError, KeyError, TypeError):
        raise EnvironmentProblem(f"{what}: the wire agent did not report ({output.strip()[-500:] or 'no output'})"
                                 ) from None


def send(host: RemoteHost, run_dir: Path, run_id: str, node: NodeInfo, ip: str, packets: list[bytes]) -> int:
    """Send whole UDP packets (each from `node`'s data address `ip`) from inside `node`'s namespace on `host`;
    returns how many went out. Raises `UsageError` for a packet too large to frame, `EnvironmentProblem` when
    the agent fails (its output in the message)."""
    data = agent.frame(packets)
    argv = _docker_run(run_dir, run_id, node.name, ["--rm", "-i"], ["send", "--ip", ip])
    what = f"sending {len(packets)} packet(s) from {node.name} on host {host.name}"
    try:
        proc = host.run_line(host.command_line(argv), input_stream=io.BytesIO(data), timeout_s=SEND_TIMEOUT_S,
                             argv=argv)
    except CommandFailed as exc:
        raise EnvironmentProblem(f"{what}: {exc.output.strip()[-1500:]}") from None
    return _result(proc.stdout, "sent", what)


class RemoteCapture:
    """Records the UDP packets `nodes` (all on other hosts) receive on their data addresses into the pcap `path`
    until `stop`; the interface of `chaos.wire.capture.Capture`."""

    def __init__(self, ledger: Ledger, hosts: Mapping[str, RemoteHost], run_id: str, nodes: Sequence[NodeInfo],
                 path: Path) -> None:
        self.ledger, self.hosts, self.run_id, self.path = ledger, hosts, run_id, Path(path)
        self.nodes = list(nodes)
        self.count = 0
        tag = uuid.uuid4().hex[:8]
        rdir = multi.read_state(ledger.run_dir)["remote_dir"]
        self._names = {n.name: f"{container_name(run_id, n.name)}-capture-{tag}" for n in self.nodes}
        self._files = {n.name: f"{rdir}/chaos/capture-{tag}-{n.name}.pcap" for n in self.nodes}
        self._entries: dict[str, Entry] = {}

    def _entry(self, node: NodeInfo) -> Entry:
        name = self._names[node.name]
        return Entry(group=GROUP, key=f"capture:{node.host}:{name}", node=node.name, host=node.host,
                     what=f"capture container {name} for {node.name} on {node.host}",
                     undo=[["docker", "stop", "-t", str(STOP_GRACE_S), name], ["docker", "rm", name],
                           ["rm", "-f", self._files[node.name]]],
                     present={"argv": ["docker", "inspect", name]})

    def _by_host(self) -> dict[str, list[NodeInfo]]:
        out: dict[str, list[NodeInfo]] = {}
        for node in self.nodes:
            out.setdefault(node.host, []).append(node)
        return out

    def start(self) -> "RemoteCapture":
        """Start every node's agent and wait until each has its socket open. Raises `EnvironmentProblem` naming
        the host and node, with the agent's output (what did start is stopped by `stop` or `heal`)."""
        self._entries = {n.name: self.ledger.record(self._entry(n)) for n in self.nodes}
        by_host = self._by_host()
        try:
            each({h: self.hosts[h] for h in by_host}, lambda host: self._start_on(host, by_host[host.name]))
        except EnvironmentProblem:
            self._remove()
            raise
        return self

    def _remove(self) -> None:
        """Stop (if still running) and remove every agent container and its file on its host."""
        entries = {e.id for e in self._entries.values()}
        self.ledger.heal(lambda e: e.id in entries)

    def _start_on(self, host: RemoteHost, nodes: list[NodeInfo]) -> None:
        q = shlex.quote
        polls = int(START_TIMEOUT_S / 0.02)
        lines = ["set -u"]
        for node in nodes:
            name, out = self._names[node.name], self._files[node.name]
            folder = str(Path(out).parent)
            argv = _docker_run(self.ledger.run_dir, self.run_id, node.name, ["-d", "--name", name, "-v",
                                                                              f"{folder}:{folder}"],
                               ["capture", "--ip", node.wire_ip, "--out", out])
            lines += [f"mkdir -p {q(folder)}", f"{shlex.join(argv)} >/dev/null || exit 3"]
        for node in nodes:
            name, out = q(self._names[node.name]), q(self._files[node.name])
            status = f"$(docker inspect -f '{{{{.State.Status}}}}' {name})"
            lines += [f"i=0; until [ -s {out} ]; do",
                      f"  if [ $i -ge {polls} ] || [ \"{status}\" != running ]",
                      f"  then echo \"capture of {node.name} did not start; its output:\"; docker logs --tail 20 {name} 2>&1;"
                      f" exit 4; fi",
                      "  i=$((i+1)); sleep 0.02", "done"]
        try:
            host.run_script("\n".join(lines) + "\n", timeout_s=START_TIMEOUT_S * len(nodes) + 30,
                            what=f"capture of {', '.join(n.name for n in nodes)}")
        except CommandFailed as exc:
            raise EnvironmentProblem(f"capture on host {host.name}: {exc.output.strip()[-1500:]}",
                                     hint="'splitlab doctor --inventory FILE' checks every host") from None

    def stop(self) -> int:
        """End every agent, bring its packets over and write `path` (every node's packets in time order);
        returns how many packets it holds. Raises `EnvironmentProblem` after ending every agent it could."""
        by_host = self._by_host()
        packets: list[tuple[float, bytes]] = []
        offsets = multi.read_state(self.ledger.run_dir).get("offsets_s", {}).get("up", {})

        def fetch(host: RemoteHost) -> list[tuple[float, bytes]]:
            out = []
            for node in by_host[host.name]:
                name = self._names[node.name]
                host.run(["docker", "stop", "-t", str(STOP_GRACE_S), name], timeout_s=STOP_GRACE_S + 30)
                data = host.read_bytes(self._files[node.name])
                local = self.path.with_name(f".{self.path.name}.{node.name}")
                local.write_bytes(data)
                try:
                    out += [(ts - offsets.get(host.name, 0.0), pkt) for ts, pkt in read_pcap(local)]
                finally:
                    local.unlink()
            return out

        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            for got in each({h: self.hosts[h] for h in by_host}, fetch).values():
                packets += got
        finally:
            self._remove()
        packets.sort(key=lambda tp: tp[0])
        write_pcap(self.path, packets)
        self.count = len(packets)
        return self.count

    def __enter__(self) -> "RemoteCapture":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
