"""The netem backend's requests as data, and their netlink encoding by pyroute2 with splitlab's netem plugin
(delay distribution table, rate kept out of TCA_RATE); no root, no kernel."""
import struct

from pyroute2.netlink.rtnl.tcmsg import plugins, tcmsg

from chaos.grudge import LinkFault
from chaos.shaper import disttable, netem


def encoded_options(request: netem.Request) -> tcmsg:
    """`request` encoded as the kernel would receive it, then decoded again."""
    msg = tcmsg()
    msg["index"], msg["handle"], msg["parent"] = 3, request.kwargs["handle"], request.kwargs["parent"]
    msg["attrs"] = [["TCA_KIND", request.kind], ["TCA_OPTIONS", plugins["netem"].get_parameters(request.kwargs)]]
    msg.encode()
    back = tcmsg(msg.data)
    back.decode()
    return back


def test_plan_is_an_htb_tree_with_one_class_netem_leaf_and_udp_filter_per_peer_in_address_order():
    plan = netem.plan("eth0", {"10.0.0.10": LinkFault(loss_pct=3), "10.0.0.9": LinkFault(delay_ms=10)})
    assert [r.what for r in plan] == [
        "qdisc add dev eth0 root handle 1: htb default 0",
        "class add dev eth0 parent 1: classid 1:10 htb rate 10gbit",
        "qdisc add dev eth0 parent 1:10 handle 10: netem delay 10ms",
        "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.9/32 match ip protocol 17 0xff "
        "flowid 1:10",
        "class add dev eth0 parent 1: classid 1:11 htb rate 10gbit",
        "qdisc add dev eth0 parent 1:11 handle 11: netem loss 3%",
        "filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.10/32 match ip protocol 17 0xff "
        "flowid 1:11"]
    assert plan[0].kwargs["default"] == 0  # unclassified traffic (everything not toward a shaped peer) is untouched
    first_filter = plan[3].kwargs
    assert first_filter["target"] == 0x10010 and first_filter["keys"] == ["0x0a000009/0xffffffff+16",
                                                                          netem.IPPROTO_UDP_KEY]
    assert plan[2].kwargs["parent"] == 0x10010 and plan[2].kwargs["handle"] == 0x100000


def test_netem_parameters_carry_units_correlations_and_the_distribution_table():
    fault = LinkFault(delay_ms=20, jitter_ms=5, delay_corr_pct=25, distribution="pareto", loss_pct=1,
                      duplicate_pct=2, reorder_pct=3, corrupt_pct=4,
                      rate_kbit=1000)
    kw = netem.netem_kwargs(fault)
    assert kw == {"limit": netem.NETEM_LIMIT_PACKETS, "delay": 20_000, "jitter": 5_000,
                  "delay_dist": disttable.table("pareto"), "loss": 1, "duplicate": 2, "prob_reorder": 3,
                  "prob_corrupt": 4, "delay_corr": 25, "rate": 125_000}
    assert netem.describe(fault) == ("delay 20ms 5ms 25% distribution pareto loss 1% duplicate 2% "
                                     "reorder 3% corrupt 4% rate 1000kbit")


def test_the_encoded_netem_request_holds_every_option_the_table_and_no_tca_rate():
    fault = LinkFault(delay_ms=20, jitter_ms=5, delay_corr_pct=25, distribution="normal", loss_pct=1,
                      reorder_pct=3, rate_kbit=1000)
    request = [r for r in netem.plan("eth0", {"10.0.0.3": fault}) if r.kind == "netem"][0]
    decoded = encoded_options(request)
    options = decoded.get_attr("TCA_OPTIONS")
    assert options["limit"] == netem.NETEM_LIMIT_PACKETS and options["gap"] == 1  # reorder needs gap 1
    assert options["loss"] == int(0.01 * 0xFFFFFFFF)  # netem's shares are fractions of 2**32 - 1
    assert options["delay"] > options["jitter"] > 0 and options["delay"] == 4 * options["jitter"]
    assert options.get_attr("TCA_NETEM_CORR")["delay_corr"] == int(0.25 * 0xFFFFFFFF)
    assert options.get_attr("TCA_NETEM_REORDER")["prob_reorder"] > 0
    assert options.get_attr("TCA_NETEM_RATE")["rate"] == 125_000
    dist = options.get_attr("TCA_NETEM_DELAY_DIST")
    assert struct.unpack(f"={len(dist) // 2}h", dist) == disttable.table("normal")
    assert decoded.get_attr("TCA_RATE") is None


def test_without_distribution_no_table_is_sent():
    request = [r for r in netem.plan("eth0", {"10.0.0.3": LinkFault(delay_ms=5, jitter_ms=1)}) if r.kind == "netem"][0]
    assert "delay_dist" not in request.kwargs
    assert encoded_options(request).get_attr("TCA_OPTIONS").get_attr("TCA_NETEM_DELAY_DIST") is None

