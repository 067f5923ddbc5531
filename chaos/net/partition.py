"""Partitions with iptables inside each node's namespace: the run's chain `SL-<run>` in INPUT
(`chaos.net.iptables.PARTITION`), one atomic `iptables-restore` per node, recorded in the run's ledger before it
is applied.

A grudge (see `chaos.faults.grudge`) maps each node to the nodes whose data traffic it drops (`{"n2": {"n1"}}`: n2
drops what comes from n1, a one-way cut). The rules match the senders' data-network addresses only, so the
control network is never cut.

On a dual-stack run (`splitlab up --ipv6`) the same grudge is also the IPv6 chain (`iptables.PARTITION6`, with
ip6tables) against the senders' IPv6 data addresses: both families are cut together, in one armed release, and
both chains are in the ledger, so `splitlab heal` removes both.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from chaos.faults import grudge as grudges
from chaos.host.ledger import Ledger
from chaos.host.netns import Netns, host_rule
from chaos.net import iptables

Grudge = Mapping[str, set[str] | frozenset[str]]
GROUP = iptables.PARTITION.group


def drop_rules(drop_from_ips: Iterable[str]) -> list[str]:
    """The chain's rules: drop everything from each address (sorted, so equal grudges give equal rules); an
    IPv4 address as /32, an IPv6 one as /128 (for the ip6tables chain)."""
    return [f"-s {host_rule(ip)} -j DROP" for ip in sorted(drop_from_ips)]


def apply(ledger: Ledger, run_id: str, grudge: Grudge, namespaces: Mapping[str, Netns],
          data_ips: Mapping[str, str], data_ip6s: Mapping[str, str] | None = None) -> None:
    """Make every node's chain hold exactly the drops of `grudge` (nodes not in it drop nothing), in parallel;
    with `data_ip6s` (a dual-stack run) the IPv6 chain too, released with the IPv4 one.

    Each node's chain and hook are recorded before they are created; a node that needs no drops loses its chain,
    or is not touched when it has none. Raises `UsageError` for a bad grudge, `CommandFailed` when iptables
    refuses.
    """
    grudges.check_grudge(grudge, list(namespaces))
    kinds = [(iptables.PARTITION, data_ips)] + ([(iptables.PARTITION6, data_ip6s)] if data_ip6s else [])
    iptables.apply_kinds(ledger, run_id, [
        (kind, [(ns, drop_rules(ips[s] for s in grudge.get(node, ()))) for node, ns in namespaces.items()])
        for kind, ips in kinds])


def heal(ledger: Ledger, run_id: str) -> None:
    """Remove the run's chains and hooks, both families, wherever the ledger holds them (also in namespaces of
    nodes not running any more). Idempotent."""
    for kind in (iptables.PARTITION, iptables.PARTITION6):
        iptables.remove(ledger, kind, run_id)
