"""Link faults in the kernel with tc netem, applied through pyroute2, where `sch_netem` exists (not on every
kernel: then the NFQUEUE shaper serves).

On the sender's data interface, inside its network namespace:

    htb 1: (root, no default class: unclassified traffic leaves at once, untouched)
     +- class 1:10 (rate far above the link's) -- netem 10: (the fault toward the first peer)
     +- class 1:11 ...                          -- netem 11: (the next peer)
    u32 filters: UDP toward peer IP/32 -> its class

so only the data traffic toward the shaped peers meets netem; the control network is another interface and is
never touched. `plan` builds the requests as data (pure, unit-tested) from the faults and what the interface
holds now (`installed`, read from the kernel); `apply` records the ledger entry first (its undo is
`tc qdisc del dev IF root`, replayable after the controller died), then sends the requests with one pyroute2
`IPRoute` bound to the node's namespace. When a request fails, the root qdisc is removed again so that nothing
half-built stays, and the error names the request.

A change is made in place, never by removing the tree and building it again (which would let every link run
unshaped, and lose what netem holds, in between): a peer keeps its class for as long as it is shaped, its netem
leaf is changed with `replace` (tc qdisc replace: the kernel's netem_change on the live qdisc), new peers get
a free class, leaf and filter, and peers no longer shaped lose their filter and class. netem_change keeps an
option whose attribute is absent (correlation, reordering, corruption, rate, the distribution table), so every
request carries all of them, zeros included, and a delay with jitter always carries a table: uniform jitter
sends `UNIFORM_TABLE`, netem's own uniform as a table, because a table once loaded cannot be unloaded.

htb rather than the classic `prio` root: prio allows 16 bands (13 peers), htb any number of classes, and the
classifying part (htb, u32) also exists on kernels without netem, so it can be tested there.

pyroute2 0.9 leaves netem's delay distribution table (TCA_NETEM_DELAY_DIST) unimplemented; `NetemWithTable`
adds exactly that attribute to pyroute2's own netem plugin and is registered in its plugin table.
"""
from __future__ import annotations

import errno
import ipaddress
import itertools
import os
import socket
import struct
from dataclasses import dataclass, field
from typing import Any, Mapping

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.tcmsg import plugins as tc_plugins
from pyroute2.netlink.rtnl.tcmsg import sched_netem

from chaos.faults.grudge import DEFAULT_LIMIT_PKTS, LinkFault
from chaos.host.ledger import Entry, Ledger
from chaos.host.netns import Netns, in_netns
from chaos.net.shaper import disttable
from node.errors import EnvironmentProblem

GROUP = "netem"
ROOT_HANDLE = 0x10000  # 1:
FIRST_MINOR = 0x10  # classes 1:10, 1:11, ... and their netem leaves 10:, 11:, ...
CLASS_RATE = "10gbit"  # far above a veth's real rate: htb only classifies here, netem shapes
ETH_P_IP = 0x0800
FILTER_PRIO = 1
IPPROTO_UDP_KEY = "0x00110000/0x00ff0000+8"  # u32: IP header byte 9 (protocol) == 17
IP_DST_OFFSET = 16  # u32: the destination address, the key that names a filter's peer
# netem's uniform jitter (delay +- jitter) as a table: 4096 values evenly spread over (-DIST_SCALE, DIST_SCALE)
UNIFORM_TABLE = tuple(range(-disttable.DIST_SCALE + 2, disttable.DIST_SCALE, 4))
# what netem_change must hear even when zero: it keeps the old value of an absent attribute
ZERO_OPTIONS = {"TCA_NETEM_CORR": {"delay_corr": 0, "loss_corr": 0, "dup_corr": 0},
                "TCA_NETEM_REORDER": {"prob_reorder": 0, "corr_reorder": 0},
                "TCA_NETEM_CORRUPT": {"prob_corrupt": 0, "corr_corrupt": 0},
                "TCA_NETEM_RATE": {"rate": 0, "packet_overhead": 0, "cell_size": 0, "cell_overhead": 0}}


# --- pyroute2 extension: netem with a delay distribution table ----------------------------------------------------
class _netem_options(sched_netem.options):
    nla_map = tuple(("TCA_NETEM_DELAY_DIST", "cdata") if name == "TCA_NETEM_DELAY_DIST" else (name, kind)
                    for name, kind in sched_netem.options.nla_map)


class NetemWithTable:
    """pyroute2's netem plugin plus `delay_dist` (the table's values), sent as TCA_NETEM_DELAY_DIST, every option
    attribute sent also when zero (`ZERO_OPTIONS`: a replace must reset what it does not set), and `rate` kept
    out of the top-level TCA_RATE attribute (pyroute2 0.9.7 sends it there too, which fails to encode; its htb
    and tbf plugins drop it the same way)."""

    parent = sched_netem.parent
    options = _netem_options

    @staticmethod
    def get_parameters(kwarg: dict[str, Any]) -> dict[str, Any]:
        opts = sched_netem.get_parameters(kwarg)
        present = {name for name, _ in opts["attrs"]}
        opts["attrs"] += [[name, dict(zero)] for name, zero in ZERO_OPTIONS.items() if name not in present]
        dist = kwarg.get("delay_dist")
        if dist:
            opts["attrs"].append(["TCA_NETEM_DELAY_DIST", struct.pack(f"={len(dist)}h", *dist)])
        return opts

    @staticmethod
    def fix_request(request: dict[str, Any]) -> None:
        request.pop("rate", None)


tc_plugins["netem"] = NetemWithTable


# --- the plan ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    """One `IPRoute.tc(command, kind, ...)` call (`kind` None: pyroute2's htb plugin cannot encode a class
    deletion, and the kernel needs no kind for it); `what` says it in tc's words for errors and logs."""

    command: str
    kind: str | None
    what: str
    kwargs: dict[str, Any] = field(default_factory=dict)


def netem_kwargs(fault: LinkFault) -> dict[str, Any]:
    """pyroute2's netem parameters for a link fault (times in microseconds, shares in percent, `limit` in
    packets: the fault's `limit_pkts`, netem's own default of 1000 unless set)."""
    kw: dict[str, Any] = {"limit": fault.limit_pkts}
    if fault.delay_ms or fault.jitter_ms:
        kw["delay"] = round(fault.delay_ms * 1000)
    if fault.jitter_ms:
        kw["jitter"] = round(fault.jitter_ms * 1000)
        kw["delay_dist"] = UNIFORM_TABLE if fault.distribution == "uniform" else disttable.table(fault.distribution)
    for name, value in (("loss", fault.loss_pct), ("duplicate", fault.duplicate_pct),
                        ("prob_reorder", fault.reorder_pct), ("prob_corrupt", fault.corrupt_pct),
                        ("delay_corr", fault.delay_corr_pct)):
        if value:
            kw[name] = value
    if fault.rate_kbit:
        kw["rate"] = round(fault.rate_kbit * 1000 / 8)  # bytes per second
    return kw


def describe(fault: LinkFault) -> str:
    """The fault in tc's netem words (`delay 20ms 5ms distribution normal loss 1%`), for errors and logs; the limit
    only when it is not tc's default (1000, ours too)."""
    words: list[str] = [] if fault.limit_pkts == DEFAULT_LIMIT_PKTS else ["limit", str(fault.limit_pkts)]
    if fault.delay_ms or fault.jitter_ms:
        words += ["delay", f"{fault.delay_ms:g}ms"] + ([f"{fault.jitter_ms:g}ms"] if fault.jitter_ms else [])
        words += [f"{fault.delay_corr_pct:g}%"] if fault.delay_corr_pct else []
        words += ["distribution", fault.distribution] if fault.distribution != "uniform" else []
    for name, value in (("loss", fault.loss_pct), ("duplicate", fault.duplicate_pct),
                        ("reorder", fault.reorder_pct), ("corrupt", fault.corrupt_pct)):
        if value:
            words += [name, f"{value:g}%"]
    if fault.rate_kbit:
        words += ["rate", f"{fault.rate_kbit:g}kbit"]
    return " ".join(words)


def _handle(major: int, minor: int = 0) -> int:
    return (major << 16) | minor


@dataclass(frozen=True)
class Installed:
    """What an interface holds now: our root (htb 1:) or not, and per shaped peer IP the minor of its class
    (1:minor, netem leaf minor:) and the handle of its u32 filter."""

    root: bool = False
    peers: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def _minors(faults: Mapping[str, LinkFault], kept: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """Class minors for the shaped peers: a peer keeps its class; new peers, in address order, take the lowest
    free minors from FIRST_MINOR on."""
    taken = {minor for minor, _ in kept.values()}
    free = (m for m in itertools.count(FIRST_MINOR) if m not in taken)
    minors = {ip: kept[ip][0] for ip in faults if ip in kept}
    for ip in sorted((ip for ip in faults if ip not in kept), key=ipaddress.IPv4Address):
        minors[ip] = next(free)
    return minors


def plan(ifname: str, faults: Mapping[str, LinkFault], installed: Installed = Installed()) -> list[Request]:
    """The requests that make `ifname`, holding `installed`, give each destination IP of `faults` its netem leaf
    (deterministic: the same faults and state give the same plan). Nothing is removed and rebuilt: peers no
    longer shaped lose their filter and class first, each shaped peer's class and leaf are replaced (created,
    or changed in place), new peers get their filter last. Raises `UsageError` (through LinkFault/ipaddress
    checks) for a bad address."""
    requests = []
    if not installed.root:
        requests.append(Request("add", "htb", f"qdisc add dev {ifname} root handle 1: htb default 0",
                                {"handle": ROOT_HANDLE, "parent": 0xFFFFFFFF, "default": 0}))
    kept = {ip: slot for ip, slot in installed.peers.items() if ip in faults}
    for ip, (minor, filter_handle) in sorted(installed.peers.items(), key=lambda item: item[1]):
        if ip in kept:
            continue
        classid = _handle(1, minor)
        requests.append(Request("del-filter", "u32", f"filter del dev {ifname} parent 1: protocol ip prio "
                                f"{FILTER_PRIO} handle {filter_handle >> 20:x}::{filter_handle & 0xFFF:x} u32",
                                {"handle": filter_handle, "parent": ROOT_HANDLE, "prio": FILTER_PRIO,
                                 "protocol": ETH_P_IP, "target": classid}))
        requests.append(Request("del-class", None, f"class del dev {ifname} classid 1:{minor:x}",
                                {"handle": classid, "parent": ROOT_HANDLE}))
    minors = _minors(faults, kept)
    for ip, minor in sorted(minors.items(), key=lambda item: item[1]):
        classid = _handle(1, minor)
        requests.append(Request("replace-class", "htb", f"class replace dev {ifname} parent 1: classid "
                                f"1:{minor:x} htb rate {CLASS_RATE}",
                                {"handle": classid, "parent": ROOT_HANDLE, "rate": CLASS_RATE}))
        requests.append(Request("replace", "netem", f"qdisc replace dev {ifname} parent 1:{minor:x} handle "
                                f"{minor:x}: netem {describe(faults[ip])}",
                                {"handle": _handle(minor), "parent": classid, **netem_kwargs(faults[ip])}))
        if ip in kept:
            continue
        dst = int(ipaddress.IPv4Address(ip))
        requests.append(Request("add-filter", "u32", f"filter add dev {ifname} parent 1: protocol ip prio "
                                f"{FILTER_PRIO} u32 match ip dst {ip}/32 match ip protocol 17 0xff flowid 1:{minor:x}",
                                {"parent": ROOT_HANDLE, "prio": FILTER_PRIO, "protocol": ETH_P_IP,
                                 "target": classid, "keys": [f"0x{dst:08x}/0xffffffff+{IP_DST_OFFSET}",
                                                             IPPROTO_UDP_KEY]}))
    return requests


# --- applying it ---------------------------------------------------------------------------------------------------
def open_route(pid: int) -> IPRoute:
    """A pyroute2 `IPRoute` bound to the network namespace of `pid` (flags=0: open it, never create one)."""
    try:
        return IPRoute(netns=f"/proc/{pid}/ns/net", flags=0)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot open a netlink socket in the namespace of pid {pid}: {exc}",
                                 hint="the controller must run as root on the Docker host") from None


def interface_of(ipr: IPRoute, ip: str, where: str) -> tuple[int, str]:
    """(index, name) of the interface holding `ip`. Raises `EnvironmentProblem`."""
    for addr in ipr.get_addr(family=socket.AF_INET):
        if addr.get_attr("IFA_ADDRESS") == ip:
            index = addr["index"]
            return index, ipr.get_links(index)[0].get_attr("IFLA_IFNAME")
    raise EnvironmentProblem(f"no interface with {ip} in {where}")


def has_root_qdisc(ipr: IPRoute, index: int) -> bool:
    """Whether the interface has our root (htb 1:) right now."""
    return any(q["parent"] == 0xFFFFFFFF and q["handle"] == ROOT_HANDLE and q.get_attr("TCA_KIND") == "htb"
               for q in ipr.get_qdiscs(index=index))


def u32_destination(selector: Any) -> str | None:
    """The destination IP a u32 filter's selector (TCA_U32_SEL, as dumped) matches exactly, or None.

    The keys are read from the attribute's bytes (struct tc_u32_sel, 16 bytes, then struct tc_u32_key
    {be32 mask, be32 val, int off, int offmask} each): pyroute2 0.9.7 decodes them from 4 bytes too early."""
    start = selector.offset + 4 + 16  # the attribute's header, then the selector's fixed fields
    for i in range(selector["nkeys"]):
        mask, value = struct.unpack_from(">II", selector.data, start + 16 * i)
        (offset,) = struct.unpack_from("=i", selector.data, start + 16 * i + 8)
        if mask == 0xFFFFFFFF and offset == IP_DST_OFFSET:
            return str(ipaddress.IPv4Address(value))
    return None


def installed(ipr: IPRoute, index: int) -> Installed:
    """What the interface holds now (see `Installed`): our root and the peers its u32 filters send to a class."""
    if not has_root_qdisc(ipr, index):
        return Installed()
    peers = {}
    for msg in ipr.get_filters(index=index, parent=ROOT_HANDLE):
        options = msg.get_attr("TCA_OPTIONS")
        classid = options.get_attr("TCA_U32_CLASSID") if options is not None else None
        selector = options.get_attr("TCA_U32_SEL") if classid is not None else None
        ip = u32_destination(selector) if selector is not None else None
        if ip is not None and classid >> 16 == 1:
            peers[ip] = (classid & 0xFFFF, msg["handle"])
    return Installed(True, peers)


def remove_root(ipr: IPRoute, index: int) -> None:
    """Delete the interface's root qdisc (and with it every class, leaf and filter) if it is ours."""
    if has_root_qdisc(ipr, index):
        ipr.tc("del", index=index, handle=ROOT_HANDLE, parent=0xFFFFFFFF)


def send(ipr: IPRoute, index: int, requests: list[Request], where: str) -> None:
    """Send `requests` in order; on the first failure remove the root again (nothing half-built stays) and
    raise `EnvironmentProblem` naming the refused request."""
    request = requests[0]
    try:
        for request in requests:
            ipr.tc(request.command, request.kind, index=index, **request.kwargs)
    except NetlinkError as exc:
        remove_root(ipr, index)
        hint = ("this kernel has no sch_netem: use --backend nfqueue ('splitlab doctor' shows the backends)"
                if request.kind == "netem" and exc.code == errno.ENOENT else None)
        raise EnvironmentProblem(f"{where}: the kernel refused '{request.what}': {os.strerror(exc.code)}",
                                 hint=hint) from None
    except BaseException:
        remove_root(ipr, index)
        raise


def _entry(ns: Netns, ifname: str) -> Entry:
    return Entry(group=GROUP, key=f"{GROUP}:{ns.inode}:{ifname}", node=ns.node, pid=ns.pid, netns_ino=ns.inode,
                 what=f"tc htb+netem qdiscs on {ifname}",
                 undo=[in_netns(ns.pid, ["tc", "qdisc", "del", "dev", ifname, "root"])],
                 present={"argv": in_netns(ns.pid, ["tc", "qdisc", "show", "dev", ifname]),
                          "contains": "qdisc htb 1:"})


def apply(ledger: Ledger, ns: Netns, data_ip: str, faults: Mapping[str, LinkFault]) -> None:
    """Give `ns`'s node exactly these netem faults toward these IPs; an empty mapping removes them."""
    with open_route(ns.pid) as ipr:
        index, ifname = interface_of(ipr, data_ip, f"{ns.node}'s namespace")
        entry = _entry(ns, ifname)
        if not faults:
            ledger.heal(lambda e: e.key == entry.key)
            return
        requests = plan(ifname, faults, installed(ipr, index))
        ledger.record(entry)
        try:
            send(ipr, index, requests, f"node {ns.node}")
        except EnvironmentProblem:
            ledger.heal(lambda e: e.key == entry.key)
            raise


# --- the capability probe -------------------------------------------------------------------------------------------
SELF_TEST_FAULT = LinkFault(delay_ms=1, jitter_ms=1, delay_corr_pct=10, distribution="normal", loss_pct=1,
                            duplicate_pct=1, reorder_pct=1, corrupt_pct=1, rate_kbit=100_000)


def self_test() -> None:
    """Build the whole tree, every netem option included, on a veth pair in the current network namespace
    (`splitlab doctor` runs this under `unshare --net`), then remove it. Raises `EnvironmentProblem`."""
    with IPRoute() as ipr:
        try:
            ipr.link("add", ifname="sl-netem", kind="veth", peer="sl-netem-peer")
            index = ipr.link_lookup(ifname="sl-netem")[0]
            ipr.link("set", index=index, state="up")
            ipr.addr("add", index=index, address="10.255.255.1", prefixlen=30)
        except NetlinkError as exc:
            raise EnvironmentProblem(f"the netem self-test cannot set up its veth pair: {os.strerror(exc.code)}",
                                     hint="run it in a network namespace of its own, as root") from None
        send(ipr, index, plan("sl-netem", {"10.255.255.2": SELF_TEST_FAULT}), "the netem self-test")
        remove_root(ipr, index)


if __name__ == "__main__":
    import sys

    try:
        self_test()
    except EnvironmentProblem as exc:
        print(exc.message, file=sys.stderr)  # doctor shows this line; its own hint names the shaper
        sys.exit(1)
    print("netem: htb, u32 and netem with every option (distribution table included) work here")
