"""Capture of a run's data traffic as pcap (LINKTYPE_RAW: IPv4 packets), readable by Wireshark and scapy.

One AF_PACKET socket per node namespace (opened from this process, `chaos.netns.socket_in`) records the UDP
packets the node *receives* on its data address, so every packet appears once, as its receiver got it (after
faults). A background thread writes them; `Capture` is a context manager. Replay them with `chaos.inject.replay`.
"""
from __future__ import annotations

import select
import socket
import struct
import threading
import time
from pathlib import Path

from chaos.netns import socket_in
from chaos.probe import Endpoint
from chaos.shaper import ipv4
from node.errors import EnvironmentProblem

ETH_P_IP = 0x0800
PACKET_OUTGOING = 4
LINKTYPE_RAW = 101


def write_header(fh) -> None:
    fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINKTYPE_RAW))


def write_packet(fh, ts_s: float, data: bytes) -> None:
    sec = int(ts_s)
    fh.write(struct.pack("<IIII", sec, int((ts_s - sec) * 1e6), len(data), len(data)) + data)


def read_pcap(path: Path) -> list[tuple[float, bytes]]:
    """(timestamp, IPv4 packet) pairs of a LINKTYPE_RAW pcap written here."""
    data = Path(path).read_bytes()
    magic, _, _, _, _, _, linktype = struct.unpack_from("<IHHiIII", data)
    if magic != 0xA1B2C3D4 or linktype != LINKTYPE_RAW:
        raise EnvironmentProblem(f"{path} is not a raw-IP pcap written by splitlab")
    out, pos = [], 24
    while pos + 16 <= len(data):
        sec, usec, length, _ = struct.unpack_from("<IIII", data, pos)
        out.append((sec + usec / 1e6, data[pos + 16:pos + 16 + length]))
        pos += 16 + length
    return out


class Capture:
    """Records UDP packets received by `endpoints` on their data addresses into `path` until `stop`."""

    def __init__(self, endpoints: dict[str, Endpoint], path: Path) -> None:
        self.endpoints = endpoints
        self.path = Path(path)
        self.count = 0
        self._stop = threading.Event()
        self._socks: dict[socket.socket, str] = {}
        self._thread: threading.Thread | None = None

    def start(self) -> "Capture":
        for ep in self.endpoints.values():
            sock = socket_in(ep.pid, socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
            sock.setblocking(False)
            self._socks[sock] = ep.ip
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "wb")
        write_header(self._fh)
        self._thread = threading.Thread(target=self._loop, name="capture", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            for sock in select.select(list(self._socks), [], [], 0.05)[0]:
                while True:
                    try:
                        data, addr = sock.recvfrom(65535)
                    except BlockingIOError:
                        break
                    pkt = ipv4.parse(data)
                    if addr[2] == PACKET_OUTGOING or pkt is None or pkt.dst != self._socks[sock]:
                        continue
                    write_packet(self._fh, time.time(), data)
                    self.count += 1

    def stop(self) -> int:
        """Stop, close the file and return how many packets were written."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for sock in self._socks:
            sock.close()
        self._fh.close()
        return self.count

    def __enter__(self) -> "Capture":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
