"""`splitlab up --ipv6` without Docker: the run's ULA /64 and node addresses (chaos.cluster.datanet6), the compose
file of a dual-stack run, the node's reading of IPv6 addresses, the ip6tables chain of a partition (rule text,
ledger entries, heal of both families), probe endpoints, and the IPv6 packets of the shaper, inject and capture
(checked against scapy's own IPv6 codec)."""
import ipaddress
import random
import socket
import struct
from dataclasses import dataclass, field

import pytest

from chaos.cluster import compose, datanet6
from chaos.cluster.model import Cluster, NodeInfo
from chaos.host.ledger import Ledger
from chaos.host.netns import address_family
from chaos.net import iptables, partition
from chaos.net.docker import probe_endpoints
from node import config
from node.errors import EnvironmentProblem, UsageError

IPS = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
IP6S = datanet6.node_addresses("r1", list(IPS))


def test_the_prefix_is_a_ula_slash_64_derived_from_the_run_id():
    prefix = datanet6.ula_prefix("261121-221530-a3f9")
    assert prefix.prefixlen == 64 and prefix.subnet_of(ipaddress.IPv6Network("fd00::/8"))
    assert prefix == datanet6.ula_prefix("261121-221530-a3f9")  # the same run, the same prefix
    assert len({datanet6.ula_prefix(f"run-{i}") for i in range(200)}) == 200  # runs side by side do not clash


def test_node_addresses_are_in_the_prefix_clear_of_the_gateway_and_distinct():
    prefix = datanet6.ula_prefix("r1")
    assert IP6S["n1"] == str(prefix[0x101]) and IP6S["n3"] == str(prefix[0x103])
    assert all(ipaddress.IPv6Address(ip) in prefix and ip != str(prefix[1]) for ip in IP6S.values())
    with pytest.raises(UsageError):
        datanet6.node_address(prefix, 0)
    assert datanet6.addresses_env({"n1": "fd00::101"}, 7100) == "n1=[fd00::101]:7100"


def test_the_compose_file_of_an_ipv6_run_is_dual_stack_with_pinned_addresses():
    doc = compose.render("r1", list(IPS), "img", "/runs/r1", "tok", ipv6=True)
    data = doc["networks"]["data"]
    assert data["enable_ipv6"] is True and data["ipam"]["config"] == [{"subnet": str(datanet6.ula_prefix("r1"))}]
    assert "enable_ipv6" not in doc["networks"]["control"]  # the control network stays IPv4
    n2 = doc["services"]["n2"]
    assert n2["networks"]["data"]["ipv6_address"] == IP6S["n2"]
    assert n2["environment"]["SPLITLAB_ADDRESSES"] == datanet6.addresses_env(IP6S, 7100)


def test_an_ipv4_run_is_unchanged():
    doc = compose.render("r1", list(IPS), "img", "/runs/r1", "tok")
    assert "enable_ipv6" not in doc["networks"]["data"] and "ipam" not in doc["networks"]["data"]
    assert "ipv6_address" not in doc["services"]["n1"]["networks"]["data"]
    assert "SPLITLAB_ADDRESSES" not in doc["services"]["n1"]["environment"]


def test_the_node_reads_bracketed_ipv6_addresses_and_opens_an_ipv6_socket():
    env = {"SPLITLAB_NODE": "n1", "SPLITLAB_RUN": "r1", "SPLITLAB_MEMBERS": "n1,n2", "SPLITLAB_TOKEN": "t",
           "SPLITLAB_ADDRESSES": "n1=[fd00::101]:7100,n2=[fd00::102]:7100"}
    cfg = config.from_env(env)
    assert cfg.data_address("n2") == ("fd00::102", 7100)
    assert cfg.data_family == socket.AF_INET6
    v4 = config.from_env({**env, "SPLITLAB_ADDRESSES": "n1=10.0.0.1:7100"})
    assert v4.data_family == socket.AF_INET and v4.data_address("n1") == ("10.0.0.1", 7100)
    assert config.from_env({k: v for k, v in env.items() if k != "SPLITLAB_ADDRESSES"}).data_family == socket.AF_INET


@dataclass(frozen=True)
class FakeNs:
    node: str
    inode: int
    pid: int = 2 ** 22 + 7  # no such process: heal settles its entries as namespace-gone, running nothing
    host: str = ""
    remote: None = None
    runs: list = field(default_factory=list, compare=False, hash=False)


@pytest.fixture
def namespaces(monkeypatch):
    ns = {name: FakeNs(name, inode) for inode, name in enumerate(IPS, 1)}
    released = []
    monkeypatch.setattr(iptables, "restore_together", lambda jobs: released.append(
        [ns.runs.append((argv, text)) or ns.node for ns, argv, text in jobs]))
    ns["released"] = released
    return ns


def test_ip6tables_rules_drop_a_slash_128():
    assert partition.drop_rules(["fd00::102", "10.0.0.1"]) == ["-s 10.0.0.1/32 -j DROP", "-s fd00::102/128 -j DROP"]


def test_a_dual_stack_cut_fills_both_chains_in_one_release_and_heal_removes_both(tmp_path, namespaces):
    ledger = Ledger(tmp_path)
    ns = {k: v for k, v in namespaces.items() if k in IPS}
    partition.apply(ledger, "r1", {"n2": {"n1"}}, ns, IPS, IP6S)
    assert namespaces["released"] == [["n2", "n2"]]  # both families of n2, released together
    assert ns["n2"].runs == [
        (iptables.RESTORE, "*filter\n:SL-r1 - [0:0]\n-A SL-r1 -s 10.0.0.1/32 -j DROP\n-I INPUT 1 -j SL-r1\nCOMMIT\n"),
        (iptables.RESTORE6, f"*filter\n:SL-r1 - [0:0]\n-A SL-r1 -s {IP6S['n1']}/128 -j DROP\n-I INPUT 1 -j SL-r1\n"
                            "COMMIT\n")]
    entries = ledger.outstanding()
    assert sorted(e.what for e in entries) == ["ip6tables chain SL-r1 hooked in INPUT",
                                               "iptables chain SL-r1 hooked in INPUT"]
    six = next(e for e in entries if e.key.startswith("partition6:"))
    assert six.group == partition.GROUP and six.undo[0]["argv"][-3:] == iptables.RESTORE6
    assert six.present["argv"][-6:] == ["ip6tables", "-w", "-C", "INPUT", "-j", "SL-r1"]
    partition.heal(ledger, "r1")
    assert ledger.outstanding() == []


def test_on_the_bridge_one_chain_of_the_host_cuts_every_link_of_both_families_in_one_release(tmp_path, namespaces):
    ledger = Ledger(tmp_path)
    ns = {k: v for k, v in namespaces.items() if k in IPS}
    host = FakeNs("host", 99, pid=None)
    partition.apply(ledger, "r1", {"n2": {"n1", "n3"}, "n3": {"n1"}}, ns, IPS, IP6S,
                    bridge=partition.DataBridge("br-x", host))
    assert namespaces["released"] == [["host", "host"]] and all(not n.runs for n in ns.values())
    v4, v6 = host.runs
    assert v4 == (iptables.RESTORE, "*filter\n:SLB-r1 - [0:0]\n"
                                     "-A SLB-r1 -i br-x -o br-x -s 10.0.0.1/32 -d 10.0.0.2/32 -j DROP\n"
                                     "-A SLB-r1 -i br-x -o br-x -s 10.0.0.3/32 -d 10.0.0.2/32 -j DROP\n"
                                     "-A SLB-r1 -i br-x -o br-x -s 10.0.0.1/32 -d 10.0.0.3/32 -j DROP\n"
                                     "-I FORWARD 1 -j SLB-r1\nCOMMIT\n")
    assert v6[0] == iptables.RESTORE6 and f"-s {IP6S['n3']}/128 -d {IP6S['n2']}/128 -j DROP" in v6[1]
    entries = sorted(ledger.outstanding(), key=lambda e: e.key)
    assert [e.key for e in entries] == ["partition-bridge6:99:SLB-r1", "partition-bridge:99:SLB-r1"]
    # run where the heal runs (the host), never counted as a namespace that is gone
    assert all(e.pid is None and e.netns_ino is None and e.group == partition.GROUP for e in entries)
    assert entries[1].undo[0]["argv"] == iptables.RESTORE
    assert entries[1].present["argv"] == ["iptables", "-w", "-C", "FORWARD", "-j", "SLB-r1"]


def test_a_bridge_that_does_not_filter_or_is_not_here_leaves_the_cuts_to_the_namespaces(monkeypatch, tmp_path):
    assert partition.data_bridge(None, False) is None
    assert partition.data_bridge("sl-no-such-bridge", False) is None
    monkeypatch.setattr(partition, "BRIDGE_FILTERING", {4: tmp_path / "v4", 6: tmp_path / "v6"})
    (tmp_path / "v4").write_text("1\n")
    (tmp_path / "v6").write_text("0\n")
    assert partition.data_bridge("lo", False) == partition.DataBridge("lo", partition.Netns("host", None))
    assert partition.data_bridge("lo", True) is None  # ip6tables would not see the IPv6 frames
    (tmp_path / "v4").unlink()
    assert partition.data_bridge("lo", False) is None  # no br_netfilter


def test_an_ipv4_partition_touches_no_ip6tables(tmp_path, namespaces):
    ns = {k: v for k, v in namespaces.items() if k in IPS}
    partition.apply(Ledger(tmp_path), "r1", {"n2": {"n1"}}, ns, IPS)
    assert [argv for argv, _ in ns["n2"].runs] == [iptables.RESTORE]


def _cluster(ipv6: bool) -> Cluster:
    nodes = [NodeInfo(n, f"c-{n}", ip, "10.9.0.1", 100 + i, data_ip6=IP6S[n] if ipv6 else "")
             for i, (n, ip) in enumerate(IPS.items())]
    return Cluster("r1", None, "tok", nodes)


def test_probes_use_the_family_the_nodes_talk_over():
    assert probe_endpoints(_cluster(True))["n1"].ip == IP6S["n1"]
    assert probe_endpoints(_cluster(True), ipv6=False)["n1"].ip == "10.0.0.1"
    assert probe_endpoints(_cluster(False))["n1"].ip == "10.0.0.1"
    assert address_family(IP6S["n1"]) == socket.AF_INET6 and address_family("10.0.0.1") == socket.AF_INET


def test_wire_ip_is_the_address_the_nodes_talk_over():
    four, six = _cluster(False), _cluster(True)
    assert [n.wire_ip for n in four.nodes] == list(IPS.values())
    assert [n.wire_ip for n in six.nodes] == list(IP6S.values())


# --- the NFQUEUE shaper over IPv6 ------------------------------------------------------------------------------
from chaos.faults.grudge import LinkFault  # noqa: E402
from chaos.net.backends import choose_backend  # noqa: E402
from chaos.net.shaper import control, ipudp, resend  # noqa: E402
from chaos.net.shaper.spec import ShaperSpec  # noqa: E402

A6, B6 = "fd00::101", "fd00::102"


def udp6(src: str, dst: str, sport: int, dport: int, payload: bytes, checksum: int | None = None) -> bytes:
    """An IPv6/UDP packet built by hand (fixed header, hop limit 64)."""
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    s, d = socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst)
    if checksum is None:
        checksum = ipudp.udp_checksum(s, d, udp)
    udp = udp[:6] + struct.pack("!H", checksum) + udp[8:]
    return struct.pack("!IHBB16s16s", 6 << 28, len(udp), 17, 64, s, d) + udp


def ones_complement_ok(src: str, dst: str, udp: bytes) -> bool:
    """RFC 8200 8.1: the sum over the pseudo header and the UDP segment (checksum included) is 0xFFFF."""
    s, d = socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst)
    return ipudp.checksum(s + d + struct.pack("!I3xB", len(udp), 17) + udp) == 0


def test_the_shaper_parses_ipv6_udp_and_rebuilds_it_with_a_correct_checksum():
    raw = udp6(A6, B6, 7100, 7100, b"SLhello")
    pkt = ipudp.parse(raw)
    assert (pkt.version, pkt.src, pkt.dst, pkt.sport, pkt.dport, pkt.payload, pkt.header_len) == (
        6, A6, B6, 7100, 7100, b"SLhello", 40)
    assert ones_complement_ok(A6, B6, raw[40:])
    longer = ipudp.with_payload(pkt, b"a longer payload")
    assert struct.unpack_from("!H", longer, 4)[0] == 8 + 16 and ipudp.parse(longer).payload == b"a longer payload"
    assert ones_complement_ok(A6, B6, longer[40:]) and longer[:4] == raw[:4] and longer[6:40] == raw[6:40]
    flipped = ipudp.flip_bit(pkt, random.Random(1))
    assert flipped != raw and ones_complement_ok(A6, B6, flipped[40:])
    assert ipudp.parse(raw[:6] + bytes([0]) + raw[7:]) is None  # an extension header (hop-by-hop): not parsed
    assert ipudp.parse(raw[:45]) is None  # truncated


def test_a_known_ipv6_udp_checksum():
    # fd00::101 -> fd00::102, ports 7100/7100, payload b"x": computed independently with scapy's in6_chksum
    raw = udp6(A6, B6, 7100, 7100, b"x")
    assert struct.unpack_from("!H", raw, 46)[0] == 0x545F


def test_extra_packets_of_an_ipv6_run_leave_by_the_ipv6_socket_with_their_source():
    class Rec:
        def __init__(self):
            self.sent = []

        def sendmsg(self, buffers, ancdata, flags, address):
            self.sent.append((b"".join(buffers), ancdata, address))

    four, six = Rec(), Rec()
    sender = resend.ExtraSender(four, six)
    raw = udp6(A6, B6, 7100, 7100, b"SLcopy")
    assert sender.send(raw)
    assert six.sent == [(raw[40:], [(socket.IPPROTO_IPV6, resend.IPV6_PKTINFO,
                                     socket.inet_pton(socket.AF_INET6, A6) + bytes(4))], (B6, 0))]
    assert four.sent == []
    assert not resend.ExtraSender(four).send(raw)  # no IPv6 socket: counted, not sent through the IPv4 one
    assert resend.ExtraSender(four).stats()["extra_send_failed"] == {}


def test_the_queue_chain_of_an_ipv6_run_is_built_by_ip6tables_for_the_ipv6_destinations():
    spec = ShaperSpec("r1", "n1", seed=1, links={B6: LinkFault(delay_ms=5)}, names={A6: "n1", B6: "n2"})
    assert control.queue_rules(spec, 6) == ["-m mark --mark 0x5e1 -j RETURN",
                                            f"-d {B6}/128 -p udp -j NFQUEUE --queue-num 71 --queue-bypass"]
    assert control.queue_rules(spec) == ["-m mark --mark 0x5e1 -j RETURN"]  # nothing IPv4 to queue
    ipv4_spec = ShaperSpec("r1", "n1", seed=1, links={"10.0.0.2": LinkFault(delay_ms=5)})
    assert control.queue_rules(ipv4_spec, 6) == []  # an IPv4 run gets no ip6tables chain at all
    assert iptables.QUEUE6.tool == "ip6tables" and iptables.QUEUE6.group == control.GROUP


def test_an_ipv6_run_takes_no_backend_that_matches_ipv4_only():
    caps = {"netem": (False, "not on IPv6"), "nfqueue": (False, "no xt_NFQUEUE"), "iptables": (False, "not on IPv6")}
    with pytest.raises(EnvironmentProblem):
        choose_backend(LinkFault(loss_pct=5), None, caps)


# --- forged IPv6 packets (chaos.wire.inject) --------------------------------------------------------------------
from scapy.layers.inet import UDP  # noqa: E402
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, defragment6  # noqa: E402

from chaos.wire import inject  # noqa: E402


def test_a_forged_ipv6_datagram_is_what_scapy_builds():
    payload = bytes(range(256))
    ours = inject.packet(A6, B6, payload)
    theirs = bytes(IPv6(src=A6, dst=B6, hlim=64) / UDP(sport=7100, dport=7100) / payload)
    assert ours == theirs  # header, payload length and the UDP checksum over the IPv6 pseudo header
    assert ours == udp6(A6, B6, 7100, 7100, payload)


def test_a_large_ipv6_datagram_leaves_as_fragments_that_scapy_reassembles():
    payload = bytes(range(256)) * 200
    pkt = inject.packet(A6, B6, payload)
    pieces = inject.fragment(pkt)
    assert all(len(p) <= inject.MTU_BYTES for p in pieces) and len(pieces) == 36
    parsed = [IPv6(p) for p in pieces]
    assert all(IPv6ExtHdrFragment in p and p.nh == inject.IPV6_FRAGMENT_HEADER for p in parsed)
    assert len({p[IPv6ExtHdrFragment].id for p in parsed}) == 1
    assert [p[IPv6ExtHdrFragment].m for p in parsed] == [1] * 35 + [0]
    assert all(len(p) % 8 == 0 for p in pieces[:-1])  # every fragment but the last carries 8-byte multiples
    whole = defragment6(parsed)
    assert bytes(whole) == pkt
    assert all(len(p) <= 1280 for p in inject.fragment(pkt, 1280))  # the IPv6 minimum MTU: the EMSGSIZE fallback
    small = inject.packet(A6, B6, b"x")
    assert inject.fragment(small) == [small]
    largest = inject.packet(A6, B6, bytes(65535 - 8))  # the most a payload length can say
    assert len(largest) == ipudp.MAX_IPV6_BYTES and ipudp.parse(largest) is not None
    assert ipudp.parse(largest + b"\0") is None  # more than the header can say
    with pytest.raises(UsageError, match="carries at most 65527 bytes, not 65528"):
        inject.packet(A6, B6, bytes(65528))
    with pytest.raises(UsageError, match="carries at most 65507 bytes"):
        inject.packet("10.0.0.1", "10.0.0.2", bytes(65508))


def test_replay_groups_ipv6_packets_by_their_sender_and_refuses_strangers():
    mine, theirs = inject.packet(A6, B6, b"1"), inject.packet(B6, A6, b"2")
    assert inject.by_sender([A6, B6], [mine, theirs, mine]) == {A6: [mine, mine], B6: [theirs]}
    with pytest.raises(UsageError, match="must be UDP from a node of this run"):
        inject.by_sender([A6], [theirs])
