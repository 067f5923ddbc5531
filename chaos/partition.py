"""Partitions with iptables inside each node's namespace: one atomic `iptables-restore` per node.

A grudge maps each node to the nodes whose data traffic it drops (`{"n2": {"n1"}}`: n2 drops what comes from
n1, a one-way cut). The rules live in a chain named for the run, `SL-<run>`, hooked into INPUT; they match the
senders' data-network addresses only, so the control network is never cut. Heal removes the chain and its hook.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

from chaos.netns import Netns
from node.errors import UsageError

Grudge = Mapping[str, set[str] | frozenset[str]]


def chain_name(run_id: str) -> str:
    name = f"SL-{run_id}"
    if len(name) > 28:  # iptables chain names are at most 28 characters
        raise UsageError(f"run id {run_id!r} is too long for an iptables chain name")
    return name


def restore_input(chain: str, drop_from_ips: list[str]) -> str:
    """The `iptables-restore --noflush` input that makes `chain` hold exactly these drops (declaring flushes it)."""
    lines = ["*filter", f":{chain} - [0:0]"]
    lines += [f"-A {chain} -s {ip}/32 -j DROP" for ip in sorted(drop_from_ips)]
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def check_grudge(grudge: Grudge, nodes: list[str]) -> None:
    """Raises `UsageError` naming any unknown node or a node that holds a grudge against itself."""
    known = set(nodes)
    for node, sources in grudge.items():
        unknown = ({node} | set(sources)) - known
        if unknown:
            raise UsageError(f"grudge names unknown node(s) {', '.join(sorted(unknown))}; nodes: {', '.join(nodes)}")
        if node in sources:
            raise UsageError(f"grudge makes {node} drop its own traffic")


def _apply_one(ns: Netns, chain: str, ips: list[str]) -> None:
    ns.exec(["iptables-restore", "-w", "--noflush"], input_text=restore_input(chain, ips))
    if ns.exec(["iptables", "-w", "-C", "INPUT", "-j", chain], check=False).returncode != 0:
        ns.exec(["iptables", "-w", "-I", "INPUT", "1", "-j", chain])


def apply(run_id: str, grudge: Grudge, namespaces: Mapping[str, Netns], data_ips: Mapping[str, str]) -> None:
    """Make every node's chain hold exactly the drops of `grudge` (nodes not in it drop nothing), in parallel."""
    check_grudge(grudge, list(namespaces))
    chain = chain_name(run_id)
    with ThreadPoolExecutor(max_workers=max(1, len(namespaces))) as pool:
        futures = [pool.submit(_apply_one, ns, chain, [data_ips[s] for s in grudge.get(node, ())])
                   for node, ns in namespaces.items()]
        for fut in futures:
            fut.result()


def _heal_one(ns: Netns, chain: str) -> None:
    while ns.exec(["iptables", "-w", "-D", "INPUT", "-j", chain], check=False).returncode == 0:
        pass
    if ns.exec(["iptables", "-w", "-F", chain], check=False).returncode == 0:
        ns.exec(["iptables", "-w", "-X", chain])


def heal(run_id: str, namespaces: Mapping[str, Netns]) -> None:
    """Remove the run's chain and hook from every node (idempotent)."""
    chain = chain_name(run_id)
    with ThreadPoolExecutor(max_workers=max(1, len(namespaces))) as pool:
        for fut in [pool.submit(_heal_one, ns, chain) for ns in namespaces.values()]:
            fut.result()
