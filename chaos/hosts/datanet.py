"""One data network across hosts: on every host a Docker bridge network with the same subnet, its bridge joined
to the other hosts' by a VXLAN device with head-end replication (an all-zero forwarding entry per peer host,
so broadcast and multicast reach every host), and the node addresses planned here, centrally.

The control network stays separate: a plain Docker network per host, each node's control port published on its
host's address, never shaped or cut.

Names: Linux allows 15 characters per interface, so the bridge and the VXLAN device are named from a hash of
the run id (`sl<8 hex>b`, `sl<8 hex>x`); the VXLAN id comes from the same hash.
"""
from __future__ import annotations

import hashlib
import ipaddress
import shlex
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from chaos.cluster.naming import LABEL_RUN
from node.errors import EnvironmentProblem, UsageError

VXLAN_PORT = 4789
VXLAN_OVERHEAD_BYTES = 50
MTU_BYTES = 1500 - VXLAN_OVERHEAD_BYTES
FIRST_NODE_HOST = 65  # .1 .. .64: one gateway per host; nodes from .65
MAX_HOSTS = 64


@dataclass(frozen=True)
class Plan:
    """The data network of one run: subnet, names, VXLAN id, each host's gateway and each node's address."""

    run_id: str
    subnet: str
    bridge: str
    vxlan: str
    vni: int
    gateways: dict[str, str]
    node_ips: dict[str, str]
    data_network: str
    control_network: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Plan":
        """The plan as `as_dict` wrote it (in a run's hosts.json). Raises `EnvironmentProblem` when it is not."""
        try:
            return cls(**dict(data))
        except (TypeError, ValueError) as exc:
            raise EnvironmentProblem(f"the run's data-network plan in hosts.json is damaged: {exc}",
                                     hint="the run directory's hosts.json was edited or cut short") from None


def plan(run_id: str, hosts: Sequence[str], nodes: Sequence[str]) -> Plan:
    """The plan for `nodes` over `hosts`: a /24 in 10.128.0.0/9 chosen from the run id. Raises `UsageError`."""
    if len(hosts) > MAX_HOSTS:
        raise UsageError(f"{len(hosts)} hosts; a run spans at most {MAX_HOSTS}")
    if len(nodes) > 254 - FIRST_NODE_HOST + 1:
        raise UsageError(f"{len(nodes)} nodes; a multi-host run has at most {254 - FIRST_NODE_HOST + 1}")
    digest = hashlib.sha256(run_id.encode()).digest()
    net = ipaddress.ip_network(f"10.{128 + digest[0] % 128}.{digest[1]}.0/24")
    base = int(net.network_address)
    tag = digest[2:6].hex()
    return Plan(run_id=run_id, subnet=str(net), bridge=f"sl{tag}b", vxlan=f"sl{tag}x",
                vni=1 + int.from_bytes(digest[6:9], "big") % (2**24 - 2),
                gateways={h: str(ipaddress.ip_address(base + 1 + i)) for i, h in enumerate(hosts)},
                node_ips={n: str(ipaddress.ip_address(base + FIRST_NODE_HOST + i)) for i, n in enumerate(nodes)},
                data_network=f"splitlab-{run_id}-data", control_network=f"splitlab-{run_id}-control")


def create_script(p: Plan, host: str, local_address: str, peers: Sequence[str]) -> str:
    """The shell script (run as root on `host`) that creates the host's two networks and joins its bridge to
    the `peers` (the other hosts' VXLAN addresses). Fails as a whole on the first error."""
    q = shlex.quote
    lines = [
        "set -eu",
        f"docker network create --driver bridge --internal --subnet {q(p.subnet)} --gateway {q(p.gateways[host])} "
        f"-o com.docker.network.bridge.name={q(p.bridge)} -o com.docker.network.driver.mtu={MTU_BYTES} "
        f"--label {LABEL_RUN}={q(p.run_id)} --label splitlab.network=data {q(p.data_network)} >/dev/null",
        f"docker network create --driver bridge --label {LABEL_RUN}={q(p.run_id)} --label splitlab.network=control "
        f"{q(p.control_network)} >/dev/null",
        f"ip link add {q(p.vxlan)} type vxlan id {p.vni} dstport {VXLAN_PORT} local {q(local_address)}",
        f"ip link set {q(p.vxlan)} mtu {MTU_BYTES} master {q(p.bridge)} up",
        *(f"bridge fdb append 00:00:00:00:00:00 dev {q(p.vxlan)} dst {q(peer)}" for peer in peers),
    ]
    return "\n".join(lines) + "\n"


def remove_script(p: Plan) -> str:
    """The shell script that removes the run's containers, VXLAN device and networks from a host; idempotent."""
    q = shlex.quote
    return "\n".join([
        f"ids=$(docker ps -aq --filter label={LABEL_RUN}={q(p.run_id)})",
        'if [ -n "$ids" ]; then docker rm -f -v $ids >/dev/null; fi',
        f"ip link del {q(p.vxlan)} 2>/dev/null || true",
        f"for n in {q(p.data_network)} {q(p.control_network)}; do",
        '  if docker network inspect "$n" >/dev/null 2>&1; then docker network rm "$n" >/dev/null; fi',
        "done",
        f"! ip link show {q(p.vxlan)} >/dev/null 2>&1",
    ]) + "\n"
