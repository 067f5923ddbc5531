"""Link faults in the kernel with tc netem, where `sch_netem` exists (not on every kernel: then the NFQUEUE
shaper serves).

On the sender's data interface: a root `prio` qdisc with one extra band per shaped peer, a netem qdisc on each
of those bands, and a u32 filter sending UDP toward the peer's data address to its band; everything else keeps
the three default bands, so control traffic is never shaped. One `tc -batch` per node applies it, recorded in
the ledger first with its undo `tc qdisc del dev IF root`.

The commands are `tc` argv rather than pyroute2 calls so that what is applied and what the ledger replays to
undo it are the same kind of thing, readable in the ledger. NOT exercised on the development machine, whose
kernel has neither sch_netem nor sch_prio; the unit tests check the command text only.
"""
from __future__ import annotations

from typing import Mapping

from chaos.grudge import LinkFault
from chaos.ledger import Entry, Ledger, in_netns
from chaos.netns import Netns
from node.errors import EnvironmentProblem, UsageError

GROUP = "netem"
MAX_PEERS = 13  # prio has at most 16 bands; 3 stay the defaults
PRIOMAP = "1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1"


def netem_args(fault: LinkFault) -> list[str]:
    """The netem options of a link fault (`delay 20ms 5ms loss 1% ...`)."""
    args: list[str] = []
    if fault.delay_ms or fault.jitter_ms:
        args += ["delay", f"{fault.delay_ms:g}ms"] + ([f"{fault.jitter_ms:g}ms"] if fault.jitter_ms else [])
    for name, value in (("loss", fault.loss_pct), ("duplicate", fault.duplicate_pct),
                        ("reorder", fault.reorder_pct), ("corrupt", fault.corrupt_pct)):
        if value:
            args += [name, f"{value:g}%"]
    if fault.rate_kbit:
        args += ["rate", f"{fault.rate_kbit:g}kbit"]
    return args


def batch(ifname: str, faults: Mapping[str, LinkFault], replace: bool) -> str:
    """The `tc -batch` input giving `ifname` one netem band per destination IP."""
    if len(faults) > MAX_PEERS:
        raise UsageError(f"netem backend shapes at most {MAX_PEERS} peers per node, asked {len(faults)}",
                         hint="use --backend nfqueue")
    lines = [f"qdisc del dev {ifname} root"] if replace else []
    lines.append(f"qdisc add dev {ifname} root handle 1: prio bands {3 + len(faults)} priomap {PRIOMAP}")
    for i, (ip, fault) in enumerate(sorted(faults.items())):
        band = 4 + i
        lines.append(f"qdisc add dev {ifname} parent 1:{band} handle {10 + i}: netem {' '.join(netem_args(fault))}")
        lines.append(f"filter add dev {ifname} parent 1: protocol ip prio 1 u32 match ip dst {ip}/32 "
                     f"match ip protocol 17 0xff flowid 1:{band}")
    return "\n".join(lines) + "\n"


def interface_of(ns: Netns, ip: str) -> str:
    """The interface holding `ip` inside `ns`. Raises `EnvironmentProblem`."""
    for line in ns.exec(["ip", "-o", "-4", "addr", "show"]).stdout.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[3].split("/")[0] == ip:
            return parts[1].split("@")[0]
    raise EnvironmentProblem(f"no interface with {ip} in {ns.node}'s namespace")


def _entry(ns: Netns, ifname: str) -> Entry:
    return Entry(group=GROUP, key=f"{GROUP}:{ns.inode}:{ifname}", node=ns.node, pid=ns.pid, netns_ino=ns.inode,
                 what=f"tc prio+netem qdiscs on {ifname}",
                 undo=[in_netns(ns.pid, ["tc", "qdisc", "del", "dev", ifname, "root"])],
                 present={"argv": in_netns(ns.pid, ["tc", "qdisc", "show", "dev", ifname]),
                          "contains": "qdisc prio 1:"})


def apply(ledger: Ledger, ns: Netns, data_ip: str, faults: Mapping[str, LinkFault]) -> None:
    """Give `ns`'s node exactly these netem faults toward these IPs; an empty mapping removes them."""
    ifname = interface_of(ns, data_ip)
    entry = _entry(ns, ifname)
    if not faults:
        ledger.heal(lambda e: e.key == entry.key)
        return
    installed = any(e.key == entry.key for e in ledger.outstanding(lambda e: e.group == GROUP))
    ledger.record(entry)
    ns.exec(["tc", "-batch", "-"], input_text=batch(ifname, faults, replace=installed))
