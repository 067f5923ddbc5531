"""The wire agent (chaos.wire.agent), the process that sends and captures for a node on another host: its framing
of packets on stdin takes any bytes a sender may write, and bad input ends it with status 2 before anything is
sent (the checks run here, outside any namespace: nothing reaches a socket)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.net.shaper import ipudp
from chaos.wire import agent
from node.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
PKT = ipudp.build("10.77.0.2", "10.77.0.3", 7100, 7100, b"hello")


def test_frames_round_trip_packets_of_every_size_up_to_the_ipv6_maximum():
    packets = [PKT, b"\x45" + bytes(agent.MAX_PACKET_BYTES - 1), b"x"]
    assert agent.unframe(agent.frame(packets)) == packets
    assert agent.unframe(b"") == []


@pytest.mark.parametrize("size", [0, agent.MAX_PACKET_BYTES + 1])
def test_a_packet_that_cannot_be_framed_is_refused(size):
    with pytest.raises(UsageError, match=f"{size} bytes"):
        agent.frame([bytes(size)])


@pytest.mark.parametrize("data, says", [
    (b"\x00\x00", "inside a frame header"),
    (b"\x00\x00\x00\x10abc", "inside a packet of 16 bytes"),
    (b"\x00\x00\x00\x00", "claims 0 bytes"),
    (b"\xff\xff\xff\xff" + bytes(8), "claims 4294967295 bytes"),
])
def test_a_cut_or_lying_frame_is_a_usage_error_naming_where(data, says):
    with pytest.raises(UsageError, match=says):
        agent.unframe(agent.frame([PKT]) + data)


@pytest.mark.parametrize("stdin, says", [
    (agent.frame([PKT])[:-1], "inside a packet"),
    (agent.frame([PKT, b"\x45not-a-packet"]), "packet 1 is not UDP from 10.77.0.2"),
    (agent.frame([ipudp.build("10.77.0.9", "10.77.0.3", 7100, 7100, b"spoofed")]), "packet 0 is not"),
    # longer than an IPv4 total length can say (its fragment offsets would overflow): not an IPv4 packet
    (agent.frame([PKT + bytes(ipudp.MAX_IPV4_BYTES + 1 - len(PKT))]), "packet 0 is not UDP from 10.77.0.2"),
])
def test_the_agent_refuses_bad_input_with_status_2_before_sending(stdin, says):
    proc = subprocess.run([sys.executable, "-m", "chaos.wire.agent", "send", "--ip", "10.77.0.2"], input=stdin,
                          capture_output=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr.decode()
    assert proc.stdout == b""
