"""The shaper's own packets (duplicates, split or held messages): sent as the node's UDP datagrams for the kernel to
fragment (chaos.net.shaper.resend), what could not be sent counted by reason in the shaper's counters, and the
controller reading those counters and saying so when shaping ends; delayed originals sent whole with their own
IP header, and as datagrams above the MTU. With recording sockets; two tests run the real kernel in a network
namespace of their own and are skipped without root."""
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from chaos.host.ledger import Entry, Ledger
from chaos.net.docker import DockerNet
from chaos.net.shaper import control, ipudp, resend

REPO = Path(__file__).resolve().parents[2]
A, B = "10.9.0.2", "10.9.0.3"


class RecordingSocket:
    def __init__(self, fail_with: int | None = None) -> None:
        self.sent: list[tuple] = []
        self.fail_with = fail_with

    def sendmsg(self, buffers, ancdata, flags, address):
        if self.fail_with is not None:
            raise OSError(self.fail_with, os.strerror(self.fail_with))
        self.sent.append((b"".join(buffers), ancdata, flags, address))


def test_the_udp_datagram_goes_out_from_the_original_source_for_the_kernel_to_build_and_fragment():
    payload = bytes(range(256)) * 12  # 3,072 bytes: larger than any data network's MTU
    packet = ipudp.build(A, B, 7101, 7100, payload)
    sock = RecordingSocket()
    sender = resend.ExtraSender(sock)
    assert sender.send(packet)
    segment, ancdata, flags, address = sock.sent[0]
    assert segment == packet[20:] and len(segment) == 8 + len(payload)  # UDP header (ports, checksum) and payload
    assert ancdata == [(socket.IPPROTO_IP, resend.IP_PKTINFO,
                        bytes(4) + socket.inet_aton(A) + bytes(4))]  # in_pktinfo: any interface, source A
    assert (flags, address) == (0, (B, 0))
    assert sender.stats() == {"extra_sent": 1, "extra_send_failed": {}}


def test_what_cannot_be_sent_is_counted_by_reason():
    sender = resend.ExtraSender(RecordingSocket(fail_with=errno.ENOBUFS))
    packet = ipudp.build(A, B, 7101, 7100, b"x")
    assert not sender.send(packet) and not sender.send(packet)
    sender.sock.fail_with = errno.EPERM  # an OUTPUT rule dropped it
    assert not sender.send(packet)
    assert not sender.send(b"\x45" + bytes(30))  # not an IPv4/UDP packet at all
    assert sender.stats() == {"extra_sent": 0, "extra_send_failed": {"ENOBUFS": 2, "EPERM": 1, "not_udp": 1}}


def test_the_controller_reads_the_counters_and_words_the_failures(tmp_path):
    assert control.read_stats(tmp_path, "n1") == {}
    path = control.stats_path(tmp_path, "n1")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"extra_sent": 7, "extra_send_failed": {"ENOBUFS": 2, "EMSGSIZE": 1}}))
    stats = control.read_stats(tmp_path, "n1")
    assert control.send_failures(stats) == ("3 of 10 packets the shaper sends itself (delayed, duplicated, split or "
                                            "held) were not sent: EMSGSIZE x1, ENOBUFS x2")
    assert control.send_failures({"extra_sent": 7, "extra_send_failed": {}}) is None


def test_fast_reports_what_the_ended_shaper_could_not_send(tmp_path):
    cluster = SimpleNamespace(run_id="r1", run_dir=tmp_path, names=["n1", "n2"], nodes=[])
    said: list[str] = []
    net = DockerNet(cluster, log=said.append, verify=False)
    net.ledger.record(Entry(group=control.GROUP, key="shaper-proc:1", node="n1", pid=2 ** 22 + 7, netns_ino=1,
                            what="NFQUEUE shaper process for n1", process={"marker": "no-such-marker"}))
    path = control.stats_path(tmp_path, "n1")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"extra_sent": 4, "extra_send_failed": {"ENOBUFS": 1}}))
    net.fast()
    assert ("shaper n1: 1 of 5 packets the shaper sends itself (delayed, duplicated, split or held) were not sent: "
            "ENOBUFS x1") in said
    assert Ledger(tmp_path).outstanding() == []


in_namespace = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None,
    reason="needs root, unshare and ip: a network namespace of its own with a 1500-byte MTU")


def run_in_namespace(script: str) -> list[str]:
    """The lines `script` prints, run by this Python in a network namespace of its own."""
    proc = subprocess.run(["unshare", "--net", sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


# a namespace of its own: loopback at a 1500-byte MTU with two addresses, a receiver on the second
NAMESPACE_SETUP = textwrap.dedent("""
    import socket, struct, subprocess
    from chaos.net.shaper import ipudp, resend
    subprocess.run(["ip", "link", "set", "lo", "up", "mtu", "1500"], check=True)
    for ip in ("10.9.0.2", "10.9.0.3"):
        subprocess.run(["ip", "addr", "add", ip + "/24", "dev", "lo"], check=True)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("10.9.0.3", 7100))
    rx.settimeout(2)
""")

KERNEL_CHECK = NAMESPACE_SETUP + textwrap.dedent("""
    payload = bytes(range(256)) * 12
    packet = ipudp.build("10.9.0.2", "10.9.0.3", 7101, 7100, payload)
    hdrincl = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    try:
        hdrincl.sendto(packet, ("10.9.0.3", 0))
        print("hdrincl sent")
    except OSError as exc:
        print("hdrincl", exc.errno)
    sender = resend.ExtraSender(resend.open_socket(0x5E1))
    assert sender.send(packet), sender.stats()
    data, addr = rx.recvfrom(65535)
    print("received", data == payload, addr)
    try:
        sender.sock.recv(65535, socket.MSG_DONTWAIT)
        print("raw queue not empty")
    except BlockingIOError:
        print("raw queue empty")
""")


@in_namespace
def test_in_a_real_namespace_a_copy_above_the_mtu_arrives_whole_where_a_raw_ip_packet_cannot_be_sent():
    assert run_in_namespace(KERNEL_CHECK) == [f"hdrincl {errno.EMSGSIZE}", "received True ('10.9.0.2', 7101)",
                                        "raw queue empty"]


class RecordingRawSocket(RecordingSocket):
    """An IPPROTO_RAW socket: records whole packets, or fails with `fail_with`."""

    def sendto(self, packet, address):
        if self.fail_with is not None:
            raise OSError(self.fail_with, os.strerror(self.fail_with))
        self.sent.append((packet, address))


def test_a_delayed_original_goes_out_whole_and_only_above_the_mtu_as_a_datagram_of_its_own():
    packet = ipudp.build(A, B, 7101, 7100, b"small")
    whole, udp = RecordingRawSocket(), RecordingSocket()
    sender = resend.ExtraSender(udp, None, whole)
    assert sender.send_whole(packet) and whole.sent == [(packet, (B, 0))] and udp.sent == []
    whole.fail_with = errno.EMSGSIZE  # above the MTU: the kernel does not fragment an IP_HDRINCL packet
    assert sender.send_whole(packet) and len(udp.sent) == 1
    whole.fail_with = errno.EPERM
    assert not sender.send_whole(packet)
    assert sender.stats() == {"extra_sent": 2, "extra_send_failed": {"EPERM": 1}}
    assert resend.ExtraSender(udp).send_whole(packet) and len(udp.sent) == 2  # no IPPROTO_RAW socket: a datagram


WHOLE_CHECK = NAMESPACE_SETUP + textwrap.dedent("""
    headers = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)  # sees the IP headers
    headers.settimeout(2)
    sender = resend.ExtraSender(resend.open_socket(0x5E1), None, resend.open_whole_socket(0x5E1))
    for payload in (b"small", bytes(range(256)) * 12):
        packet = bytearray(ipudp.build("10.9.0.2", "10.9.0.3", 7101, 7100, payload))
        struct.pack_into("!H", packet, 4, 0x1234)  # the original's IP id and TTL (the kernel redoes the checksum)
        packet[8] = 17
        assert sender.send_whole(bytes(packet)), sender.stats()
        data, addr = rx.recvfrom(65535)
        header = headers.recv(65535)
        ip_id, ttl = struct.unpack_from("!H", header, 4)[0], header[8]
        print(len(payload), data == payload, addr, "id kept" if ip_id == 0x1234 else "new id",
              "ttl kept" if ttl == 17 else "new ttl")
""")


@in_namespace
def test_in_a_real_namespace_a_delayed_original_keeps_its_ip_header_and_one_above_the_mtu_still_arrives():
    assert run_in_namespace(WHOLE_CHECK) == ["5 True ('10.9.0.2', 7101) id kept ttl kept",
                                        "3072 True ('10.9.0.2', 7101) new id new ttl"]
