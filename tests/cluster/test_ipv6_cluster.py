"""`splitlab up --ipv6` on real containers: a 2-node run on a dual-stack data network whose nodes hear each other
over IPv6, a one-way cut `n2<-n1` measured with plain AF_INET6 UDP sockets opened in the nodes' namespaces
(n1->n2 blocked, n2->n1 passes; ip6tables on the run's bridge), the heal (both pass), and nothing left behind
(ledger, iptables, ip6tables, on the host and in the namespaces);
a delay on one IPv6 link by the NFQUEUE shaper, measured by IPv6 probes; a forged IPv6 datagram injected as n2's,
counted by n1 with n2's IPv6 address, captured as n1 received it and replayed; a forged datagram larger than the
MTU arriving as IPv6 fragments that n1's kernel reassembles.
"""
from __future__ import annotations

import ipaddress
import os
import select
import socket
import subprocess
import time

import pytest

from chaos.cluster import datanet6
from chaos.cluster import lifecycle as clusters
from chaos.host.ledger import Ledger
from chaos.host.netns import socket_in
from chaos.net.docker import DockerNet, probe_endpoints
from chaos.wire import inject, probe
from chaos.wire.capture import read_pcap

pytestmark = pytest.mark.splitlab_cluster
PORT = 7198  # neither the node's port nor the probes'


@pytest.fixture(scope="module")
def run(splitlab_runs_dir):
    if os.geteuid() != 0:
        pytest.fail("cluster tests need root (the controller enters container namespaces)", pytrace=False)
    started = clusters.up(2, runs_dir=splitlab_runs_dir, ipv6=True, wait_timeout_s=30)
    try:
        yield started
    finally:
        Ledger(started.run_dir).heal()
        clusters.down(started.run_id)


def passes(run, src: str, dst: str, tries: int = 5, wait_s: float = 0.3) -> bool:
    """Does a plain AF_INET6 UDP datagram from `src`'s IPv6 data address reach `dst`'s?"""
    a, b = run.node(src), run.node(dst)
    rx = socket_in(b.pid, socket.AF_INET6, socket.SOCK_DGRAM)
    tx = socket_in(a.pid, socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        rx.bind((b.data_ip6, PORT))
        tx.bind((a.data_ip6, 0))
        token = os.urandom(8)
        for _ in range(tries):
            tx.sendto(token, (b.data_ip6, PORT))
            if select.select([rx], [], [], wait_s / tries)[0]:
                data, addr = rx.recvfrom(64)
                if data == token and addr[0] == a.data_ip6:
                    return True
        return bool(select.select([rx], [], [], wait_s)[0]) and rx.recvfrom(64)[0] == token
    finally:
        rx.close()
        tx.close()


def host_rules(tool: str) -> str:
    return subprocess.run([tool, "-w", "-S"], capture_output=True, text=True, check=True).stdout


def leftovers(run) -> list[str]:
    found = [f"ledger: {e.what}" for e in Ledger(run.run_dir).outstanding()]
    found += [f"host {tool}: {line}" for tool in ("iptables", "ip6tables") for line in host_rules(tool).splitlines()
              if run.run_id in line]
    for name, ns in clusters.namespaces(clusters.load(run.run_id)).items():
        for tool in ("iptables", "ip6tables"):
            found += [f"{name} {tool}: {line}" for line in ns.exec([tool, "-S"]).stdout.splitlines()
                      if run.run_id in line]
    return found


def test_nodes_talk_over_ipv6_and_a_one_way_cut_holds_on_ipv6(run):
    prefix = datanet6.ula_prefix(run.run_id)
    for info in run.nodes:
        assert ipaddress.IPv6Address(info.data_ip6) in prefix and info.data_ip  # dual stack: both addresses
        state = run.client(info.name).state()
        assert state["data_ip"] == info.data_ip6  # the node's data socket is bound to its IPv6 address
        assert run.client(info.name).hears() == set(run.names) - {info.name}
    assert passes(run, "n1", "n2") and passes(run, "n2", "n1")

    net = DockerNet(run, seed=3)
    net.partition("n2<-n1")  # verified by IPv4 and IPv6 probes before it returns
    rules = host_rules("ip6tables")  # on the run's bridge, as the IPv4 cut
    assert f"-A SLB-{run.run_id} -s {run.node('n1').data_ip6}/128 -d {run.node('n2').data_ip6}/128" in rules
    assert not passes(run, "n1", "n2"), "n1->n2 should be cut over IPv6"
    assert passes(run, "n2", "n1"), "n2->n1 should pass (the cut is one way)"
    assert {e.what.split()[0] for e in Ledger(run.run_dir).outstanding()} == {"iptables", "ip6tables"}

    net.heal_all()  # what 'splitlab heal' runs: every ledger entry, both families
    assert passes(run, "n1", "n2") and passes(run, "n2", "n1")
    assert leftovers(run) == []


def test_the_shaper_delays_one_ipv6_link(run):
    ends = probe_endpoints(run, ipv6=True)
    with DockerNet(run, seed=3) as net:
        net.slow(delay_ms=30, links=[("n1", "n2")])
        slow = probe.measure(ends["n1"], ends["n2"], count=100, interval_ms=2)
        other = probe.measure(ends["n2"], ends["n1"], count=100, interval_ms=2)
    assert slow.received == 100 and slow.percentile_ms(50) >= 28, slow.as_dict()
    assert other.received == 100 and other.percentile_ms(50) < 10, other.as_dict()
    assert leftovers(run) == []


def dropped(run, node: str) -> dict[str, int]:
    return run.client(node).state()["dropped"]


def wait_until(check, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_inject_capture_and_replay_work_over_ipv6(run):
    n1, n2 = run.node("n1"), run.node("n2")
    foreign = inject.forge("some-other-run", "n2", [inject.message("Heartbeat", counter=1)])
    pcap = run.run_dir / "chaos" / "inject6.pcap"
    before = dropped(run, "n1").get("foreign", 0)
    with DockerNet(run, seed=3) as net:
        with net.capture(pcap):
            net.inject("n2", "n1", foreign)
            wait_until(lambda: dropped(run, "n1").get("foreign", 0) == before + 1, "n1 to count the datagram")
        history = run.run_dir / "events" / "n1.jsonl"
        wait_until(lambda: f'"src_ip":"{n2.data_ip6}"' in history.read_text(), "datagram_dropped with n2's IPv6")
        captured = [pkt for _, pkt in read_pcap(pcap) if pkt.endswith(foreign)]
        assert len(captured) == 1 and captured[0][0] >> 4 == 6
        assert captured[0][8:24] == socket.inet_pton(socket.AF_INET6, n2.data_ip6)
        assert captured[0][24:40] == socket.inet_pton(socket.AF_INET6, n1.data_ip6)
        assert net.replay(captured) == 1
        wait_until(lambda: dropped(run, "n1").get("foreign", 0) == before + 2, "n1 to count the replay")

        # larger than the MTU: IPv6 fragments from n2's namespace, reassembled by n1's kernel into one datagram
        large = inject.forge("some-other-run", "n2", [inject.message("Heartbeat", counter=2)]) + bytes(4000)
        assert len(inject.fragment(inject.packet(n2.data_ip6, n1.data_ip6, large))) == 3
        total = sum(dropped(run, "n1").values())
        net.inject("n2", "n1", large)
        wait_until(lambda: sum(dropped(run, "n1").values()) == total + 1, "n1 to count the reassembled datagram")
    assert leftovers(run) == []
