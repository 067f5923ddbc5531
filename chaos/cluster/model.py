"""A running cluster as the controller sees it: its nodes (where each runs and how its control API is reached)
and the questions asked of all of them (who hears whom). The same for a run on one engine and on many hosts."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chaos.cluster.client import NodeClient
from chaos.cluster.engine import at_once
from node.config import CONTROL_PORT
from node.errors import SplitlabError, UsageError

QUIESCE_TIMEOUT_S = 5.0  # a node's answer to `POST /quiesce`


@dataclass(frozen=True)
class NodeInfo:
    name: str
    container: str
    data_ip: str
    control_ip: str
    pid: int
    host: str = ""  # the inventory host that runs it; "" on the controller's own engine
    control_port: int = CONTROL_PORT  # on a remote host: the port published on the host's address
    data_ip6: str = ""  # the IPv6 data address of a dual-stack run (`splitlab up --ipv6`); its nodes talk over it

    @property
    def control_url(self) -> str:
        return f"http://{self.control_ip}:{self.control_port}"

    @property
    def wire_ip(self) -> str:
        """The data address its node talks over: the IPv6 one on a `splitlab up --ipv6` run, else the IPv4 one."""
        return self.data_ip6 or self.data_ip


@dataclass
class Cluster:
    """A running run: its id, directory, token and nodes."""

    run_id: str
    run_dir: Path
    token: str
    nodes: list[NodeInfo]

    def client(self, node: str, timeout_s: float = 5.0) -> NodeClient:
        for info in self.nodes:
            if info.name == node:
                return NodeClient(info.name, info.control_url, self.token, timeout_s)
        raise UsageError(f"run {self.run_id} has no node {node!r}; nodes: {', '.join(self.names)}")

    def quiesce(self) -> set[str]:
        """End the histories of the run's running nodes at once (`NodeClient.quiesce`) before they stop one at a
        time, so that no history records another node's stop. Returns the names of the nodes that did; one that
        did not answer within `QUIESCE_TIMEOUT_S`, or whose kind has no `/quiesce` (optional in the node contract),
        is left out: the caller stops those first, all at once, before the others."""
        done: set[str] = set()

        def one(info: NodeInfo) -> None:
            try:
                self.client(info.name, QUIESCE_TIMEOUT_S).quiesce()
            except SplitlabError:
                return
            done.add(info.name)
        at_once([n for n in self.nodes if n.pid > 0 and n.control_ip], one)
        return done

    @property
    def ipv6(self) -> bool:
        """A dual-stack run whose nodes talk over IPv6 (`splitlab up --ipv6`)."""
        return any(n.data_ip6 for n in self.nodes)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def node(self, name: str) -> NodeInfo:
        for info in self.nodes:
            if info.name == name:
                return info
        raise UsageError(f"run {self.run_id} has no node {name!r}; nodes: {', '.join(self.names)}")

    def hearing(self) -> dict[str, set[str]]:
        """Who hears whom right now, from every node's control API."""
        return {n.name: self.client(n.name).hears() for n in self.nodes}

    def all_hear_all(self) -> bool:
        names = set(self.names)
        return all(heard == names - {node} for node, heard in self.hearing().items())


