"""Raw UDP baseline for benchmarks: `recv HOST PORT SECONDS` counts datagrams received for SECONDS after the
first one and prints the rate and its CPU per datagram (us, user and system; read back with `result`);
`send HOST PORT SIZE SECONDS` sends SIZE-byte datagrams as fast as it can and prints the same of its sends. Run
inside node
namespaces with nsenter, so the baseline crosses exactly the path the nodes use."""
from __future__ import annotations

import socket
import sys
import time


def recv(host: str, port: int, seconds: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    sock.bind((host, port))
    sock.settimeout(seconds + 5)
    print("ready", flush=True)
    sock.recv(65535)
    count = 1
    cpu_s = time.process_time()
    end = time.monotonic() + seconds
    sock.settimeout(0.5)
    while time.monotonic() < end:
        try:
            sock.recv(65535)
            count += 1
        except socket.timeout:
            pass
    print(count / seconds, (time.process_time() - cpu_s) / count * 1e6, flush=True)


def result(output: str) -> tuple[float, float]:
    """(datagrams/s, CPU us per datagram) from the output of `recv`."""
    rate, cpu_us = output.split()[-2:]
    return float(rate), float(cpu_us)


def send(host: str, port: int, size: int, seconds: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = b"x" * size
    sent = 0
    cpu_s = time.process_time()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(100):
            try:
                sock.sendto(payload, (host, port))
                sent += 1
            except OSError:  # ENOBUFS when the queue is full: the receiver, not the sender, sets the rate
                pass
    print(sent / seconds, (time.process_time() - cpu_s) / max(1, sent) * 1e6, flush=True)


if __name__ == "__main__":
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "recv":
        recv(host, port, float(sys.argv[4]))
    else:
        send(host, port, int(sys.argv[4]), float(sys.argv[5]))
