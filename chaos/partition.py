"""Partitions with iptables inside each node's namespace: one atomic `iptables-restore` per node, recorded in
the run's ledger before it is applied.

A grudge (see `chaos.grudge`) maps each node to the nodes whose data traffic it drops (`{"n2": {"n1"}}`: n2
drops what comes from n1, a one-way cut). The rules live in a chain named for the run, `SL-<run>`, hooked into
INPUT; they match the senders' data-network addresses only, so the control network is never cut. The chain and
its hook are created together by one `iptables-restore` and removed together by one, so a node has both or
neither; the ledger entry's undo is that removal, and its presence check is the hook.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

from chaos import grudge as grudges
from chaos.ledger import Entry, Ledger, in_netns
from chaos.netns import Netns
from node.errors import UsageError

Grudge = Mapping[str, set[str] | frozenset[str]]
GROUP = "partition"


def chain_name(run_id: str) -> str:
    name = f"SL-{run_id}"
    if len(name) > 28:  # iptables chain names are at most 28 characters
        raise UsageError(f"run id {run_id!r} is too long for an iptables chain name")
    return name


def restore_input(chain: str, drop_from_ips: list[str], hook: bool = False) -> str:
    """The `iptables-restore --noflush` input that makes `chain` hold exactly these drops (declaring flushes it);
    with `hook`, it also inserts the chain at the top of INPUT."""
    lines = ["*filter", f":{chain} - [0:0]"]
    lines += [f"-A {chain} -s {ip}/32 -j DROP" for ip in sorted(drop_from_ips)]
    if hook:
        lines.append(f"-I INPUT 1 -j {chain}")
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def remove_input(chain: str) -> str:
    """The `iptables-restore --noflush` input that removes the hook and the chain together (fails if absent)."""
    return f"*filter\n-D INPUT -j {chain}\n:{chain} - [0:0]\n-X {chain}\nCOMMIT\n"


def check_grudge(grudge: Grudge, nodes: list[str]) -> None:
    """Raises `UsageError` naming any unknown node or a node that holds a grudge against itself."""
    grudges.check_grudge(grudge, nodes)


def ledger_entry(run_id: str, ns: Netns) -> Entry:
    """The ledger entry for the run's chain and hook in `ns`."""
    chain = chain_name(run_id)
    return Entry(group=GROUP, key=f"{GROUP}:{ns.inode}:{chain}", what=f"iptables chain {chain} hooked in INPUT",
                 node=ns.node, pid=ns.pid, netns_ino=ns.inode,
                 undo=[{"argv": in_netns(ns.pid, ["iptables-restore", "-w", "--noflush"]),
                        "input": remove_input(chain)}],
                 present={"argv": in_netns(ns.pid, ["iptables", "-w", "-C", "INPUT", "-j", chain])})


def _apply_one(ns: Netns, chain: str, ips: list[str], hook: bool) -> None:
    ns.exec(["iptables-restore", "-w", "--noflush"], input_text=restore_input(chain, ips, hook=hook))


def _apply_legacy(ns: Netns, chain: str, ips: list[str]) -> None:
    ns.exec(["iptables-restore", "-w", "--noflush"], input_text=restore_input(chain, ips))
    if ns.exec(["iptables", "-w", "-C", "INPUT", "-j", chain], check=False).returncode != 0:
        ns.exec(["iptables", "-w", "-I", "INPUT", "1", "-j", chain])


def apply(run_id: str, grudge: Grudge, namespaces: Mapping[str, Netns], data_ips: Mapping[str, str],
          ledger: Ledger | None = None) -> None:
    """Make every node's chain hold exactly the drops of `grudge` (nodes not in it drop nothing), in parallel.

    With `ledger`, each node's chain and hook are recorded before they are created, one `iptables-restore` per
    node does all of it, and nodes that have no chain and need none are not touched. Without a ledger (the
    spine's original form) every node is visited and nothing is recorded. Raises `UsageError` for a bad grudge,
    `CommandFailed` when iptables refuses.
    """
    check_grudge(grudge, list(namespaces))
    chain = chain_name(run_id)
    drops = {node: [data_ips[s] for s in grudge.get(node, ())] for node in namespaces}
    if ledger is None:
        jobs = [(_apply_legacy, ns, chain, drops[node]) for node, ns in namespaces.items()]
    else:
        held = {e.key for e in ledger.outstanding(lambda e: e.group == GROUP)}
        wanted = {node: ledger_entry(run_id, ns) for node, ns in namespaces.items()}
        todo = {node: e for node, e in wanted.items() if drops[node] or e.key in held}
        recorded = dict(zip(todo, ledger.record_many(list(todo.values()))))
        jobs = [(_apply_one, namespaces[node], chain, drops[node], wanted[node].key not in held)
                for node in recorded]
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        for fut in [pool.submit(*job) for job in jobs]:
            fut.result()


def _heal_one(ns: Netns, chain: str) -> None:
    while ns.exec(["iptables", "-w", "-D", "INPUT", "-j", chain], check=False).returncode == 0:
        pass
    if ns.exec(["iptables", "-w", "-F", chain], check=False).returncode == 0:
        ns.exec(["iptables", "-w", "-X", chain])


def heal(run_id: str, namespaces: Mapping[str, Netns], ledger: Ledger | None = None) -> None:
    """Remove the run's chain and hook from every node (idempotent).

    With `ledger`, exactly the recorded chains are removed (also in namespaces not given); without, every
    namespace given is swept for the run's chain.
    """
    chain = chain_name(run_id)
    if ledger is not None:
        ledger.heal(lambda e: e.group == GROUP and e.key.endswith(":" + chain))
        return
    with ThreadPoolExecutor(max_workers=max(1, len(namespaces))) as pool:
        for fut in [pool.submit(_heal_one, ns, chain) for ns in namespaces.values()]:
            fut.result()
