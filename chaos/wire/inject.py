"""Forged and replayed node datagrams, sent from inside the claimed sender's namespace so that their source
address (and port) is the sender's real one.

`forge` builds the bytes of a datagram with scapy (chaos.wire.dissect), e.g. a stale `UnicastAck` with a chosen
seqno and conn_id; `send` puts IPv4/UDP or IPv6/UDP packets on a raw socket opened in the sender's namespace. The raw
socket's packets carry the shaper's bypass mark: injected packets skip the sender's link faults (they are the
fault), but a partition on the receiver still drops them, as it would the real sender's. `by_sender` groups
captured packets by their original sender, to send them again from there.

A raw socket (IP_HDRINCL) does not fragment: a packet larger than the link MTU is split here into IPv4
or IPv6 fragments (`fragment`), which the receiver's kernel reassembles. `Injector` keeps one raw socket per sending
namespace open for many packets (the fuzzer), and lets a member's namespace send with another member's data
address as source (a spoofed source); it refuses any address that is not a data address of the run.
`signed_packet` signs a captured packet's datagram again with a run's key (the authenticated wire).
"""
from __future__ import annotations

import errno
import itertools
import socket
import struct
import time
from typing import Iterable

from scapy.packet import Packet

from chaos.wire import dissect
from chaos.host.netns import address_family, socket_in
from chaos.wire.probe import Endpoint
from chaos.net.shaper import ipudp
from chaos.net.shaper.spec import BYPASS_MARK
from node import wire
from node.auth import WireKey
from node.errors import EnvironmentProblem, UsageError


def forge(run_id: str, sender: str, messages: list[Packet]) -> bytes:
    """A datagram of run `run_id` claiming to come from node `sender`, carrying scapy message bodies."""
    if not messages:
        raise UsageError("a forged datagram needs at least one message")
    return dissect.build(wire.cluster_id_of(run_id), sender, messages)


def message(type_name: str, **fields: int) -> Packet:
    """A scapy body of the named wire type with `fields` set. Raises `UsageError` for unknown types/fields."""
    cls = dissect.body_class(dissect.message_type(type_name))
    known = {f.name for f in cls.fields_desc}
    unknown = set(fields) - known
    if unknown:
        raise UsageError(f"{cls.name} has no field(s) {', '.join(sorted(unknown))}; fields: "
                         f"{', '.join(sorted(known)) or '(none)'}")
    return cls(**fields)


MTU_BYTES = 1500
MIN_MTU_BYTES = {4: 576, 6: 1280}  # the fallback when the link refuses MTU_BYTES (EMSGSIZE); IPv6's minimum link MTU
ENOBUFS_RETRIES = 200
IPV6_FRAGMENT_HEADER = 44
_ip_ids = itertools.count(1)


def fragment(pkt: bytes, mtu: int = MTU_BYTES) -> list[bytes]:
    """`pkt` (a whole IPv4 or IPv6 packet) as fragments of at most `mtu` bytes each, all with one fresh
    identification; `[pkt]` when it fits. IPv4 fragments get correct header checksums; IPv6 ones a Fragment
    header (RFC 8200 4.5) after the fixed header (a packet without extension headers). Written here rather than
    with scapy's `fragment`/`fragment6`: those dissect and rebuild every packet through scapy's layers,
    milliseconds a packet, and the fuzzer sends thousands a second through this."""
    if len(pkt) <= mtu:
        return [pkt]
    six = pkt[0] >> 4 == 6
    header_len = ipudp.IPV6_HEADER_BYTES if six else (pkt[0] & 0x0F) * 4
    header, data = pkt[:header_len], pkt[header_len:]
    step = (mtu - header_len - (8 if six else 0)) // 8 * 8
    ident = next(_ip_ids)
    out = []
    for offset in range(0, len(data), step):
        chunk = data[offset:offset + step]
        more = offset + step < len(data)
        head = bytearray(header)
        if six:
            struct.pack_into("!H", head, 4, 8 + len(chunk))
            head[6] = IPV6_FRAGMENT_HEADER
            head += struct.pack("!BxHI", pkt[6], offset | more, ident & 0xFFFFFFFF)
        else:
            struct.pack_into("!HHH", head, 2, header_len + len(chunk), ident & 0xFFFF,
                             (0x2000 if more else 0) | (offset // 8))
            struct.pack_into("!H", head, 10, 0)
            struct.pack_into("!H", head, 10, ipudp.checksum(bytes(head)))
        out.append(bytes(head) + chunk)
    return out


def _send_one(sock: socket.socket, pkt: bytes, dst: str, node: str, mtu: int) -> int:
    """Send one packet (fragmented when larger than `mtu`, retried while the queue is full); returns the MTU that
    worked. Raises `EnvironmentProblem`."""
    for piece in fragment(pkt, mtu):
        for attempt in range(ENOBUFS_RETRIES + 1):
            try:
                sock.sendto(piece, (dst, 0))
                break
            except OSError as exc:
                floor = MIN_MTU_BYTES[pkt[0] >> 4]
                if exc.errno == errno.EMSGSIZE and mtu > floor:
                    return _send_one(sock, pkt, dst, node, floor)
                if exc.errno != errno.ENOBUFS or attempt == ENOBUFS_RETRIES:
                    raise EnvironmentProblem(f"sending from {node}'s namespace failed: {exc}") from None
                time.sleep(0.001)  # the interface queue is full: let it drain
    return mtu


def _raw_socket(ep: Endpoint) -> socket.socket:
    """A raw socket in `ep`'s namespace that sends whole packets of `ep`'s family (IPPROTO_RAW: the header is
    ours, IP_HDRINCL on IPv4 and its equivalent on IPv6) with the shaper's bypass mark."""
    sock = socket_in(ep.pid, address_family(ep.ip), socket.SOCK_RAW, socket.IPPROTO_RAW)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, BYPASS_MARK)
    return sock


def send(src: Endpoint, packets: Iterable[bytes]) -> int:
    """Send whole IP packets from inside `src`'s namespace; returns how many went out. Every packet is checked
    (UDP from `src`'s data address, whose family it has) before the first goes out: bad input sends nothing."""
    checked = []
    for i, pkt in enumerate(packets):
        parsed = ipudp.parse(pkt)
        if parsed is None:
            raise UsageError(f"packet {i} is not UDP from {src.ip} ({src.node}'s data address)")
        if parsed.src != src.ip:
            raise UsageError(f"packet {i} is not UDP from {src.ip} ({src.node}'s data address): its "
                             f"source is {parsed.src}")
        checked.append((pkt, parsed.dst))
    sock = _raw_socket(src)
    mtu = MTU_BYTES
    try:
        for pkt, dst in checked:
            mtu = _send_one(sock, pkt, dst, src.node, mtu)
    finally:
        sock.close()
    return len(checked)


class Injector:
    """Raw sockets in the namespaces of `endpoints` (a run's members), opened on first use and kept until
    `close`: `send(via, src, dst, payload)` sends a UDP datagram from `via`'s namespace with `src`'s data address
    and port as its source (`via` != `src`: spoofed) to `dst`'s. Only the run's data addresses are used."""

    def __init__(self, endpoints: dict[str, Endpoint], port: int = wire.DATA_PORT) -> None:
        self.endpoints = dict(endpoints)
        self.port = port
        self._socks: dict[str, socket.socket] = {}
        self._mtu = MTU_BYTES

    def _endpoint(self, node: str) -> Endpoint:
        try:
            return self.endpoints[node]
        except KeyError:
            raise UsageError(f"{node!r} is not a node of this run; nodes: {', '.join(self.endpoints)}") from None

    def packet(self, src: str, dst: str, payload: bytes) -> bytes:
        """The UDP packet carrying `payload` from `src`'s data address and port to `dst`'s."""
        return packet(self._endpoint(src).ip, self._endpoint(dst).ip, payload, self.port, self.port)

    def _sock(self, via: str) -> socket.socket:
        sock = self._socks.get(via)
        if sock is None:
            sock = self._socks[via] = _raw_socket(self._endpoint(via))
        return sock

    def send_packet(self, via: str, pkt: bytes) -> None:
        """Send a whole IP packet from `via`'s namespace; its addresses must be data addresses of the run."""
        parsed = ipudp.parse(pkt)
        ips = {ep.ip for ep in self.endpoints.values()}
        if parsed is None or parsed.src not in ips or parsed.dst not in ips:
            raise UsageError("an injected packet must be UDP between data addresses of this run")
        self._mtu = _send_one(self._sock(via), pkt, parsed.dst, via, self._mtu)

    def send(self, via: str, src: str, dst: str, payload: bytes) -> None:
        """Send `payload` from `via`'s namespace as UDP from `src`'s data address and port to `dst`'s."""
        self._mtu = _send_one(self._sock(via), self.packet(src, dst, payload), self._endpoint(dst).ip, via,
                              self._mtu)

    def close(self) -> None:
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()

    def __enter__(self) -> "Injector":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


MAX_COUNT = 100_000  # copies of one injected datagram


def copies(pkt: bytes, count: int) -> list[bytes]:
    """`count` copies of `pkt` to send. Raises `UsageError` outside 1..MAX_COUNT."""
    if not 1 <= count <= MAX_COUNT:
        raise UsageError(f"count must be within 1..{MAX_COUNT}, got {count}")
    return [pkt] * count


def packet(src_ip: str, dst_ip: str, payload: bytes, sport: int = wire.DATA_PORT, dport: int = wire.DATA_PORT) -> bytes:
    """The UDP packet (IPv4, or IPv6 for IPv6 addresses) carrying `payload` from `src_ip`:`sport` to
    `dst_ip`:`dport`. Raises `UsageError` for a payload larger than one UDP datagram of that family."""
    most = (ipudp.MAX_IPV6_BYTES - ipudp.IPV6_HEADER_BYTES if ":" in src_ip else ipudp.MAX_IPV4_BYTES - 20) - 8
    if len(payload) > most:
        raise UsageError(f"a UDP datagram {src_ip} -> {dst_ip} carries at most {most} bytes, not {len(payload)}")
    return ipudp.build(src_ip, dst_ip, sport, dport, payload)


def inject(src: Endpoint, dst: Endpoint, payload: bytes, count: int = 1, sport: int = wire.DATA_PORT,
           dport: int = wire.DATA_PORT) -> int:
    """Send `payload` `count` times as UDP from src's data address and port (`sport`) to dst's (`dport`)."""
    return send(src, copies(packet(src.ip, dst.ip, payload, sport, dport), count))


def signed_packet(key: WireKey, pkt: bytes) -> bytes:
    """A whole IP packet whose UDP payload, a splitlab datagram signed or not, is signed with `key` (its old tag,
    if any, replaced: `node.wire.unsign`, then `sign`); a packet that is no UDP or no splitlab datagram as it
    is."""
    parsed = ipudp.parse(pkt)
    if parsed is None or parsed.payload[:2] != wire.MAGIC:
        return pkt
    return ipudp.with_payload(parsed, wire.sign(key, wire.unsign(parsed.payload)))


def by_sender(senders: Iterable[str], packets: Iterable[bytes]) -> dict[str, list[bytes]]:
    """Captured packets grouped by their source address, each one of `senders` (data addresses), in order.
    Raises `UsageError` for a packet that is not UDP from one of them."""
    known = set(senders)
    groups: dict[str, list[bytes]] = {}
    for pkt in packets:
        parsed = ipudp.parse(pkt)
        if parsed is None or parsed.src not in known:
            raise UsageError("a replayed packet must be UDP from a node of this run")
        groups.setdefault(parsed.src, []).append(pkt)
    return groups

