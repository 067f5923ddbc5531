"""Pure random loss in the kernel: `iptables -m statistic --mode random` in the sender's namespace.

The fallback for loss when neither netem nor NFQUEUE is there, and the cheapest loss when forced
(`backend="iptables"`). Its randomness is the kernel's, so it is the one fault splitlab cannot seed; the
controller says so when it uses it. Rules live in chain `SLL-<run>` hooked into OUTPUT, one per shaped peer,
created and removed (with the hook) by one `iptables-restore`, recorded in the ledger first.
"""
from __future__ import annotations

from typing import Mapping

from chaos.ledger import Entry, Ledger, in_netns
from chaos.netns import Netns
from node.errors import UsageError

GROUP = "statloss"


def chain_name(run_id: str) -> str:
    name = f"SLL-{run_id}"
    if len(name) > 28:
        raise UsageError(f"run id {run_id!r} is too long for an iptables chain name")
    return name


def restore_input(chain: str, loss_pct: Mapping[str, float], hook: bool) -> str:
    """Rules dropping UDP toward each destination IP with its probability."""
    lines = ["*filter", f":{chain} - [0:0]"]
    lines += [f"-A {chain} -d {ip}/32 -p udp -m statistic --mode random --probability {pct / 100:.6f} -j DROP"
              for ip, pct in sorted(loss_pct.items())]
    if hook:
        lines.append(f"-I OUTPUT 1 -j {chain}")
    return "\n".join(lines + ["COMMIT"]) + "\n"


def _entry(run_id: str, ns: Netns) -> Entry:
    chain = chain_name(run_id)
    return Entry(group=GROUP, key=f"{GROUP}:{ns.inode}:{chain}", node=ns.node, pid=ns.pid, netns_ino=ns.inode,
                 what=f"iptables chain {chain} (statistic loss) hooked in OUTPUT",
                 undo=[{"argv": in_netns(ns.pid, ["iptables-restore", "-w", "--noflush"]),
                        "input": f"*filter\n-D OUTPUT -j {chain}\n:{chain} - [0:0]\n-X {chain}\nCOMMIT\n"}],
                 present={"argv": in_netns(ns.pid, ["iptables", "-w", "-C", "OUTPUT", "-j", chain])})


def apply(ledger: Ledger, run_id: str, ns: Netns, loss_pct: Mapping[str, float]) -> None:
    """Make `ns`'s node drop UDP toward each IP of `loss_pct` with that chance; an empty mapping removes it all."""
    entry = _entry(run_id, ns)
    if not loss_pct:
        ledger.heal(lambda e: e.key == entry.key)
        return
    hooked = any(e.key == entry.key for e in ledger.outstanding(lambda e: e.group == GROUP))
    ledger.record(entry)
    ns.exec(["iptables-restore", "-w", "--noflush"], input_text=restore_input(chain_name(run_id), loss_pct,
                                                                             hook=not hooked))
