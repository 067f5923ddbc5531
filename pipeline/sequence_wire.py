"""The receptions a run's capture saw, for the message sequence diagram (`pipeline.sequence`).

`splitlab chaos capture` writes `runs/<run>/chaos/capture.pcap`: every datagram as its receiver got it (after the
faults). Each is read with `chaos.wire.capture.read_pcap` (IPv4 or IPv6) and dissected: splitlab's wire with
`chaos.wire.dissect`, the real JGroups 2.12's with `jgnode.wire`. Every message of a type the diagram draws becomes
a reception `End` (`wire=True`) from the datagram's sender (splitlab's: its header; JGroups', which carries
addresses, not names: the node that owns the source address) to the node that owns the destination address (the
nodes' `node_start.data_ip`). Datagrams of other ports, of unknown addresses, or that do not dissect are
skipped; so are messages outside [start_ts, end_ts].
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from pipeline.sequence import MESSAGE_TYPES, End, key_of

CAPTURE_FILE = Path("chaos") / "capture.pcap"
MAX_REQUEST_SEQNOS = 1000  # seqnos listed for one range request (as the JGroups node's history lists them)


def capture_path(run_dir: Path) -> Path | None:
    """The run's capture file, or None when it has none."""
    path = Path(run_dir) / CAPTURE_FILE
    return path if path.is_file() else None


def captured_ends(path: Path, node_of_ip: Mapping[str, str], start_ts: float, end_ts: float) -> list[End]:
    """The receptions in the capture `path` between `start_ts` and `end_ts`. Raises `UsageError` when it is not
    a capture file."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6

    from chaos.wire import dissect
    from chaos.wire.capture import read_pcap
    from jgnode import wire as jgwire
    from node.errors import WireError

    ends: list[End] = []
    for ts, raw in read_pcap(path):
        if not start_ts <= ts <= end_ts:
            continue
        packet = IPv6(raw) if raw[0] >> 4 == 6 else IP(raw)
        dst = node_of_ip.get(packet.dst)
        if dst is None or UDP not in packet:
            continue
        payload = bytes(packet[UDP].payload)
        if jgwire.looks_like(payload):
            src = node_of_ip.get(packet.src)
            try:
                messages = jgwire.decode_datagram(payload).messages if src is not None else ()
            except WireError:
                continue
            for jg_message in messages:
                name, fields = jgwire.classify(jg_message)
                if name in MESSAGE_TYPES:
                    if "high" in fields:  # a range request: the seqnos it asks for, as the history lists them
                        high = min(fields["high"], fields["seqno"] + MAX_REQUEST_SEQNOS - 1)
                        fields["seqnos"] = list(range(fields["seqno"], high + 1))
                    ends.append(End(ts, src, dst, name, key_of(name, fields), fields, wire=True))
            continue
        if dissect.SL not in packet:
            continue
        datagram = packet[dissect.SL]
        src = datagram.sender.decode(errors="replace")
        for message in datagram.messages:
            name = dissect.type_name(message.type)
            if name not in MESSAGE_TYPES:
                continue
            fields = dissect.fields_of(message)
            if "seqnos" in fields:
                fields["seqnos"] = list(fields["seqnos"])
            ends.append(End(ts, src, dst, name, key_of(name, fields), fields, wire=True))
    return ends
