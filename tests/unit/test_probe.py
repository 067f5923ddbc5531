"""chaos.wire.probe's timing: a probe's one-way delay runs from its send time to the kernel's receive timestamp,
so a controller that reads late (a busy machine, a loaded test worker) does not measure its own lateness."""
from __future__ import annotations

import socket
import time

import pytest

from chaos.wire import probe
from node.errors import EnvironmentProblem


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
        arrivals: list[tuple[int, float, float]] = []
        probe._drain(rx, 7, seen, arrivals)
    assert seen == {0: 1}
    assert 0 <= arrivals[0][1] < 50, arrivals  # ms: the arrival, not the read 300 ms later


def test_without_a_kernel_timestamp_the_read_time_stands_in():
    before = time.time()
    assert before <= probe._arrival_s([]) <= time.time()


class FullThenFree:
    """A probe's send socket whose buffer is full for the first `full_for` sends (a shaper holding its datagrams)."""

    def __init__(self, full_for: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # writable at once: select wakes the retry
        self.full_for = full_for
        self.sent: list[bytes] = []

    def fileno(self) -> int:
        return self.sock.fileno()

    def sendto(self, data: bytes, _address) -> int:
        if self.full_for:
            self.full_for -= 1
            raise BlockingIOError
        self.sent.append(data)
        return len(data)


def test_a_probe_is_sent_once_the_send_buffer_has_room_not_counted_lost():
    tx = FullThenFree(full_for=3)
    drained = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        probe._send(tx, rx, probe.Endpoint("n2", 0, "10.0.0.2"), lambda: b"probe", lambda: drained.append(1))
    tx.sock.close()
    assert tx.sent == [b"probe"]


def test_a_send_buffer_that_stays_full_is_an_environment_problem(monkeypatch):
    monkeypatch.setattr(probe, "SEND_TIMEOUT_S", 0.2)
    tx = FullThenFree(full_for=10**9)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, pytest.raises(EnvironmentProblem, match="n2"):
        probe._send(tx, rx, probe.Endpoint("n2", 0, "10.0.0.2"), lambda: b"probe", lambda: None)
    tx.sock.close()


def test_the_delivered_rate_spans_the_first_send_to_the_last_arrival():
    here = probe.Endpoint("lo", None, "127.0.0.1")
    started_s = time.monotonic()
    stats = probe.measure(here, here, count=20, interval_ms=10, settle_ms=500)
    took_s = time.monotonic() - started_s
    assert stats.received == 20
    assert stats.span_s >= 0.19  # 19 gaps of 10 ms
    # and the last probe's one-way delay, not the 0.5 s settle after it (however long the sends took on a busy machine)
    assert stats.span_s < took_s - 0.25
    assert stats.delivered_pps == pytest.approx(20 / stats.span_s)
    assert probe.LinkStats(5, 0, 0, 0).delivered_pps == 0.0



def test_probes_bind_whatever_port_another_socket_of_the_namespace_holds():
    """A probe needs no given port: a socket still bound where probes used to bind (7199, a fixed port; a scenario's
    heal once failed on it with EADDRINUSE) does not stop one."""
    a, b = probe.Endpoint("a", None, "127.0.0.1"), probe.Endpoint("b", None, "127.0.0.2")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        holder.bind(("127.0.0.1", 7199))
        assert probe.reachability({"a": a, "b": b}, [("a", "b"), ("b", "a")]) == {("a", "b"): True, ("b", "a"): True}
        assert probe.measure(b, a, count=5, interval_ms=1, settle_ms=100).received == 5
