"""The netem backend's requests as data, their netlink encoding by pyroute2 with splitlab's netem plugin (every
option sent, zeros included; the delay distribution table; rate kept out of TCA_RATE), and `apply` changing a
live tree in place (replace) against a model of the kernel's tc state; no root, no kernel."""
import errno
import struct
from dataclasses import dataclass

import pytest
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl.tcmsg import plugins, tcmsg

from chaos.faults.grudge import LinkFault
from chaos.host.ledger import Ledger
from chaos.net import netem
from chaos.net.shaper import disttable
from node.errors import EnvironmentProblem

ROOT = 0xFFFFFFFF
B, C, D = "10.0.0.9", "10.0.0.10", "10.0.0.3"


def dumped(kind: str | None, handle: int, parent: int, options: dict | None = None) -> tcmsg:
    """A tc message as the kernel would send it (encoded, then decoded by pyroute2)."""
    msg = tcmsg()
    msg["index"], msg["handle"], msg["parent"] = 3, handle, parent
    msg["attrs"] = [["TCA_KIND", kind]] + ([["TCA_OPTIONS", options]] if options is not None else [])
    msg.encode()
    back = tcmsg(msg.data)
    back.decode()
    return back


def encoded_options(request: netem.Request) -> tcmsg:
    """`request` encoded as the kernel would receive it, then decoded again."""
    return dumped(request.kind, request.kwargs["handle"], request.kwargs["parent"],
                  plugins["netem"].get_parameters(request.kwargs))


def netem_request(fault: LinkFault) -> netem.Request:
    return [r for r in netem.plan("eth0", {D: fault}) if r.kind == "netem"][0]


def test_first_plan_is_an_htb_tree_with_one_class_netem_leaf_and_udp_filter_per_peer_in_address_order():
    plan = netem.plan("eth0", {C: LinkFault(loss_pct=3), B: LinkFault(delay_ms=10)})
    assert [r.what for r in plan] == [
        "qdisc add dev eth0 root handle 1: htb default 0",
        "class replace dev eth0 parent 1: classid 1:10 htb rate 10gbit",
        "qdisc replace dev eth0 parent 1:10 handle 10: netem delay 10ms",
        "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.9/32 match ip protocol 17 0xff "
        "flowid 1:10",
        "class replace dev eth0 parent 1: classid 1:11 htb rate 10gbit",
        "qdisc replace dev eth0 parent 1:11 handle 11: netem loss 3%",
        "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.10/32 match ip protocol 17 0xff "
        "flowid 1:11"]
    assert plan[0].kwargs["default"] == 0  # unclassified traffic (everything not toward a shaped peer) is untouched
    first_filter = plan[3].kwargs
    assert first_filter["target"] == 0x10010 and first_filter["keys"] == ["0x0a000009/0xffffffff+16",
                                                                          netem.IPPROTO_UDP_KEY]
    assert plan[2].kwargs["parent"] == 0x10010 and plan[2].kwargs["handle"] == 0x100000


def test_a_change_keeps_the_root_and_each_kept_peers_class_and_filter_and_replaces_its_leaf():
    installed = netem.Installed(root=True, peers={B: (0x10, 0x80000800), C: (0x11, 0x80000801)})
    plan = netem.plan("eth0", {C: LinkFault(loss_pct=5), D: LinkFault(delay_ms=1)}, installed)
    assert [r.what for r in plan] == [
        "filter del dev eth0 parent 1: protocol ip prio 1 handle 800::800 u32",  # B: no longer shaped
        "class del dev eth0 classid 1:10",
        "class replace dev eth0 parent 1: classid 1:10 htb rate 10gbit",  # D, new, takes the free class
        "qdisc replace dev eth0 parent 1:10 handle 10: netem delay 1ms",
        "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.3/32 match ip protocol 17 0xff "
        "flowid 1:10",
        "class replace dev eth0 parent 1: classid 1:11 htb rate 10gbit",  # C keeps its class and its filter
        "qdisc replace dev eth0 parent 1:11 handle 11: netem loss 5%"]
    assert plan[0].kwargs["handle"] == 0x80000800 and plan[0].kwargs["target"] == 0x10010
    assert not any(r.command == "del" for r in plan)


def test_netem_parameters_carry_units_correlations_and_the_distribution_table():
    fault = LinkFault(delay_ms=20, jitter_ms=5, delay_corr_pct=25, distribution="pareto", loss_pct=1,
                      duplicate_pct=2, reorder_pct=3, corrupt_pct=4,
                      rate_kbit=1000)
    kw = netem.netem_kwargs(fault)
    assert kw == {"limit": 1000, "delay": 20_000, "jitter": 5_000,
                  "delay_dist": disttable.table("pareto"), "loss": 1, "duplicate": 2, "prob_reorder": 3,
                  "prob_corrupt": 4, "delay_corr": 25, "rate": 125_000}
    assert netem.describe(fault) == ("delay 20ms 5ms 25% distribution pareto loss 1% duplicate 2% "
                                     "reorder 3% corrupt 4% rate 1000kbit")


def test_the_encoded_netem_request_holds_every_option_the_table_and_no_tca_rate():
    fault = LinkFault(delay_ms=20, jitter_ms=5, delay_corr_pct=25, distribution="normal", loss_pct=1,
                      reorder_pct=3, rate_kbit=1000)
    decoded = encoded_options(netem_request(fault))
    options = decoded.get_attr("TCA_OPTIONS")
    assert options["limit"] == 1000 and options["gap"] == 1  # reorder needs gap 1; netem's default limit
    assert options["loss"] == int(0.01 * 0xFFFFFFFF)  # netem's shares are fractions of 2**32 - 1
    assert options["delay"] > options["jitter"] > 0 and options["delay"] == 4 * options["jitter"]
    assert options.get_attr("TCA_NETEM_CORR")["delay_corr"] == int(0.25 * 0xFFFFFFFF)
    assert options.get_attr("TCA_NETEM_REORDER")["prob_reorder"] > 0
    assert options.get_attr("TCA_NETEM_RATE")["rate"] == 125_000
    dist = options.get_attr("TCA_NETEM_DELAY_DIST")
    assert struct.unpack(f"={len(dist) // 2}h", dist) == disttable.table("normal")
    assert decoded.get_attr("TCA_RATE") is None


def test_a_replace_resets_what_it_does_not_set_every_option_goes_out_as_zero():
    """netem_change keeps an option whose attribute is absent: a leaf changed from reorder/corrupt/rate/correlation
    to a plain delay must be told zero for each."""
    options = encoded_options(netem_request(LinkFault(delay_ms=5))).get_attr("TCA_OPTIONS")
    assert options["gap"] == 0 and options["loss"] == 0 and options["duplicate"] == 0 and options["jitter"] == 0
    assert dict(options.get_attr("TCA_NETEM_CORR")) == {"delay_corr": 0, "loss_corr": 0, "dup_corr": 0}
    assert options.get_attr("TCA_NETEM_REORDER")["prob_reorder"] == 0
    assert options.get_attr("TCA_NETEM_CORRUPT")["prob_corrupt"] == 0
    assert options.get_attr("TCA_NETEM_RATE")["rate"] == 0
    assert options.get_attr("TCA_NETEM_DELAY_DIST") is None  # no jitter: netem never reads the table


def test_a_faults_limit_pkts_is_netems_limit_in_the_encoded_request_and_in_tcs_words():
    fault = LinkFault(rate_kbit=2000, limit_pkts=500)
    assert encoded_options(netem_request(fault)).get_attr("TCA_OPTIONS")["limit"] == 500
    assert netem.describe(fault) == "limit 500 rate 2000kbit"
    assert netem.describe(LinkFault(rate_kbit=2000)) == "rate 2000kbit"  # tc's default limit, 1000, unsaid


def test_uniform_jitter_sends_netems_uniform_as_a_table_so_a_replace_unloads_an_earlier_distribution():
    request = netem_request(LinkFault(delay_ms=5, jitter_ms=1))
    dist = encoded_options(request).get_attr("TCA_OPTIONS").get_attr("TCA_NETEM_DELAY_DIST")
    table = struct.unpack(f"={len(dist) // 2}h", dist)
    assert table == netem.UNIFORM_TABLE and len(table) == 4096
    assert sum(table) == 0 and min(table) > -disttable.DIST_SCALE and max(table) < disttable.DIST_SCALE
    steps = {b - a for a, b in zip(table, table[1:])}
    assert steps == {4}  # evenly spread: delay +- jitter, uniform, as netem draws it without a table


def test_a_dumped_u32_filter_names_its_destination():
    keys = [f"0x{0x0A000009:08x}/0xffffffff+16", netem.IPPROTO_UDP_KEY]
    msg = dumped("u32", 0x80000800, 0x10000, plugins["u32"].get_parameters({"target": 0x10010, "keys": keys}))
    options = msg.get_attr("TCA_OPTIONS")
    assert options.get_attr("TCA_U32_CLASSID") == 0x10010
    assert netem.u32_destination(options.get_attr("TCA_U32_SEL")) == B
    only_protocol = dumped("u32", 0x80000801, 0x10000,
                           plugins["u32"].get_parameters({"target": 0x10011, "keys": [netem.IPPROTO_UDP_KEY]}))
    assert netem.u32_destination(only_protocol.get_attr("TCA_OPTIONS").get_attr("TCA_U32_SEL")) is None


# --- apply against a model of the kernel's tc state ----------------------------------------------------------------
class Attrs(dict):
    def get_attr(self, name):
        return self.get(name)


class FakeRoute:
    """The tc state of one interface (index 3, `eth0`, holding 10.0.0.2) and every request sent to it."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.root = False
        self.classes: set[int] = set()
        self.leaves: dict[int, tuple[int, dict]] = {}  # classid -> (handle, netem kwargs)
        self.filters: dict[int, tuple[int, list[str]]] = {}  # handle -> (classid, keys)
        self.next_filter = 0x80000800
        self.calls: list[tuple[str, str | None, int | None, int | None]] = []
        self.fail_on = fail_on

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def get_addr(self, family):
        return [Attrs(index=3, IFA_ADDRESS="10.0.0.2")]

    def get_links(self, index):
        return [Attrs(IFLA_IFNAME="eth0")]

    def get_qdiscs(self, index):
        return [dumped("htb", 0x10000, ROOT)] if self.root else []

    def get_filters(self, index, parent):
        return [dumped("u32", handle, parent, plugins["u32"].get_parameters({"target": target, "keys": keys}))
                for handle, (target, keys) in self.filters.items()]

    def tc(self, command, kind=None, index=None, **kw):
        handle, parent = kw.get("handle"), kw.get("parent")
        self.calls.append((command, kind, handle, parent))
        if self.fail_on is not None and kind == self.fail_on:
            raise NetlinkError(errno.ENOENT)
        if command == "add" and parent == ROOT:
            if self.root:
                raise NetlinkError(errno.EEXIST)
            self.root = True
        elif command == "del" and parent == ROOT:
            self.root, self.classes, self.leaves, self.filters = False, set(), {}, {}
        elif command == "replace-class":
            assert self.root
            self.classes.add(handle)
        elif command == "replace" and kind == "netem":
            assert parent in self.classes
            self.leaves[parent] = (handle, kw)
        elif command == "add-filter":
            self.filters[self.next_filter] = (kw["target"], kw["keys"])
            self.next_filter += 1
        elif command == "del-filter":
            del self.filters[handle]
        elif command == "del-class":
            if any(target == handle for target, _ in self.filters.values()):
                raise NetlinkError(errno.EBUSY)
            self.classes.discard(handle)
            self.leaves.pop(handle, None)
        else:
            raise AssertionError(f"unexpected tc request {command} {kind}")


@dataclass(frozen=True)
class FakeNs:
    node: str = "n1"
    pid: int = 2 ** 22 + 7  # no such process: the ledger settles its entries as namespace-gone, running nothing
    inode: int = 4026532000


def test_apply_changes_a_live_tree_in_place_and_never_removes_it(tmp_path, monkeypatch):
    route = FakeRoute()
    monkeypatch.setattr(netem, "open_route", lambda pid: route)
    ledger, ns = Ledger(tmp_path), FakeNs()
    netem.apply(ledger, ns, "10.0.0.2", {B: LinkFault(delay_ms=10)})
    b_filter = next(iter(route.filters))
    route.calls.clear()

    netem.apply(ledger, ns, "10.0.0.2", {B: LinkFault(delay_ms=20), C: LinkFault(loss_pct=5)})
    assert ("del", None, 0x10000, ROOT) not in route.calls and route.calls[0][0] != "add"  # the tree stays
    assert ("replace", "netem", 0x100000, 0x10010) in route.calls  # B's leaf, changed in place
    assert route.leaves[0x10010] == (0x100000, {**netem.netem_kwargs(LinkFault(delay_ms=20)), "handle": 0x100000,
                                                "parent": 0x10010})
    assert b_filter in route.filters and route.filters[b_filter][0] == 0x10010  # B's traffic never unclassified
    assert [c for c in route.calls if c[0] in ("add-filter", "del-filter")] == [("add-filter", "u32", None, 0x10000)]
    assert route.leaves[0x10011][0] == 0x110000  # C: a class of its own

    route.calls.clear()
    netem.apply(ledger, ns, "10.0.0.2", {C: LinkFault(loss_pct=5)})
    assert [c[0] for c in route.calls] == ["del-filter", "del-class", "replace-class", "replace"]
    assert route.classes == {0x10011} and [t for t, _ in route.filters.values()] == [0x10011]
    assert [e.what for e in ledger.outstanding()] == ["tc htb+netem qdiscs on eth0"]  # one entry throughout


def test_a_refused_request_removes_the_tree_and_settles_the_entry_with_a_hint(tmp_path, monkeypatch):
    route = FakeRoute(fail_on="netem")
    monkeypatch.setattr(netem, "open_route", lambda pid: route)
    ledger = Ledger(tmp_path)
    with pytest.raises(EnvironmentProblem, match=r"the kernel refused 'qdisc replace dev eth0 parent 1:10 handle "
                                                  r"10: netem delay 20ms'") as err:
        netem.apply(ledger, FakeNs(), "10.0.0.2", {B: LinkFault(delay_ms=20)})
    assert "--backend nfqueue" in err.value.hint
    assert not route.root and ledger.outstanding() == []
