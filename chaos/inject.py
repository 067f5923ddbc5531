"""Forged and replayed node datagrams, sent from inside the claimed sender's namespace so that their source
address (and port) is the sender's real one.

`forge` builds the bytes of a datagram with scapy (chaos.dissect), e.g. a stale `UnicastAck` with a chosen
seqno and conn_id; `send` puts IPv4/UDP packets on a raw socket opened in the sender's namespace. The raw
socket's packets carry the shaper's bypass mark: injected packets skip the sender's link faults (they are the
fault), but a partition on the receiver still drops them, as it would the real sender's. `replay` sends
captured packets again from their original sender.
"""
from __future__ import annotations

import socket
from typing import Iterable

from scapy.packet import Packet

from chaos import dissect
from chaos.netns import socket_in
from chaos.probe import Endpoint
from chaos.shaper import ipv4
from chaos.shaper.spec import BYPASS_MARK
from node import wire
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


def send(src: Endpoint, packets: Iterable[bytes]) -> int:
    """Send whole IPv4 packets from inside `src`'s namespace; returns how many went out."""
    sock = socket_in(src.pid, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sent = 0
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, BYPASS_MARK)
        for pkt in packets:
            parsed = ipv4.parse(pkt)
            if parsed is None:
                raise UsageError("only IPv4/UDP packets can be sent")
            if parsed.src != src.ip:
                raise UsageError(f"packet source {parsed.src} is not {src.node}'s data address {src.ip}")
            try:
                sock.sendto(pkt, (parsed.dst, 0))
            except OSError as exc:
                raise EnvironmentProblem(f"sending from {src.node}'s namespace failed: {exc}") from None
            sent += 1
    finally:
        sock.close()
    return sent


def inject(src: Endpoint, dst: Endpoint, payload: bytes, count: int = 1, sport: int = wire.DATA_PORT,
           dport: int = wire.DATA_PORT) -> int:
    """Send `payload` `count` times as UDP from src's data address and port (`sport`) to dst's (`dport`)."""
    if not 1 <= count <= 100_000:
        raise UsageError(f"count must be within 1..100000, got {count}")
    pkt = ipv4.build(src.ip, dst.ip, sport, dport, payload)
    return send(src, [pkt] * count)


def replay(endpoints: dict[str, Endpoint], packets: Iterable[bytes]) -> int:
    """Send captured IPv4 packets again, each from the namespace of the node whose data address sent it."""
    by_ip = {ep.ip: ep for ep in endpoints.values()}
    groups: dict[str, list[bytes]] = {}
    for pkt in packets:
        parsed = ipv4.parse(pkt)
        if parsed is None or parsed.src not in by_ip:
            raise UsageError("a replayed packet must be IPv4/UDP from a node of this run")
        groups.setdefault(parsed.src, []).append(pkt)
    return sum(send(by_ip[ip], pkts) for ip, pkts in groups.items())
