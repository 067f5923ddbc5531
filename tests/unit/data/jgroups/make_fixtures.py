"""Turn a loopback pcap of JGroups traffic and FrameSource's log into a fixture file (see README.md).

    python3 make_fixtures.py CAPTURE.pcap FRAMESOURCE.jsonl OUT.frames

Each UDP datagram of the pcap (Ethernet/IPv4/UDP, as `tcpdump -i lo` writes them) becomes one line
`SPORT DPORT HEX NOTE`, NOTE being FrameSource's JSON record of the same bytes received on DPORT from SPORT (what
JGroups' own code read from them), or `null` when no member received it (header class names are shortened to the
part after the package). Identical (SPORT, DPORT, bytes) datagrams
are kept once. Standard library only.
"""
from __future__ import annotations

import json
import struct
import sys

PCAP_HEADER_LEN = 24
RECORD_HEADER_LEN = 16
ETHERNET_HEADER_LEN = 14
ETHERTYPE_IPV4 = 0x0800
IPPROTO_UDP = 17
UDP_HEADER_LEN = 8


def udp_datagrams(pcap: bytes):
    """Yield (sport, dport, payload) of every IPv4/UDP frame of a little- or big-endian Ethernet pcap."""
    magic = pcap[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    offset = PCAP_HEADER_LEN
    while offset + RECORD_HEADER_LEN <= len(pcap):
        _sec, _frac, captured_len, _orig_len = struct.unpack_from(endian + "IIII", pcap, offset)
        frame = pcap[offset + RECORD_HEADER_LEN:offset + RECORD_HEADER_LEN + captured_len]
        offset += RECORD_HEADER_LEN + captured_len
        (ethertype,) = struct.unpack_from("!H", frame, 12)
        if ethertype != ETHERTYPE_IPV4:
            continue
        ip = frame[ETHERNET_HEADER_LEN:]
        ihl_bytes = (ip[0] & 0x0F) * 4
        (total_len,) = struct.unpack_from("!H", ip, 2)
        if ip[9] != IPPROTO_UDP:
            continue
        udp = ip[ihl_bytes:total_len]
        sport, dport, udp_len = struct.unpack_from("!HHH", udp, 0)
        yield sport, dport, bytes(udp[UDP_HEADER_LEN:udp_len])


def main(pcap_path: str, log_path: str, out_path: str) -> None:
    notes: dict[tuple[int, int, str], dict] = {}
    with open(log_path) as log:
        for line in log:
            record = json.loads(line)
            hex_bytes = record.pop("hex")
            for message in record.get("messages", ()):
                for header in message["headers"]:
                    header["class"] = header["class"].rsplit(".", 1)[-1]  # e.g. UNICAST2$Unicast2Header
            notes.setdefault((record.get("from_port", -1), record.get("recv_port", -1), hex_bytes), record)
    with open(pcap_path, "rb") as f:
        pcap = f.read()
    seen: set[tuple[int, int, str]] = set()
    kept = unnoted = 0
    with open(out_path, "w") as out:
        for sport, dport, payload in udp_datagrams(pcap):
            key = (sport, dport, payload.hex())
            if key in seen:
                continue
            seen.add(key)
            note = notes.get(key)
            unnoted += note is None
            kept += 1
            out.write(f"{sport} {dport} {payload.hex()} {json.dumps(note, separators=(',', ':'))}\n")
    print(f"{out_path}: {kept} datagrams ({unnoted} without a JGroups note)", file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:4])
