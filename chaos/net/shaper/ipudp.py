"""IPv4/UDP and IPv6/UDP packets as bytes: parse the parts the shaper needs, rebuild with a new UDP payload,
flip a bit.

The shaper sees whole IP packets (NFQUEUE copies them from the kernel, checksums complete). Every function
here is pure and returns new bytes with correct IP and UDP checksums. IPv6 (a `splitlab up --ipv6` run): the
fixed 40-byte header with UDP as its next header (packets with extension headers are not parsed, as IPv4
fragments are not); no header checksum, the UDP checksum over the IPv6 pseudo header (RFC 8200 8.1).
"""
from __future__ import annotations

import random
import socket
import struct
from typing import NamedTuple

UDP_PROTO = 17
IPV6_HEADER_BYTES = 40
MAX_IPV4_BYTES = 65535  # what an IPv4 total length can say
MAX_IPV6_BYTES = IPV6_HEADER_BYTES + 65535  # the fixed header and what a payload length can say (no jumbograms)


class UdpPacket(NamedTuple):
    """The parts of an IPv4/UDP packet the shaper looks at; `raw` is the whole packet. (A tuple: the shaper parses
    every packet it sees, and a tuple is built in a third of a frozen dataclass's time.)"""

    src: str
    dst: str
    sport: int
    dport: int
    payload: bytes
    header_len: int  # IP header length in bytes
    raw: bytes

    @property
    def version(self) -> int:
        """4 or 6."""
        return self.raw[0] >> 4


_PORTS_LENGTH = struct.Struct("!HHH")


def parse(raw: bytes) -> UdpPacket | None:
    """The UDP view of an IPv4 or IPv6 packet, or None for anything else (other protocols, fragments, extension
    headers, truncation, more bytes than the IP header can say)."""
    if raw and raw[0] >> 4 == 6:
        return _parse6(raw)
    if not 28 <= len(raw) <= MAX_IPV4_BYTES or raw[0] >> 4 != 4 or raw[9] != UDP_PROTO:
        return None
    ihl = (raw[0] & 0x0F) * 4
    if raw[6] & 0x3F or raw[7] or len(raw) < ihl + 8:  # a fragment (MF or an offset), or no room for UDP's header
        return None
    sport, dport, length = _PORTS_LENGTH.unpack_from(raw, ihl)
    payload = raw[ihl + 8:ihl + length] if length >= 8 else b""
    return UdpPacket(socket.inet_ntoa(raw[12:16]), socket.inet_ntoa(raw[16:20]), sport, dport, payload, ihl, raw)


def _parse6(raw: bytes) -> UdpPacket | None:
    if not IPV6_HEADER_BYTES + 8 <= len(raw) <= MAX_IPV6_BYTES or raw[6] != UDP_PROTO:
        return None
    sport, dport, length = _PORTS_LENGTH.unpack_from(raw, IPV6_HEADER_BYTES)
    payload = raw[IPV6_HEADER_BYTES + 8:IPV6_HEADER_BYTES + length] if length >= 8 else b""
    return UdpPacket(socket.inet_ntop(socket.AF_INET6, raw[8:24]), socket.inet_ntop(socket.AF_INET6, raw[24:40]),
                     sport, dport, payload, IPV6_HEADER_BYTES, raw)


def _sum16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def checksum(data: bytes) -> int:
    return ~_sum16(data) & 0xFFFF


def udp_checksum(src: bytes, dst: bytes, udp: bytes) -> int:
    """The UDP checksum over the pseudo header and `udp` (whose checksum field is zero); 0 becomes 0xFFFF. 16-byte
    addresses: the IPv6 pseudo header."""
    if len(src) == 16:
        pseudo = src + dst + struct.pack("!I3xB", len(udp), UDP_PROTO)
    else:
        pseudo = src + dst + struct.pack("!BBH", 0, UDP_PROTO, len(udp))
    value = checksum(pseudo + udp)
    return value or 0xFFFF


def with_payload(pkt: UdpPacket, payload: bytes) -> bytes:
    """`pkt` carrying `payload` instead, IP total length, UDP length and both checksums recomputed."""
    header = bytearray(pkt.raw[:pkt.header_len])
    udp = bytearray(struct.pack("!HHHH", pkt.sport, pkt.dport, 8 + len(payload), 0) + payload)
    if pkt.version == 6:
        struct.pack_into("!H", udp, 6, udp_checksum(bytes(header[8:24]), bytes(header[24:40]), bytes(udp)))
        struct.pack_into("!H", header, 4, len(udp))  # the payload length; IPv6 has no header checksum
        return bytes(header) + bytes(udp)
    struct.pack_into("!H", udp, 6, udp_checksum(bytes(header[12:16]), bytes(header[16:20]), bytes(udp)))
    struct.pack_into("!H", header, 2, len(header) + len(udp))
    struct.pack_into("!H", header, 10, 0)
    struct.pack_into("!H", header, 10, checksum(bytes(header)))
    return bytes(header) + bytes(udp)


def flip_bit(pkt: UdpPacket, rng: random.Random) -> bytes:
    """`pkt` with one random bit of its UDP payload flipped and the checksum made right again, so the corrupt
    datagram reaches the node's decoder instead of dying at the receiver's checksum check."""
    if not pkt.payload:
        return pkt.raw
    data = bytearray(pkt.payload)
    bit = rng.randrange(len(data) * 8)
    data[bit // 8] ^= 1 << (bit % 8)
    return with_payload(pkt, bytes(data))


def build(src: str, dst: str, sport: int, dport: int, payload: bytes, ttl: int = 64) -> bytes:
    """A fresh IPv4/UDP packet, or IPv6/UDP when `src` is an IPv6 address (`ttl` is then the hop limit), for
    forged datagrams sent on a raw socket."""
    if ":" in src:
        header = struct.pack("!IHBB16s16s", 6 << 28, 0, UDP_PROTO, ttl, socket.inet_pton(socket.AF_INET6, src),
                             socket.inet_pton(socket.AF_INET6, dst))
        pkt = UdpPacket(src, dst, sport, dport, b"", IPV6_HEADER_BYTES, header + b"\0" * 8)
        return with_payload(pkt, payload)
    header = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + len(payload), 0, 0x4000, ttl, UDP_PROTO, 0,
                                   socket.inet_aton(src), socket.inet_aton(dst)))
    struct.pack_into("!H", header, 10, checksum(bytes(header)))
    pkt = UdpPacket(src, dst, sport, dport, b"", 20, bytes(header) + b"\0" * 8)
    return with_payload(pkt, payload)
