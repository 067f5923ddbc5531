"""How the shaper sends the packets it makes itself (duplicates, messages split off or held by message rules):
as the node's own UDP datagrams, the kernel fragmenting those larger than the MTU, and every one it cannot send
counted by reason.

Why not a raw IP socket: with IP_HDRINCL (which IPPROTO_RAW implies) the kernel takes a finished IP packet and
never fragments it; above the device's MTU, sendto fails with EMSGSIZE. NFQUEUE hands the shaper packets in
OUTPUT, before fragmentation, so a bundle larger than the MTU (its DF bit clear: the kernel fragments it after
the hooks) arrives whole, and its copy could not be sent: duplication silently did nothing for large bundles.

What works in a node's namespace, and what does not:
- a UDP socket bound to the original source (IP_FREEBIND / IP_TRANSPARENT): the source address is local here,
  but the port is the node's data port, bound by the node; sharing it needs SO_REUSEPORT on the node's socket
  too, and would then split the node's incoming traffic;
- fragmenting in userspace for the HDRINCL socket: the path MTU and a fresh IP id per copy, the kernel's job
  done again;
- a raw socket of protocol UDP *without* IP_HDRINCL (used here): the shaper writes the UDP header and payload
  (the original's ports and checksum), the kernel writes the IP header, with the original's source address
  given per packet by IP_PKTINFO (the address is local in this namespace, so routing accepts it), and
  fragments as for any socket in the default path-MTU mode: DF up to the MTU, fragments above it. Every copy
  gets an IP id of its own, so a receiver never mixes a copy's fragments with the original's. The bypass mark
  (SO_MARK) keeps the copies out of the queue.
A raw UDP socket also receives a clone of every UDP datagram the namespace receives; a socket filter that
accepts nothing keeps its queue empty.

IPv6 packets (a `splitlab up --ipv6` run) leave the same way through a raw IPv6 UDP socket: the source given by
IPV6_PKTINFO, the UDP checksum (computed for that source) as in the original.
"""
from __future__ import annotations

import ctypes
import errno
import socket
import struct
from collections import Counter
from typing import Any

from chaos.net.shaper import ipudp

IP_PKTINFO = 8  # <linux/in.h>; Python's socket module does not name it
IPV6_PKTINFO = 50  # <linux/in6.h>
SO_ATTACH_FILTER = 26  # <asm-generic/socket.h>
BPF_RET_K = 0x06  # BPF_RET | BPF_K: return a constant (the number of bytes to accept)


def open_socket(mark: int, family: int = socket.AF_INET) -> socket.socket:
    """The raw UDP socket described in the module docstring (of `family`): kernel-built IP headers, the bypass
    `mark`, and a filter that accepts no incoming datagram. Raises `PermissionError` without CAP_NET_RAW."""
    sock = socket.socket(family, socket.SOCK_RAW, socket.IPPROTO_UDP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
    accept_nothing = ctypes.create_string_buffer(struct.pack("=HBBI", BPF_RET_K, 0, 0, 0))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack("@HP", 1, ctypes.addressof(accept_nothing)))
    return sock


def pktinfo(src: str) -> bytes:
    """struct in_pktinfo {int ifindex; in_addr spec_dst; in_addr addr}: send with source address `src`."""
    return struct.pack("=i4s4s", 0, socket.inet_aton(src), bytes(4))


def pktinfo6(src: str) -> bytes:
    """struct in6_pktinfo {in6_addr addr; int ifindex}: send with source address `src`."""
    return struct.pack("=16si", socket.inet_pton(socket.AF_INET6, src), 0)


def open_whole_socket(mark: int) -> socket.socket:
    """An IPv4 IPPROTO_RAW socket (IP_HDRINCL: the packet goes out with its own header) with the bypass `mark`; it
    receives nothing. Raises `PermissionError` without CAP_NET_RAW."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
    return sock


class ExtraSender:
    """Sends the shaper's own packets (whole IPv4/UDP or IPv6/UDP packets, as the engine makes them; the latter
    through `sock6`) and counts them: `sent`, and `failed` by reason (the errno's name, `not_udp`, or
    `no_ipv6_socket`). `whole` (an `open_whole_socket`) sends delayed originals as they are (`send_whole`)."""

    def __init__(self, sock: Any, sock6: Any = None, whole: Any = None) -> None:
        self.sock = sock
        self.sock6 = sock6
        self.whole = whole
        self.sent = 0
        self.failed: Counter[str] = Counter()
        self._addresses: dict[bytes, tuple[str, int]] = {}  # IPv4 destination bytes -> sendto's address

    def can_send(self, packet: bytes) -> bool:
        """Whether this sender has a socket for `packet`'s IP version (an IPv6 packet needs `sock6`)."""
        return self.sock6 is not None or packet[0] >> 4 != 6

    def send_whole(self, packet: bytes) -> bool:
        """Send an IPv4 packet unchanged, its IP header included (id, TTL, DF: a delayed original is the original,
        not a copy), when it fits the MTU; `send` takes it above the MTU (the kernel does not fragment an
        IP_HDRINCL packet: EMSGSIZE), and an IPv6 one, or any where there is no `whole` socket. Returns whether
        it went."""
        if self.whole is None or packet[0] >> 4 != 4:
            return self.send(packet)
        dst = packet[16:20]
        address = self._addresses.get(dst)
        if address is None:
            address = self._addresses[dst] = (socket.inet_ntoa(dst), 0)
        try:
            self.whole.sendto(packet, address)
        except OSError as exc:
            if exc.errno == errno.EMSGSIZE:
                return self.send(packet)
            self._failed(exc)
            return False
        self.sent += 1
        return True

    def send(self, packet: bytes) -> bool:
        """Send `packet`'s UDP datagram from its source to its destination. Returns whether it went."""
        pkt = ipudp.parse(packet)
        if pkt is None:
            self.failed["not_udp"] += 1
            return False
        segment = pkt.raw[pkt.header_len:pkt.header_len + 8 + len(pkt.payload)]
        if pkt.version == 6 and self.sock6 is None:
            self.failed["no_ipv6_socket"] += 1
            return False
        try:
            if pkt.version == 6:
                self.sock6.sendmsg([segment], [(socket.IPPROTO_IPV6, IPV6_PKTINFO, pktinfo6(pkt.src))], 0,
                                   (pkt.dst, 0))
            else:
                self.sock.sendmsg([segment], [(socket.IPPROTO_IP, IP_PKTINFO, pktinfo(pkt.src))], 0, (pkt.dst, 0))
        except OSError as exc:  # ENOBUFS, EPERM (an OUTPUT rule dropped it), EMSGSIZE (beyond 64 KB), ...
            self._failed(exc)
            return False
        self.sent += 1
        return True

    def _failed(self, exc: OSError) -> None:
        self.failed[errno.errorcode.get(exc.errno, str(exc.errno))] += 1

    def stats(self) -> dict[str, Any]:
        """The counters for the shaper's stats file: `extra_sent` and `extra_send_failed` {reason: count}."""
        return {"extra_sent": self.sent, "extra_send_failed": dict(sorted(self.failed.items()))}
