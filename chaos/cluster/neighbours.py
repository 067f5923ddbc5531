"""The kernel's neighbour tables (ARP, NDP) sized for a run: one table for every network namespace of the machine.

Every node's namespace keeps a neighbour entry for each peer it sends to, so a cluster of N nodes needs about
N x N entries, and the kernel counts them against one limit for the whole machine (`gc_thresh3` of
`net.ipv4.neigh.default`, 1,024 by default; `net.ipv6.neigh.default` for NDP). Above it the kernel refuses new
entries ("neighbor table overflow" in dmesg) and drops the datagrams that needed one, counted only as the
senders' `UdpSndbufErrors`: at 50 nodes most members then never hear most others, and `up` fails however long it
waits. `ensure(nodes)` raises the limits to what the run needs (never lowers them) before the containers start;
the bed hosts of a multi-host run on this machine share its kernel, so one call covers them.

`needed(nodes)` is a function of the count only, so the sizing is unit-tested; `ensure` reads and writes the
sysctl files under `root` (the real /proc/sys unless a test passes another directory). `raise_script(nodes)` is the
same as POSIX shell for the hosts of a multi-host run (`chaos.hosts.multi`): on a host with its own kernel it
raises the IPv4 limits; where the files cannot be written (a bed host, a container on this machine's kernel,
which `ensure` already sized) it leaves them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from node.errors import EnvironmentProblem

PROC_SYS = Path("/proc/sys")
FAMILIES = {"ipv4": "net/ipv4/neigh/default", "ipv6": "net/ipv6/neigh/default"}
SPARE_ENTRIES = 256  # the host's own neighbours (the control bridge's, the machine's network)


@dataclass(frozen=True)
class Limits:
    """The three thresholds of one table: no collection below `gc_thresh1`, a collection of stale entries above
    `gc_thresh2`, nothing above `gc_thresh3`."""

    gc_thresh1: int
    gc_thresh2: int
    gc_thresh3: int


def needed(nodes: int) -> Limits:
    """The limits a run of `nodes` needs: every node's entries for all its peers on the data network and the
    control network's own, twice over for a second run, plus `SPARE_ENTRIES`."""
    entries = 2 * nodes * (nodes + 1) + SPARE_ENTRIES
    return Limits(gc_thresh1=entries // 4, gc_thresh2=entries // 2, gc_thresh3=entries)


def room_for(gc_thresh3: int) -> int:
    """The largest run whose `needed` limit fits under `gc_thresh3` (0 when not even one node's does)."""
    nodes = 0
    while needed(nodes + 1).gc_thresh3 <= gc_thresh3:
        nodes += 1
    return nodes


def read(root: Path, family: str) -> Limits:
    base = root / FAMILIES[family]
    return Limits(*(int((base / f"gc_thresh{i}").read_text()) for i in (1, 2, 3)))


def ensure(nodes: int, log: Callable[[str], None], families: tuple[str, ...] = ("ipv4",),
           root: Path = PROC_SYS) -> None:
    """Raise each family's limits to `needed(nodes)` where they are lower (logged), never lower them. Raises
    `EnvironmentProblem` with the sysctl command when a limit is too low and cannot be written (not root)."""
    want = needed(nodes)
    for family in families:
        base = root / FAMILIES[family]
        try:
            have = read(root, family)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot read the kernel's {family} neighbour table limits: {exc}") from None
        # gc_thresh3 first: the kernel refuses a gc_thresh2 above it
        for i in (3, 2, 1):
            name = f"gc_thresh{i}"
            current, target = getattr(have, name), getattr(want, name)
            if current >= target:
                continue
            try:
                (base / name).write_text(str(target))
            except OSError as exc:
                key = FAMILIES[family].replace("/", ".") + "." + name
                raise EnvironmentProblem(
                    f"the kernel's {family} neighbour table allows {current} entries ({name}); {nodes} nodes need "
                    f"{target}: above the limit it drops datagrams and most nodes never hear each other ({exc})",
                    hint=f"as root: sysctl -w {key}={target}") from None
            log(f"{family} neighbour table: {name} raised from {current} to {target} for {nodes} nodes "
                f"(one table serves every container of this machine)")


def raise_script(nodes: int, root: str = str(PROC_SYS)) -> list[str]:
    """Shell lines that raise the IPv4 limits under `root` to `needed(nodes)` where they are lower and writable."""
    want = needed(nodes)
    base = f"{root}/{FAMILIES['ipv4']}"
    return [f'f={base}/gc_thresh{i}; if [ -w "$f" ] && [ "$(cat "$f")" -lt {getattr(want, f"gc_thresh{i}")} ]; '
            f'then echo {getattr(want, f"gc_thresh{i}")} > "$f"; fi' for i in (3, 2, 1)]
