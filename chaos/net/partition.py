"""Partitions with iptables: the run's chain recorded in its ledger before it is applied, one atomic
`iptables-restore` per chain.

A grudge (see `chaos.faults.grudge`) maps each node to the nodes whose data traffic it drops (`{"n2": {"n1"}}`: n2
drops what comes from n1, a one-way cut). The rules match data-network addresses only, so the control network is
never cut. Where the chain lives:

- **On the run's bridge** (`iptables.BRIDGE`, `SLB-<run>` in the host's FORWARD), for a run on this machine whose
  bridge passes its frames through iptables (`bridge-nf-call-iptables`, on wherever Docker runs): one rule per
  cut link (`-i br -o br -s <sender> -d <receiver> -j DROP`), so one commit switches every link of the partition
  at the same instant. `data_bridge` finds it.
- **In each node's namespace** (`iptables.PARTITION`, `SL-<run>` in INPUT), dropping from the senders its grudge
  names: the nodes of a multi-host run (their bridges are on several hosts, joined by VXLAN), or when the bridge
  does not filter. The restores are armed and released together (`iptables.apply_kinds`).

On a dual-stack run (`splitlab up --ipv6`) the same grudge is also the IPv6 chain (ip6tables, `.v6()` of either
kind) against the IPv6 data addresses: both families are cut together, in one release, and both chains are in the
ledger, so `splitlab heal` removes both.
"""
from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from chaos.faults import grudge as grudges
from chaos.host.ledger import Ledger
from chaos.host.netns import Netns, host_rule
from chaos.host.proc import run
from chaos.net import iptables

Grudge = Mapping[str, set[str] | frozenset[str]]
GROUP = iptables.PARTITION.group
BRIDGE_FILTERING = {4: Path("/proc/sys/net/bridge/bridge-nf-call-iptables"),
                    6: Path("/proc/sys/net/bridge/bridge-nf-call-ip6tables")}


@dataclass(frozen=True)
class DataBridge:
    """The host bridge of a run's data network (`name`, e.g. `br-0123456789ab`) and the host's namespace."""

    name: str
    ns: Netns


def data_bridge(bridge_name: str | None, ipv6: bool) -> DataBridge | None:
    """The bridge `bridge_name` when it can carry a partition: it is an interface of this process's namespace
    (the host's, where the ledger's undo runs too) and it passes its frames through iptables (and ip6tables on a
    dual-stack run). None otherwise: the cuts go into the nodes' namespaces."""
    try:
        socket.if_nametoindex(bridge_name or "")  # asks this namespace (/sys/class/net shows the mounter's)
    except OSError:
        return None
    return DataBridge(bridge_name, Netns("host", None)) if bridges_filter(ipv6) else None


def bridges_filter(ipv6: bool = False) -> bool:
    """Whether bridges pass their frames through iptables here (and ip6tables, with `ipv6`): br_netfilter's
    `bridge-nf-call-iptables`, which Docker turns on."""
    try:
        return all(BRIDGE_FILTERING[f].read_text().strip() == "1" for f in ((4, 6) if ipv6 else (4,)))
    except OSError:  # no br_netfilter: no /proc/sys/net/bridge
        return False


def bridge_rules(grudge: Grudge, ips: Mapping[str, str], bridge: str) -> list[str]:
    """The bridge chain's rules: one drop per cut link, between the two data addresses, on `bridge` only (sorted,
    so equal grudges give equal rules)."""
    return [f"-i {bridge} -o {bridge} -s {host_rule(ips[src])} -d {host_rule(ips[dst])} -j DROP"
            for dst in sorted(grudge) for src in sorted(grudge[dst])]


def drop_rules(drop_from_ips: Iterable[str]) -> list[str]:
    """The chain's rules: drop everything from each address (sorted, so equal grudges give equal rules); an
    IPv4 address as /32, an IPv6 one as /128 (for the ip6tables chain)."""
    return [f"-s {host_rule(ip)} -j DROP" for ip in sorted(drop_from_ips)]


def apply(ledger: Ledger, run_id: str, grudge: Grudge, namespaces: Mapping[str, Netns],
          data_ips: Mapping[str, str], data_ip6s: Mapping[str, str] | None = None,
          bridge: DataBridge | None = None) -> None:
    """Make the run's chains hold exactly the drops of `grudge` (nodes not in it drop nothing): with `bridge`, its
    one chain on the host; else every node's chain, in parallel. With `data_ip6s` (a dual-stack run) the IPv6
    chain too, released with the IPv4 one.

    Each chain and hook are recorded before they are created; a chain left with no drops is removed, or not
    touched when there is none. Raises `UsageError` for a bad grudge, `CommandFailed` when iptables refuses.
    """
    grudges.check_grudge(grudge, list(namespaces))
    families = [(4, data_ips)] + ([(6, data_ip6s)] if data_ip6s else [])
    if bridge is not None:
        kinds = [iptables.BRIDGE, iptables.BRIDGE6]
        targets = [[(bridge.ns, bridge_rules(grudge, ips, bridge.name))] for _, ips in families]
    else:
        kinds = [iptables.PARTITION, iptables.PARTITION6]
        targets = [[(ns, drop_rules(ips[s] for s in grudge.get(node, ()))) for node, ns in namespaces.items()]
                   for _, ips in families]
    other = [iptables.PARTITION, iptables.PARTITION6] if bridge is not None else [iptables.BRIDGE, iptables.BRIDGE6]
    for kind in other:  # a run that changed places (its bridge stopped filtering) keeps one place only
        iptables.remove(ledger, kind, run_id)
    iptables.apply_kinds(ledger, run_id, [(kinds[i], t) for i, t in enumerate(targets)])


def sweep_host(run_id: str) -> list[str]:
    """Remove the run's bridge chains from the host, whatever the ledger says (`splitlab down` runs it after the
    heal, for a run whose ledger went with its directory); returns the tools that had one. Raises
    `CommandFailed` when a present chain cannot be removed."""
    swept = []
    for kind in (iptables.BRIDGE, iptables.BRIDGE6):
        chain = kind.name(run_id)
        if shutil.which(kind.tool) and run([kind.tool, "-w", "-C", kind.hook_into, "-j", chain],
                                           check=False).returncode == 0:
            run(kind.restore, input_text=iptables.remove_input(chain, kind.hook_into))
            swept.append(kind.tool)
    return swept


def heal(ledger: Ledger, run_id: str) -> None:
    """Remove the run's chains and hooks, both families, wherever the ledger holds them (on the host, and in
    namespaces of nodes not running any more). Idempotent."""
    for kind in (iptables.BRIDGE, iptables.BRIDGE6, iptables.PARTITION, iptables.PARTITION6):
        iptables.remove(ledger, kind, run_id)
