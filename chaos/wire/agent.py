"""The wire agent: forged packets and captures for a node on another host of a multi-host run. It runs there in a
container of the agent image inside the node's network namespace (`docker run --network container:<node>`,
`python3 -m chaos.wire.agent ...`), driven by the controller through chaos.wire.remote; the sockets are the ones
of one machine (chaos.wire.inject, chaos.wire.capture), opened in the agent's own namespace.

- `send --ip IP`: whole IPv4/UDP or IPv6/UDP packets on stdin, each framed by its length (4 bytes, big-endian), sent on a
  raw socket with the shaper's bypass mark (fragmented beyond the MTU); each must come from IP, the node's data
  address. The whole input is read and checked before the first packet goes out. Prints `{"sent": N}`.
- `capture --ip IP --out FILE`: the packets the node receives on IP, into the pcap FILE, until SIGTERM or
  SIGINT. FILE exists (with its pcap header) once the socket is open. Prints `{"captured": N}`.

Bad input ends it with exit status 2 and one line on stderr (nothing of it was sent); a failing socket with 1.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from chaos.net.shaper import ipudp
from chaos.wire import inject
from chaos.wire.capture import Capture
from chaos.wire.probe import Endpoint
from node.errors import SplitlabError, UsageError

FRAME_HEADER_BYTES = 4
MAX_PACKET_BYTES = ipudp.MAX_IPV6_BYTES  # the larger family's most; `inject.send` holds each to its own


def frame(packets: list[bytes]) -> bytes:
    """The agent's stdin for `send`: each packet preceded by its length."""
    out = bytearray()
    for pkt in packets:
        if not 0 < len(pkt) <= MAX_PACKET_BYTES:
            raise UsageError(f"a packet of {len(pkt)} bytes cannot be sent (1..{MAX_PACKET_BYTES})")
        out += len(pkt).to_bytes(FRAME_HEADER_BYTES, "big") + pkt
    return bytes(out)


def unframe(data: bytes) -> list[bytes]:
    """The packets of `frame`'s output. Raises `UsageError` for a cut or oversized frame."""
    packets, pos = [], 0
    while pos < len(data):
        if pos + FRAME_HEADER_BYTES > len(data):
            raise UsageError(f"input ends inside a frame header at byte {pos}")
        length = int.from_bytes(data[pos:pos + FRAME_HEADER_BYTES], "big")
        pos += FRAME_HEADER_BYTES
        if not 0 < length <= MAX_PACKET_BYTES:
            raise UsageError(f"frame at byte {pos - FRAME_HEADER_BYTES} claims {length} bytes "
                             f"(1..{MAX_PACKET_BYTES})")
        if pos + length > len(data):
            raise UsageError(f"input ends inside a packet of {length} bytes at byte {pos}")
        packets.append(data[pos:pos + length])
        pos += length
    return packets


def _send(ip: str) -> dict[str, int]:
    return {"sent": inject.send(Endpoint("agent", None, ip), unframe(sys.stdin.buffer.read()))}


def _capture(ip: str, out: Path) -> dict[str, int]:
    ending = {signal.SIGTERM, signal.SIGINT}
    # Blocked before the capture thread starts (it inherits the mask), taken by sigwait: a blocked signal is
    # delivered even to PID 1 of a container, which ignores SIGTERM it has no handler for.
    signal.pthread_sigmask(signal.SIG_BLOCK, ending)
    capture = Capture({"agent": Endpoint("agent", None, ip)}, out).start()
    print("capturing", flush=True)
    signal.sigwait(ending)
    return {"captured": capture.stop()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m chaos.wire.agent", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    send = sub.add_parser("send", help="send framed UDP packets (IPv4 or IPv6) read from stdin")
    send.add_argument("--ip", required=True, help="the node's data address: every packet's source")
    capture = sub.add_parser("capture", help="capture what the node receives until SIGTERM")
    capture.add_argument("--ip", required=True, help="the node's data address")
    capture.add_argument("--out", required=True, type=Path, help="the pcap file to write")
    args = parser.parse_args(argv)
    try:
        result = _send(args.ip) if args.verb == "send" else _capture(args.ip, args.out)
    except SplitlabError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
