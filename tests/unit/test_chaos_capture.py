"""Capture files (chaos.wire.capture): what splitlab writes is a pcap scapy and tcpdump read back byte for byte,
and `read_pcap` takes the IPv4 and IPv6 packets out of the captures tcpdump and Wireshark write (Ethernet, Linux
cooked SLL and SLL2, raw IP; pcap and pcapng), skipping and counting the frames that hold none."""
from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from scapy.layers.inet import IP, UDP, fragment
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, CookedLinux, CookedLinuxV2, Ether
from scapy.packet import Raw
from scapy.utils import PcapReader, rdpcap, wrpcap, wrpcapng

from chaos.fuzz import gen as fuzzgen, record as fuzzrecord
from chaos.net.shaper import ipudp
from chaos.wire import capture
from node.errors import UsageError


def _with_bad_udp_checksum(packet: bytes) -> bytes:
    """The packet with a wrong UDP checksum, as fuzzed datagrams may have: no layer may 'fix' it on the way."""
    return packet[:26] + bytes([packet[26] ^ 0xFF, packet[27] ^ 0xFF]) + packet[28:]


PACKETS = [
    ipudp.build("10.77.0.2", "10.77.0.3", 7100, 7100, b"x"),  # short: an Ethernet frame of it carries padding
    _with_bad_udp_checksum(ipudp.build("10.77.0.3", "10.77.0.2", 7100, 7100, bytes(range(256)) * 4)),
    ipudp.build("10.77.0.4", "10.77.0.2", 7100, 7100, b"\xff" * 1400),
]
PACKETS6 = [  # an IPv6 run's (splitlab up --ipv6): built by scapy, not by our codec
    bytes(IPv6(src="fd00::101", dst="fd00::102") / UDP(sport=7100, dport=7100) / Raw(b"v6")),
    bytes(IPv6(src="fd00::102", dst="fd00::101", hlim=3) / UDP(sport=7100, dport=7100, chksum=0x1234) /
          Raw(bytes(range(256)) * 5)),
]
ARP_FRAME = ARP(psrc="10.77.0.2", pdst="10.77.0.3")


def _write_ours(path, packets=PACKETS):
    writer = capture.pcap_writer(path)
    for packet in packets:
        writer.write(packet)
    writer.close()


def test_our_writer_writes_a_raw_ip_pcap_that_scapy_reads_back_byte_for_byte(tmp_path):
    path = tmp_path / "ours.pcap"
    before = time.time()
    _write_ours(path)
    with PcapReader(str(path)) as reader:
        assert reader.linktype == capture.LINKTYPE_RAW
    frames = rdpcap(str(path))
    assert [bytes(f[IP]) for f in frames] == PACKETS
    assert [f[IP].src for f in frames] == ["10.77.0.2", "10.77.0.3", "10.77.0.4"]
    read = capture.read_pcap(path)
    assert [pkt for _, pkt in read] == PACKETS and read.skipped == 0 and len(read) == 3
    assert all(before - 1 <= ts <= time.time() + 1 for ts, _ in read)


def test_ipv6_packets_share_the_raw_ip_pcap_with_ipv4_ones(tmp_path):
    path = tmp_path / "dual.pcap"
    _write_ours(path, PACKETS + PACKETS6)
    frames = rdpcap(str(path))
    assert [bytes(f[IPv6]) for f in frames[3:]] == PACKETS6 and [bytes(f[IP]) for f in frames[:3]] == PACKETS
    read = capture.read_pcap(path)
    assert [pkt for _, pkt in read] == PACKETS + PACKETS6 and read.skipped == 0
    cut = tmp_path / "cut.pcap"  # an IPv6 packet whose payload length claims more than the frame holds
    _write_ours(cut, [PACKETS6[1][:200]])
    assert capture.read_pcap(cut).skipped == 1


def test_an_empty_capture_is_a_valid_file_from_the_start(tmp_path):
    path = tmp_path / "empty.pcap"
    writer = capture.pcap_writer(path)
    assert len(path.read_bytes()) == 24  # the file header is there before any packet (and before close)
    writer.close()
    read = capture.read_pcap(path)
    assert read.packets == [] and read.skipped == 0


def test_the_fuzz_recorder_writes_through_the_same_writer(tmp_path):
    recorder = fuzzrecord.Recorder(tmp_path, "1", {"seed": 1})
    case = fuzzgen.Case(0, "n2", "n1", "n1", "garbage", (), "", False, b"\x00junk")
    recorder.write(case, PACKETS[1])
    recorder.close()
    assert [bytes(f[IP]) for f in rdpcap(str(recorder.pcap_path))] == [PACKETS[1]]


@pytest.mark.parametrize("link", ["ethernet", "sll", "sll2"])
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_read_pcap_takes_the_ip_packets_out_of_tcpdump_style_captures(tmp_path, link, fmt):
    def frame(payload):
        if link == "ethernet":  # tcpdump -i eth0
            return Ether(src="02:42:0a:4d:00:02", dst="02:42:0a:4d:00:03") / payload
        if link == "sll":  # tcpdump -i any, libpcap before 1.10
            return CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, src=b"\x02\x42\x0a\x4d\x00\x02") / payload
        return CookedLinuxV2(pkttype=0, lladdrtype=1, lladdrlen=6, src=b"\x02\x42\x0a\x4d\x00\x02") / payload

    # a received frame shorter than Ethernet's minimum carries padding after the IP packet
    padded = [Raw(p + b"\0" * max(0, 46 - len(p))) for p in PACKETS]
    frames = [frame(ARP_FRAME), *(frame(IP(raw_ip.load)) for raw_ip in padded),
              *(frame(IPv6(raw_ip)) for raw_ip in PACKETS6)]
    path = tmp_path / f"tcpdump.{fmt}"
    (wrpcap if fmt == "pcap" else wrpcapng)(str(path), frames)
    read = capture.read_pcap(path)
    # Ethernet padding of the short one cut off, checksums untouched (also the IPv6 one's wrong UDP checksum)
    assert [pkt for _, pkt in read] == PACKETS + PACKETS6
    assert read.skipped == 1


def test_a_packet_cut_short_by_the_snap_length_is_skipped_and_counted(tmp_path):
    whole, cut = PACKETS[0], PACKETS[2]
    path = tmp_path / "snap.pcap"
    wrpcap(str(path), [Ether() / IP(whole), Ether(bytes(Ether() / IP(cut))[:14 + 96])])
    read = capture.read_pcap(path)
    assert [pkt for _, pkt in read] == [whole] and read.skipped == 1


def test_a_missing_or_foreign_file_is_a_usage_error_naming_it(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a capture\n")
    with pytest.raises(UsageError, match="notes.txt: not a pcap or pcapng"):
        capture.read_pcap(text)
    with pytest.raises(UsageError, match="cannot read .*missing.pcap"):
        capture.read_pcap(tmp_path / "missing.pcap")


TCPDUMP = shutil.which("tcpdump")


@pytest.mark.skipif(TCPDUMP is None, reason="tcpdump is not installed (apt-get install -y tcpdump)")
def test_tcpdump_reads_our_pcap_and_we_read_the_pcap_tcpdump_writes(tmp_path):
    ours, theirs = tmp_path / "ours.pcap", tmp_path / "theirs.pcap"
    _write_ours(ours, PACKETS + PACKETS6)
    shown = subprocess.run([TCPDUMP, "-n", "-r", str(ours)], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == 5
    assert "IP 10.77.0.2.7100 > 10.77.0.3.7100: UDP, length 1" in lines[0]
    assert "IP 10.77.0.4.7100 > 10.77.0.2.7100: UDP, length 1400" in lines[2]
    assert "IP6 fd00::101.7100 > fd00::102.7100: UDP, length 2" in lines[3]
    rewritten = subprocess.run([TCPDUMP, "-n", "-r", str(ours), "-w", str(theirs)], capture_output=True,
                               timeout=30)
    assert rewritten.returncode == 0, rewritten.stderr
    assert [pkt for _, pkt in capture.read_pcap(theirs)] == PACKETS + PACKETS6


def test_write_pcap_keeps_each_packets_own_timestamp(tmp_path):
    stamped = [(1_700_000_000.25, PACKETS[0]), (1_700_000_001.999_999_7, PACKETS[1]), (1_700_000_002.0, PACKETS[2])]
    capture.write_pcap(tmp_path / "merged.pcap", stamped)
    back = capture.read_pcap(tmp_path / "merged.pcap")
    assert [pkt for _, pkt in back] == PACKETS
    assert [round(ts, 6) for ts, _ in back] == [1_700_000_000.25, 1_700_000_001.999999, 1_700_000_002.0]


def _fragments(payload_bytes: int, ident: int, fragsize: int = 1000) -> tuple[bytes, list[bytes]]:
    whole = bytes(IP(src="10.9.0.2", dst="10.9.0.3", id=ident) / UDP(sport=7100, dport=7100) / (b"d" * payload_bytes))
    return whole, [bytes(f) for f in fragment(IP(whole), fragsize=fragsize)]


def test_fragments_of_a_datagram_above_the_mtu_are_put_back_together_in_any_order():
    """What the node's kernel hands it whole (a bundle of 3,000 bytes over a 1,500-byte MTU) arrives at the
    capture socket in fragments: reassembled, byte for byte the datagram, whatever their order and duplicates;
    two datagrams' fragments interleaved stay apart."""
    whole, frags = _fragments(3000, 77)
    other, other_frags = _fragments(2500, 78)
    assert len(frags) == 4 and all(capture.Reassembly.is_fragment(f) for f in frags)
    assert not capture.Reassembly.is_fragment(bytes(IP(dst="10.9.0.3") / UDP() / b"x"))
    r = capture.Reassembly()
    order = [frags[2], other_frags[1], frags[0], frags[2], other_frags[0], frags[3], other_frags[2]]
    assert [r.add(f, 0.0) for f in order] == [None, None, None, None, None, None, other]
    assert r.add(frags[1], 0.1) == whole
    assert ipudp.parse(whole).payload == b"d" * 3000


def test_an_incomplete_datagram_is_dropped_after_the_kernels_fragment_time():
    whole, frags = _fragments(3000, 79)
    r = capture.Reassembly()
    assert r.add(frags[0], 0.0) is None and r.add(frags[1], 1.0) is None
    assert r.add(frags[2], capture.Reassembly.EXPIRY_S + 0.5) is None  # the set began 30.5 s ago: gone
    assert r.add(frags[3], capture.Reassembly.EXPIRY_S + 0.6) is None  # frags 0 and 1 went with it
    assert r.add(frags[0], 31.0) is None and r.add(frags[1], 31.0) == whole
