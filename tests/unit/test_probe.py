"""chaos.wire.probe's timing: a probe's one-way delay runs from its send time to the kernel's receive timestamp,
so a controller that reads late (a busy machine, a loaded test worker) does not measure its own lateness."""
from __future__ import annotations

import socket
import time

from chaos.wire import probe


def test_a_probe_read_late_is_timed_by_its_arrival_not_by_the_read():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.bind(("127.0.0.1", 0))
        rx.setsockopt(socket.SOL_SOCKET, probe._SO_TIMESTAMPNS, 1)
        rx.setblocking(False)
        # the kernel turns receive timestamps on a moment after the first socket asks (deferred work); a datagram
        # that arrives before is stamped when it is read: one warm-up datagram, then the measured one
        tx.sendto(b"warm-up", rx.getsockname())
        time.sleep(0.1)
        rx.recvmsg(64, probe._ANCILLARY_BYTES)
        tx.sendto(probe._FORMAT.pack(probe._MAGIC, 7, 0, time.time()), rx.getsockname())
        time.sleep(0.3)  # the reader is late
        seen: dict[int, int] = {}
        arrivals: list[tuple[int, float]] = []
        probe._drain(rx, 7, seen, arrivals)
    assert seen == {0: 1}
    assert 0 <= arrivals[0][1] < 50, arrivals  # ms: the arrival, not the read 300 ms later


def test_without_a_kernel_timestamp_the_read_time_stands_in():
    before = time.time()
    assert before <= probe._arrival_s([]) <= time.time()
