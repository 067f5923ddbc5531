"""Capture files of a run's data traffic, through scapy's own pcap reader and writer.

`Capture` records what the nodes receive: one AF_PACKET socket per node namespace (opened from this process,
`chaos.host.netns.socket_in`) takes the UDP packets a node *receives* on its data address (of its family:
IPv6 on a `splitlab up --ipv6` run), so every packet appears once, as its receiver got it (after faults); a
background thread writes them with `pcap_writer`, a classic pcap of raw IP packets (LINKTYPE_RAW: IPv4 and
IPv6 alike) that tcpdump, Wireshark and scapy read. `read_pcap` reads any pcap or pcapng scapy reads
(tcpdump's on eth0, on `any` (Linux cooked SLL/SLL2), raw IP) and keeps the IPv4 and IPv6 packets;
`DockerNet.replay` sends them again. `write_pcap` writes packets with their own timestamps (a capture
merged from many hosts, chaos.wire.remote).

A datagram larger than the data network's MTU (a bundle) reaches the node as IPv4 fragments, which the socket
sees before the kernel reassembles them; `Reassembly` puts them back together, so the capture holds the
datagram the node read, whole (IPv6 fragments are not reassembled yet).
"""
from __future__ import annotations

import select
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import scapy.layers.l2  # noqa: F401  (registers Ethernet and Linux cooked SLL/SLL2 as link types to read)
from scapy.error import Scapy_Exception
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6  # also makes LINKTYPE_RAW read as IPv4 or IPv6 by the version nibble
from scapy.utils import PcapReader, PcapWriter

from chaos.host.netns import address_family, socket_in
from chaos.wire.probe import Endpoint
from chaos.net.shaper import ipudp
from node.errors import UsageError

ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
PACKET_OUTGOING = 4
LINKTYPE_RAW = 101  # the pcap file value of DLT_RAW: each record is an IP packet, no link header


def pcap_writer(path: Path) -> PcapWriter:
    """A scapy `PcapWriter` of raw IP packets into `path` (created, truncated), its file header already
    written so the file is a valid, empty capture from the start; `write(packet_bytes)` stamps each with now."""
    writer = PcapWriter(str(path), linktype=LINKTYPE_RAW)
    writer.write_header(None)
    return writer


def write_pcap(path: Path, packets: list[tuple[float, bytes]]) -> None:
    """Write (timestamp_s, IP packet) pairs into the pcap `path` as `pcap_writer` does, each with its own
    timestamp (merged captures keep the times their packets were received)."""
    writer = pcap_writer(path)
    try:
        for ts, pkt in packets:
            sec = int(ts)
            writer.write_packet(pkt, sec=sec, usec=min(999_999, int(round((ts - sec) * 1e6))))
    finally:
        writer.close()


@dataclass
class PcapPackets:
    """The IP packets of a capture file as (timestamp_s, packet) pairs in file order, and how many frames
    were skipped because they do not hold a whole IPv4 or IPv6 packet (ARP, truncated by the snap length, ...).
    Iterating gives the pairs."""

    packets: list[tuple[float, bytes]] = field(default_factory=list)
    skipped: int = 0

    def __iter__(self) -> Iterator[tuple[float, bytes]]:
        return iter(self.packets)

    def __len__(self) -> int:
        return len(self.packets)


def read_pcap(path: Path) -> PcapPackets:
    """The IPv4 and IPv6 packets of the pcap or pcapng file `path`, whatever its link type (Ethernet, raw IP, Linux
    cooked SLL/SLL2), each as the bytes of its IP header and payload. Raises `UsageError` for a missing file or
    one that is not a capture scapy reads."""
    try:
        reader = PcapReader(str(path))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except Scapy_Exception as exc:
        raise UsageError(f"{path}: not a pcap or pcapng capture file ({exc})",
                         hint="give a file written by tcpdump, Wireshark or `splitlab chaos capture`") from None
    out = PcapPackets()
    with reader:
        for frame in reader:
            packet = _ip_of(frame)
            if packet is None:
                out.skipped += 1
            else:
                out.packets.append((float(frame.time), packet))
    return out


def _ip_of(frame) -> bytes | None:
    """The IP packet a dissected frame carries (its first IPv4 or IPv6 layer, link padding cut off by the
    length in its header), or None when it carries none or only part of one."""
    layer = frame.getlayer(IP) or frame.getlayer(IPv6)
    if layer is None:
        return None
    data = bytes(layer)
    if isinstance(layer, IPv6):
        fixed = ipudp.IPV6_HEADER_BYTES
        total_len = fixed + layer.plen if layer.plen else len(data)  # 0: a jumbogram, the frame is the packet
    else:  # len 0 in captures of segmentation-offloaded sends: the frame is the packet
        fixed, total_len = 20, layer.len or len(data)
    if total_len < fixed or total_len > len(data):
        return None
    return data[:total_len]


@dataclass
class _Fragments:
    """The fragments of one IPv4 datagram seen so far: payload bytes by offset, the first fragment's header, and
    the datagram's length once its last fragment came."""

    first_s: float
    parts: dict[int, bytes] = field(default_factory=dict)
    header: bytes = b""
    end: int | None = None


class Reassembly:
    """IPv4 fragments put back together (RFC 791), as the receiving kernel does: per (source, destination, id),
    until the last fragment (MF clear) and every byte before it are there; then the whole packet, the first
    fragment's header with its fragment fields cleared and its length and checksum set. An incomplete datagram
    is dropped after `EXPIRY_S` (the kernel's ipfrag_time) and at most `MAX_PENDING` are kept (the oldest goes).
    Written here rather than taken from scapy: its `defragment` reassembles a finished list offline, and this
    runs on a live stream, one fragment at a time, in the capture thread."""

    EXPIRY_S = 30.0
    MAX_PENDING = 1024

    def __init__(self) -> None:
        self._pending: dict[tuple[bytes, bytes, bytes], _Fragments] = {}

    @staticmethod
    def is_fragment(raw: bytes) -> bool:
        """An IPv4 packet with MF set or a fragment offset."""
        return len(raw) >= 20 and raw[0] >> 4 == 4 and bool(raw[6] & 0x3F or raw[7])

    def add(self, raw: bytes, now_s: float) -> bytes | None:
        """Take one IPv4 fragment; returns the reassembled packet once complete, else None."""
        self._expire(now_s)
        ihl = (raw[0] & 0x0F) * 4
        total = int.from_bytes(raw[2:4], "big")
        if ihl < 20 or total > len(raw) or total <= ihl:
            return None
        field_ = int.from_bytes(raw[6:8], "big")
        offset, more = (field_ & 0x1FFF) * 8, bool(field_ & 0x2000)
        key = (raw[12:16], raw[16:20], raw[4:6])
        frags = self._pending.get(key)
        if frags is None:
            if len(self._pending) >= self.MAX_PENDING:
                del self._pending[next(iter(self._pending))]
            frags = self._pending[key] = _Fragments(now_s)
        frags.parts[offset] = raw[ihl:total]
        if offset == 0:
            frags.header = raw[:ihl]
        if not more:
            frags.end = offset + total - ihl
        if not frags.header or frags.end is None:
            return None
        covered = 0
        for start in sorted(frags.parts):
            if start > covered:
                return None
            covered = max(covered, start + len(frags.parts[start]))
        if covered < frags.end:
            return None
        del self._pending[key]
        payload = bytearray(frags.end)
        for start, part in frags.parts.items():
            payload[start:start + len(part)] = part[:max(0, frags.end - start)]
        header = bytearray(frags.header)
        header[2:4] = (len(header) + frags.end).to_bytes(2, "big")
        header[6:8] = (int.from_bytes(header[6:8], "big") & 0x4000).to_bytes(2, "big")  # DF kept, MF and offset 0
        header[10:12] = b"\0\0"
        header[10:12] = ipudp.checksum(bytes(header)).to_bytes(2, "big")
        return bytes(header) + bytes(payload)

    def _expire(self, now_s: float) -> None:
        while self._pending:
            key, frags = next(iter(self._pending.items()))
            if now_s - frags.first_s < self.EXPIRY_S:
                return
            del self._pending[key]


class Capture:
    """Records UDP packets received by `endpoints` on their data addresses into `path` until `stop` (IPv4
    fragments reassembled: `Reassembly`)."""

    def __init__(self, endpoints: dict[str, Endpoint], path: Path) -> None:
        self.endpoints = endpoints
        self.path = Path(path)
        self.count = 0
        self._stop = threading.Event()
        self._socks: dict[socket.socket, str] = {}
        self._thread: threading.Thread | None = None

    def start(self) -> "Capture":
        for ep in self.endpoints.values():
            ethertype = ETH_P_IPV6 if address_family(ep.ip) == socket.AF_INET6 else ETH_P_IP
            sock = socket_in(ep.pid, socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ethertype))
            sock.setblocking(False)
            self._socks[sock] = ep.ip
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pcap_writer(self.path)
        self._thread = threading.Thread(target=self._loop, name="capture", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        reassembly = Reassembly()
        while not self._stop.is_set():
            for sock in select.select(list(self._socks), [], [], 0.05)[0]:
                while True:
                    try:
                        data, addr = sock.recvfrom(65535)
                    except BlockingIOError:
                        break
                    if addr[2] != PACKET_OUTGOING and Reassembly.is_fragment(data):
                        data = reassembly.add(data, time.monotonic())
                        if data is None:
                            continue
                    pkt = ipudp.parse(data)
                    if addr[2] == PACKET_OUTGOING or pkt is None or pkt.dst != self._socks[sock]:
                        continue
                    self._writer.write(data)
                    self.count += 1

    def stop(self) -> int:
        """Stop, close the file and return how many packets were written."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for sock in self._socks:
            sock.close()
        self._writer.close()
        return self.count

    def __enter__(self) -> "Capture":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
