"""A run's own iptables chain inside node namespaces: the one place that builds, fills, hooks, unhooks and removes
it, every chain recorded in the run's ledger before it is created.

Three backends keep one chain each per node, named for the run and hooked into one built-in chain:

    PARTITION  SL-<run>   in INPUT   drops from the senders a grudge names      (chaos.net.partition)
    STATLOSS   SLL-<run>  in OUTPUT  statistic loss toward peers                 (chaos.net.statloss)
    QUEUE      SLQ-<run>  in OUTPUT  UDP toward shaped peers to the NFQUEUE      (chaos.net.shaper.control)

and a partition of a run on this machine has one chain on the host instead, for every node at once:

    BRIDGE     SLB-<run>  in FORWARD of the host: drops between data addresses on the run's bridge

Filling is one `iptables-restore --noflush` per namespace: declaring the chain creates it or flushes it, its
rules follow, and the first fill also inserts the hook at the top of the built-in chain, so the change is atomic
and a namespace has chain and hook together or neither. Removing is one more restore (unhook, flush, delete);
it is the ledger entry's undo, and the hook (`iptables -C`) its presence check, so `splitlab heal` removes the
chain after its controller died. The entries' keys, texts and undo commands are those the three backends wrote
before this module existed, so a run recorded by older code heals and continues the same way.

IPv6: `kind.v6()` is the same chain built with `ip6tables-restore` (ledger key prefix `<key_prefix>6`, the same
group), for the IPv6 addresses of a dual-stack run (`splitlab up --ipv6`). `apply_kinds` fills the chains of
both families in one armed release, so a dual-stack cut lands on both families together.
"""
from __future__ import annotations

import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Sequence

from chaos.host import proc
from chaos.host.ledger import Entry, Ledger
from chaos.host.netns import Netns, in_netns
from node.errors import UsageError

MAX_CHAIN_CHARS = 28  # iptables' limit on chain names
RESTORE = ["iptables-restore", "-w", "--noflush"]
RESTORE6 = ["ip6tables-restore", "-w", "--noflush"]
RESTORE_TIMEOUT_S = 30


@dataclass(frozen=True)
class ChainKind:
    """One backend's chain: name prefix, the built-in chain it hooks into, its ledger group and key prefix, what
    it is for (shown in the ledger's `what`), and the IP family it filters (4: iptables, 6: ip6tables)."""

    prefix: str
    hook_into: str
    group: str
    key_prefix: str
    purpose: str = ""
    family: int = 4

    def v6(self) -> "ChainKind":
        """The same chain for IPv6: built by ip6tables, its ledger keys `<key_prefix>6:...`, the same group."""
        return replace(self, family=6, key_prefix=f"{self.key_prefix}6")

    @property
    def tool(self) -> str:
        return "ip6tables" if self.family == 6 else "iptables"

    @property
    def restore(self) -> list[str]:
        """The restore command of this family (`RESTORE` or `RESTORE6`)."""
        return RESTORE6 if self.family == 6 else RESTORE

    def name(self, run_id: str) -> str:
        """The chain of `run_id`. Raises `UsageError` when the run id makes it longer than iptables allows."""
        name = f"{self.prefix}-{run_id}"
        if len(name) > MAX_CHAIN_CHARS:
            raise UsageError(f"run id {run_id!r} is too long for an iptables chain name")
        return name

    def entry(self, run_id: str, ns: Netns) -> Entry:
        """The ledger entry for this chain and its hook in `ns`."""
        chain = self.name(run_id)
        purpose = f" ({self.purpose})" if self.purpose else ""
        host = f"{ns.host}:" if ns.host else ""
        return Entry(group=self.group, key=f"{self.key_prefix}:{host}{ns.inode}:{chain}", node=ns.node, pid=ns.pid,
                     netns_ino=ns.inode if ns.pid is not None else None, host=ns.host or None,
                     what=f"{self.tool} chain {chain}{purpose} hooked in {self.hook_into}",
                     undo=[{"argv": in_netns(ns.pid, self.restore), "input": remove_input(chain, self.hook_into)}],
                     present={"argv": in_netns(ns.pid, [self.tool, "-w", "-C", self.hook_into, "-j", chain])})


PARTITION = ChainKind("SL", "INPUT", "partition", "partition")
PARTITION6 = PARTITION.v6()
STATLOSS = ChainKind("SLL", "OUTPUT", "statloss", "statloss", "statistic loss")
QUEUE = ChainKind("SLQ", "OUTPUT", "shaper", "shaper-chain", "NFQUEUE to the shaper")
QUEUE6 = QUEUE.v6()
BRIDGE = ChainKind("SLB", "FORWARD", "partition", "partition-bridge", "cuts on the data bridge")
BRIDGE6 = BRIDGE.v6()


def restore_input(chain: str, rules: Sequence[str], hook_into: str | None = None) -> str:
    """The `iptables-restore --noflush` input making `chain` hold exactly `rules` (rule specs without `-A chain`,
    e.g. `-s 10.0.0.3/32 -j DROP`); with `hook_into`, it also inserts the chain at the top of that chain."""
    lines = ["*filter", f":{chain} - [0:0]", *(f"-A {chain} {rule}" for rule in rules)]
    if hook_into is not None:
        lines.append(f"-I {hook_into} 1 -j {chain}")
    return "\n".join([*lines, "COMMIT"]) + "\n"


def remove_input(chain: str, hook_into: str) -> str:
    """The `iptables-restore --noflush` input removing the hook and the chain together (fails if absent)."""
    return f"*filter\n-D {hook_into} -j {chain}\n:{chain} - [0:0]\n-X {chain}\nCOMMIT\n"


Targets = Sequence[tuple[Netns, Sequence[str]]]


def apply(ledger: Ledger, kind: ChainKind, run_id: str, targets: Targets) -> None:
    """Make each namespace's chain hold exactly its rules, in every namespace at once (`apply_kinds` with one
    kind).

    Rules for a namespace: recorded in the ledger (all in one write) before one `iptables-restore` fills the
    chain, creating and hooking it when the ledger holds none there. The restores are started first and handed
    their inputs together (`proc.run_armed`), so the namespaces switch within a moment of each other rather than
    one process start apart (`make bench` reads the skew from probe traffic). No rules: the chain is removed
    where the ledger holds one, nothing happens where it does not. Raises `CommandFailed` when iptables refuses.
    """
    apply_kinds(ledger, run_id, [(kind, targets)])


def apply_kinds(ledger: Ledger, run_id: str, kinds: Sequence[tuple[ChainKind, Targets]]) -> None:
    """`apply` for several kinds (the IPv4 and IPv6 chains of a dual-stack partition): every entry recorded in
    one write, every restore of every kind released together."""
    filled, emptied = [], set()
    for kind, targets in kinds:
        held = {e.key for e in ledger.outstanding(lambda e: e.group == kind.group)}
        for ns, rules in targets:
            entry = kind.entry(run_id, ns)
            if not rules:
                emptied |= {entry.key} & held
                continue
            text = restore_input(kind.name(run_id), rules, hook_into=None if entry.key in held else kind.hook_into)
            filled.append((ns, kind.restore, text, entry))
    if emptied:
        ledger.heal(lambda e: e.key in emptied)
    ledger.record_many([entry for *_, entry in filled])
    restore_together([(ns, argv, text) for ns, argv, text, _ in filled])


def restore_together(jobs: Sequence[tuple[Netns, list[str], str]]) -> None:
    """One restore (`argv`: `RESTORE` or `RESTORE6`) per job (namespace, argv, input), all started first and
    released together (`proc.run_armed`); the namespaces of each remote host by one script there, hosts in
    parallel with this machine's. Raises `CommandFailed` when one is refused."""
    local = [(in_netns(ns.pid, argv), text) for ns, argv, text in jobs if ns.remote is None]
    by_host: dict[str, list[tuple[Netns, list[str], str]]] = {}
    for ns, argv, text in jobs:
        if ns.remote is not None:
            by_host.setdefault(ns.host, []).append((ns, argv, text))
    if not by_host:
        proc.run_armed(local, timeout_s=RESTORE_TIMEOUT_S)
        return
    with ThreadPoolExecutor(max_workers=len(by_host) + 1) as pool:
        futures = [pool.submit(_restore_on_host, host_jobs) for host_jobs in by_host.values()]
        if local:
            futures.append(pool.submit(proc.run_armed, local, timeout_s=RESTORE_TIMEOUT_S))
        for future in futures:
            future.result()


def _restore_on_host(jobs: Sequence[tuple[Netns, list[str], str]]) -> None:
    """The restores of one remote host's namespaces, started together by one shell there; fails when one does."""
    lines = ["fail=0", "pids="]
    for i, (ns, argv, text) in enumerate(jobs):
        marker = f"SPLITLAB_RESTORE_{i}"
        lines += [f"{shlex.join(in_netns(ns.pid, argv))} <<'{marker}' &", text.rstrip("\n"), marker,
                  'pids="$pids $!"']
    lines += ["for p in $pids; do wait $p || fail=1; done", "exit $fail"]
    host = jobs[0][0].remote
    host.run_script("\n".join(lines) + "\n", timeout_s=RESTORE_TIMEOUT_S,
                    what=f"iptables-restore in {len(jobs)} namespace(s)")


def remove(ledger: Ledger, kind: ChainKind, run_id: str, node: str | None = None) -> int:
    """Remove the run's chains of this kind that the ledger holds (of `node` only, when given), in every
    namespace they were recorded in; returns how many entries were settled. Idempotent."""
    suffix = ":" + kind.name(run_id)
    report = ledger.heal(lambda e: e.group == kind.group and e.key.startswith(kind.key_prefix + ":")
                         and e.key.endswith(suffix) and (node is None or e.node == node))
    return len(report.settled)
