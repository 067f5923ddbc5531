"""The IPv6 side of a run's dual-stack data network (`splitlab up --ipv6`): its ULA /64 and each node's address.

The prefix is derived from the run id (RFC 4193: `fd` + a 40-bit global id, here the first 40 bits of the
SHA-256 of the run id, subnet id 0), so two runs side by side get different /64s without asking anyone, and a
run's addresses are known before its containers exist: the compose file pins them (`ipv6_address`) and every
node is told its members' addresses (`SPLITLAB_ADDRESSES`), so nothing depends on DNS AAAA answers. Node i
(n1 is 1) is `<prefix>::<HOST_BASE + i>` (hex); `::1` stays the bridge's gateway.
"""
from __future__ import annotations

import hashlib
import ipaddress

from node.errors import UsageError

HOST_BASE = 0x100  # n1 is <prefix>::101, n2 <prefix>::102, ...


def ula_prefix(run_id: str) -> ipaddress.IPv6Network:
    """The run's data-network /64: `fdXX:XXXX:XXXX::/64` from the SHA-256 of `run_id`."""
    global_id = hashlib.sha256(run_id.encode()).digest()[:5]
    return ipaddress.IPv6Network((int.from_bytes(b"\xfd" + global_id + b"\0\0", "big") << 64, 64))


def node_address(prefix: ipaddress.IPv6Network, index: int) -> str:
    """The data address of the `index`-th node (1-based) in `prefix`. Raises `UsageError` for an index < 1."""
    if index < 1:
        raise UsageError(f"node index {index} is not 1 or more")
    return str(prefix[HOST_BASE + index])


def node_addresses(run_id: str, names: list[str]) -> dict[str, str]:
    """Each node's IPv6 data address, in the order of `names` (n1 first)."""
    prefix = ula_prefix(run_id)
    return {name: node_address(prefix, i) for i, name in enumerate(names, 1)}


def addresses_env(addresses: dict[str, str], port: int) -> str:
    """`SPLITLAB_ADDRESSES` for the nodes: `n1=[fd..::101]:7100,...` (node.config reads the brackets)."""
    return ",".join(f"{name}=[{ip}]:{port}" for name, ip in addresses.items())
