"""The chaos controller on real containers, measured from outside the nodes with UDP probes between their
namespaces: loss, delay (with a distribution), duplication and reordering under each link-fault backend this
kernel has (the NFQUEUE shaper everywhere, netem where sch_netem exists: otherwise those cases are reported as
skipped, never as passed), the netem backend's classifier tree on the real kernel, one-way partitions,
protocol-aware drops, injection with a real source address, heal after a SIGKILLed controller, and bad input.

One 3-node run serves the module (starting one costs seconds on 2 cores); every test works through a `Net`
that heals on exit, and the `clean` fixture then checks that no chain, rule or shaper process is left, also
after a failure. The run is removed at the end of the module whatever happened.
"""
from __future__ import annotations

import os
import dataclasses
import fcntl
import functools
import json
import math
import re
import signal
import socket
import subprocess
import statistics
import sys
import time

import cluster_wait
import docker
import pytest

from chaos.cluster import lifecycle as clusters
from chaos.wire import cutwatch, inject, probe
from chaos.wire.capture import read_pcap
from chaos.host.ledger import Ledger, process_cmdline
from chaos.faults.grudge import Jam, LinkFault
from chaos.net.docker import DockerNet
from chaos.net.backends import capabilities
from chaos.host.netns import socket_in
from chaos.net import netem
from chaos.net.shaper import control as shaper_control
from chaos.faults.msgrules import MsgRule
from node import wire
from node.errors import EnvironmentProblem, UsageError

pytestmark = pytest.mark.splitlab_cluster
SETTLE_S = 2.5  # more than the nodes' 1.5 s silence threshold


@pytest.fixture(scope="module")
def run(splitlab_runs_dir):
    if os.geteuid() != 0:
        pytest.fail("cluster tests need root (the controller enters container namespaces)", pytrace=False)
    started = clusters.up(3, runs_dir=splitlab_runs_dir)
    try:
        yield started
    finally:
        Ledger(started.run_dir).heal()
        clusters.down(started.run_id)


def shaper_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and "chaos.net.shaper" in process_cmdline(int(p))]


def leftovers(run) -> list[str]:
    """Chains, qdiscs and shaper processes of `run` still there."""
    found = []
    for name, ns in clusters.namespaces(clusters.load(run.run_id)).items():
        rules = ns.exec(["iptables", "-S"]).stdout
        found += [f"{name}: {line}" for line in rules.splitlines() if run.run_id in line]
        qdisc = ns.exec(["tc", "qdisc", "show"], check=False).stdout
        found += [f"{name}: {line}" for line in qdisc.splitlines() if "netem" in line or "htb" in line]
    spec_dir = str(run.run_dir / "chaos")
    found += [f"shaper pid {pid}" for pid in shaper_pids() if any(spec_dir in a for a in process_cmdline(pid))]
    found += [f"ledger: {e.what}" for e in Ledger(run.run_dir).outstanding()]
    return found


@pytest.fixture
def net(run):
    """A Net on the module's run that heals on exit; the test fails if anything is left behind."""
    n = DockerNet(run, seed=11)
    try:
        yield n
    finally:
        n.heal_all()
    assert leftovers(run) == []


@pytest.fixture(params=["nfqueue", "netem"])
def backend(request):
    """Each link-fault backend; netem only where this kernel has it (else the case is skipped, saying why)."""
    ok, detail = capabilities()[request.param]
    if not ok:
        pytest.skip(f"backend {request.param} is not available on this kernel: {detail}")
    return request.param


def endpoints(run) -> dict[str, probe.Endpoint]:
    return {n.name: probe.Endpoint(n.name, n.pid, n.data_ip) for n in run.nodes}


wait_for = functools.partial(cluster_wait.wait_for, while_restarting=True)  # nodes restart in these tests


def test_loss_is_within_2_points_of_the_asked_over_5000_probes(run, net, backend):
    net.link_backend = backend
    net.flaky(10, links=[("n1", "n2")])
    eps = endpoints(run)
    stats = probe.measure(eps["n1"], eps["n2"], count=5000, interval_ms=0.4)
    assert abs(stats.loss_pct - 10) <= 2, stats.as_dict()
    back = probe.measure(eps["n2"], eps["n1"], count=500, interval_ms=0.4)
    assert back.loss_pct == 0, back.as_dict()  # only the asked direction


def test_mean_delay_within_2_ms_at_20_ms_and_only_toward_the_asked_peer(run, net, backend):
    net.link_backend = backend
    net.slow(20, links=[("n1", "n2")])
    eps = endpoints(run)
    shaped = probe.measure(eps["n1"], eps["n2"], count=2000, interval_ms=1)
    plain = probe.measure(eps["n1"], eps["n3"], count=500, interval_ms=1)
    assert abs(shaped.mean_delay_ms - 20) <= 2 and shaped.loss_pct == 0, shaped.as_dict()
    assert plain.mean_delay_ms < 2, plain.as_dict()
    assert run.all_hear_all()  # the control network answers; the nodes still hear each other
    if backend == "nfqueue":  # root here: the shaper runs ahead of the loaded test workers, like a qdisc
        stats = run.run_dir / "chaos" / "shaper-n1.json.stats"
        wait_for(lambda: stats.exists() and json.loads(stats.read_text()).get("scheduling") == "fifo 1",
                 what="the shaper's stats saying it runs SCHED_FIFO")


def test_normal_jitter_has_the_asked_mean_and_spread(run, net, backend):
    """A 5 ms normal jitter: its mean and spread taken net of the delay measured without jitter in the same run,
    whose release lag and noise a loaded machine adds to both (the mean lag subtracts; independent noise adds in
    quadrature). The 20 ms delay itself is the test above's; here the jitter must add no mean and its spread."""
    net.link_backend = backend
    eps = endpoints(run)
    net.slow(20, links=[("n1", "n2")])
    plain = probe.measure(eps["n1"], eps["n2"], count=500, interval_ms=1)
    noise_ms = statistics.stdev(plain.delays_ms)
    net.slow(20, jitter_ms=5, distribution="normal", links=[("n1", "n2")])
    stats = probe.measure(eps["n1"], eps["n2"], count=2000, interval_ms=1)
    spread_ms = math.sqrt(max(0.0, statistics.stdev(stats.delays_ms) ** 2 - noise_ms ** 2))
    added_ms = stats.mean_delay_ms - plain.mean_delay_ms
    assert abs(added_ms) <= 2 and 3.5 <= spread_ms <= 7, (stats.as_dict(), plain.as_dict(), spread_ms, noise_ms)
    assert stats.percentile_ms(99) > 28  # a normal tail reaches past 1.6 sigma; uniform +-5 ms never would


def test_duplication_and_reordering_are_seen(run, net, backend):
    net.link_backend = backend
    net.shape("n1->n2:delay_ms=10,duplicate_pct=20,reorder_pct=25")
    eps = endpoints(run)
    stats = probe.measure(eps["n1"], eps["n2"], count=2000, interval_ms=0.5)
    assert 300 <= stats.duplicates <= 500, stats.as_dict()
    assert stats.reordered > 100 and stats.loss_pct == 0, stats.as_dict()


def class_packets(ipr, index: int) -> dict[int, int]:
    return {c["handle"]: c.get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")["packets"]
            for c in ipr.get_classes(index=index)}


def pfifo_leaves(requests: list[netem.Request]) -> list[netem.Request]:
    """`requests` with every netem leaf swapped for pfifo, so that they run on kernels without sch_netem too; the
    classifying (htb, u32) is the same."""
    return [dataclasses.replace(r, kind="pfifo", kwargs={"handle": r.kwargs["handle"], "parent": r.kwargs["parent"],
                                                         "limit": 10_000}) if r.kind == "netem" else r
            for r in requests]


def test_netem_tree_sends_only_udp_toward_the_shaped_peer_into_its_class(run, net):
    """The netem backend's htb classes and u32 filters on the real kernel, through pyroute2 (pfifo leaves)."""
    eps = endpoints(run)
    ns = clusters.namespaces(run)["n1"]
    requests = pfifo_leaves(netem.plan("eth0", {eps["n2"].ip: LinkFault(delay_ms=20)}))
    with netem.open_route(ns.pid) as ipr:
        index, _ = netem.interface_of(ipr, eps["n1"].ip, "n1")
        try:
            netem.send(ipr, index, requests, "n1")
            toward_n3 = class_packets(ipr, index)[0x10010]
            probe.measure(eps["n1"], eps["n3"], count=300, interval_ms=0.5)
            toward_n2 = class_packets(ipr, index)[0x10010]
            probe.measure(eps["n1"], eps["n2"], count=300, interval_ms=0.5)
            after = class_packets(ipr, index)[0x10010]
        finally:
            netem.remove_root(ipr, index)
        assert not netem.has_root_qdisc(ipr, index)
    assert toward_n2 - toward_n3 < 30  # probes to n3 pass by (a few of n1's own heartbeats to n2 may count)
    assert after - toward_n2 >= 300  # every probe to n2 went through the shaped class


def test_netem_tree_is_changed_in_place_on_the_real_kernel(run, net):
    """A second plan, made from what the kernel holds (`installed`), keeps the root and the kept peer's class (its
    packet counter runs on) and filter, and gives the new peer a class of its own (pfifo leaves)."""
    eps = endpoints(run)
    ns = clusters.namespaces(run)["n1"]
    n2, n3 = eps["n2"].ip, eps["n3"].ip
    with netem.open_route(ns.pid) as ipr:
        index, ifname = netem.interface_of(ipr, eps["n1"].ip, "n1")
        try:
            netem.send(ipr, index, pfifo_leaves(netem.plan(ifname, {n2: LinkFault(delay_ms=20)})), "n1")
            before = netem.installed(ipr, index)
            probe.measure(eps["n1"], eps["n2"], count=100, interval_ms=0.5)
            counted = class_packets(ipr, index)[0x10010]
            change = netem.plan(ifname, {n2: LinkFault(delay_ms=40), n3: LinkFault(loss_pct=5)}, before)
            assert not any(r.command in ("add", "del", "del-class", "del-filter") for r in change)
            netem.send(ipr, index, pfifo_leaves(change), "n1")
            after = netem.installed(ipr, index)
            assert class_packets(ipr, index)[0x10010] >= counted >= 100  # the same class, never removed
        finally:
            netem.remove_root(ipr, index)
    assert list(before.peers) == [n2] and before.peers[n2][0] == 0x10
    assert after.peers[n2] == before.peers[n2] and after.peers[n3][0] == 0x11 and len(after.peers) == 2


def test_netem_backend_installs_its_tree_or_refuses_cleanly_on_this_kernel(run, net):
    """Where sch_netem exists the tree is there and goes again; where it does not, one clear error and nothing
    left: no qdisc, no outstanding ledger entry (the `net` fixture checks the leftovers too)."""
    eps = endpoints(run)
    ns = clusters.namespaces(run)["n1"]
    faults = {eps["n2"].ip: LinkFault(delay_ms=20, jitter_ms=5, distribution="normal", loss_pct=1)}
    if capabilities()["netem"][0]:
        netem.apply(net.ledger, ns, eps["n1"].ip, faults)
        shown = ns.exec(["tc", "qdisc", "show"]).stdout
        assert re.search(r"qdisc netem 10: (dev \S+ )?parent 1:10 .*delay 20ms +5ms", shown), shown
        netem.apply(net.ledger, ns, eps["n1"].ip, {})
    else:
        with pytest.raises(EnvironmentProblem, match=r"the kernel refused 'qdisc replace dev eth\d parent 1:10 "
                                                      r"handle 10: netem delay 20ms 5ms distribution normal loss "
                                                      r"1%'") as err:
            netem.apply(net.ledger, ns, eps["n1"].ip, faults)
        assert "--backend nfqueue" in err.value.hint
    assert "htb" not in ns.exec(["tc", "qdisc", "show"]).stdout
    assert not Ledger(run.run_dir).outstanding()


def test_the_shaper_duplicates_a_datagram_larger_than_the_mtu(run, net):
    """The copy of a datagram above the MTU (a large bundle) arrives too: the kernel fragments it (it used to be
    counted as a send error and lost; then, above 4,016 bytes, it was cut short by the NFQUEUE binding's buffer).
    The controller's counters say every extra packet went."""
    ok, detail = capabilities()["nfqueue"]
    if not ok:
        pytest.skip(f"backend nfqueue is not available on this kernel: {detail}")
    net.link_backend = "nfqueue"
    net.shape("n1->n2:duplicate_pct=100")
    eps = endpoints(run)
    listener = socket_in(eps["n2"].pid, socket.AF_INET, socket.SOCK_DGRAM)
    sender = socket_in(eps["n1"].pid, socket.AF_INET, socket.SOCK_DGRAM)
    payload = os.urandom(4000)
    try:
        listener.bind((eps["n2"].ip, 7197))
        listener.settimeout(2)
        sender.bind((eps["n1"].ip, 0))
        sender.sendto(payload, (eps["n2"].ip, 7197))
        got = [listener.recvfrom(65535) for _ in range(2)]
    finally:
        listener.close()
        sender.close()
    assert [(data == payload, addr[0]) for data, addr in got] == [(True, eps["n1"].ip)] * 2
    said: list[str] = []
    net.log = said.append
    net.fast()
    stats = shaper_control.read_stats(run.run_dir, "n1")
    assert stats["extra_sent"] >= 1 and stats["extra_send_failed"] == {}, stats
    assert not [line for line in said if "were not sent" in line], said


SIOCOUTQ = 0x5411  # <asm-generic/ioctls.h> TIOCOUTQ: for UDP, the bytes charged to the socket's send buffer


def test_a_datagram_the_shaper_delays_is_no_longer_charged_to_its_senders_socket(run, net):
    """As netem orphans what it delays: held in the kernel, 200 datagrams of a sender would fill its send buffer
    and throttle it to a buffer's worth per delay. The shaper copies what it delays and drops it from the queue,
    so the charge is gone long before the delay ends; every datagram still arrives, once, after the delay."""
    ok, detail = capabilities()["nfqueue"]
    if not ok:
        pytest.skip(f"backend nfqueue is not available on this kernel: {detail}")
    net.link_backend = "nfqueue"
    net.slow(1500, links=[("n1", "n2")])
    eps = endpoints(run)
    listener = socket_in(eps["n2"].pid, socket.AF_INET, socket.SOCK_DGRAM)
    sender = socket_in(eps["n1"].pid, socket.AF_INET, socket.SOCK_DGRAM)
    payloads = [i.to_bytes(4, "big") * 16 for i in range(100)] + [os.urandom(4000)]  # the last above the MTU
    try:
        listener.bind((eps["n2"].ip, 7197))
        sender.bind((eps["n1"].ip, 0))
        started_s = time.monotonic()
        for payload in payloads:
            sender.sendto(payload, (eps["n2"].ip, 7197))
        charged = lambda: int.from_bytes(fcntl.ioctl(sender, SIOCOUTQ, bytes(4)), sys.byteorder)  # noqa: E731
        wait_for(lambda: charged() == 0, timeout_s=5.0, poll_s=0.02, what="the sender's send buffer emptied")
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing released yet: the charge went while the datagrams were held
            listener.recvfrom(65535)
        listener.settimeout(5)
        got = [listener.recvfrom(65535) for _ in payloads]
        listener.settimeout(0.3)
        with pytest.raises(TimeoutError):
            listener.recvfrom(65535)
    finally:
        listener.close()
        sender.close()
    assert time.monotonic() - started_s >= 1.5
    assert sorted(data for data, _ in got) == sorted(payloads)
    assert {addr[0] for _, addr in got} == {eps["n1"].ip}
    net.fast()
    stats = shaper_control.read_stats(run.run_dir, "n1")
    assert stats["copied"] >= len(payloads) and stats["extra_send_failed"] == {}, stats


def test_one_way_partition_drops_exactly_one_direction_and_heal_restores(run, net):
    net.partition("n2<-n1")
    seen = probe.reachability(endpoints(run), [(a, b) for a in run.names for b in run.names if a != b])
    assert [pair for pair, ok in seen.items() if not ok] == [("n1", "n2")]
    time.sleep(SETTLE_S)
    hearing = run.hearing()
    assert "n1" not in hearing["n2"] and "n2" in hearing["n1"] and hearing["n3"] == {"n1", "n2"}, hearing
    net.heal()
    assert all(probe.reachability(endpoints(run), list(seen)).values())
    wait_for(run.all_hear_all, what="all hear all after heal")


def test_a_one_way_cut_lands_on_its_link_only_and_the_traffic_times_it(run, net):
    eps = endpoints(run)
    streams = [(eps["n1"], eps["n2"]), (eps["n1"], eps["n3"]), (eps["n2"], eps["n1"])]
    cut = cutwatch.watch(streams, lambda: net.partition({"n2": {"n1"}}))
    assert [(s.sender, s.receiver, s.kind) for s in cut.switches] == [("n1", "n2", "cut")], cut
    assert sorted(cut.unswitched) == [("n1", "n3"), ("n2", "n1")], cut
    margin_s = 0.02  # a probe's send time is read just before it leaves
    assert cut.started_s - margin_s <= cut.switches[0].at_s <= cut.finished_s + margin_s, cut
    healed = cutwatch.watch(streams, net.heal)
    assert [(s.sender, s.receiver, s.kind) for s in healed.switches] == [("n1", "n2", "healed")], healed
    assert sorted(healed.unswitched) == [("n1", "n3"), ("n2", "n1")], healed


JAM_PORT = 7196


def _numbered(run, src: str, dst: str, numbers: range):
    """A listener in `dst`'s namespace, after `numbers` were sent to it from `src`'s as 4-byte datagrams."""
    eps = endpoints(run)
    listener = socket_in(eps[dst].pid, socket.AF_INET, socket.SOCK_DGRAM)
    sender = socket_in(eps[src].pid, socket.AF_INET, socket.SOCK_DGRAM)
    try:
        listener.bind((eps[dst].ip, JAM_PORT))
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sender.bind((eps[src].ip, 0))
        for number in numbers:
            sender.sendto(number.to_bytes(4, "big"), (eps[dst].ip, JAM_PORT))
    except BaseException:
        listener.close()
        raise
    finally:
        sender.close()
    return listener


def _drain(listener, quiet_s: float = 0.5) -> list[int]:
    """The numbers the listener got, in arrival order, until nothing came for `quiet_s`."""
    got = []
    listener.settimeout(quiet_s)
    try:
        while True:
            got.append(int.from_bytes(listener.recv(16), "big"))
    except socket.timeout:
        return got


def test_a_jammed_one_way_cut_holds_what_crosses_and_releases_it_at_the_heal(run, net):
    """What n1 sends n2 under a jam arrives only at the heal: all of it in order (fifo); shuffled and only the
    newest `cap` (shuffle, cap), the rest counted as dropped; the other direction flows all along."""
    ok, detail = capabilities()["nfqueue"]
    if not ok:
        pytest.skip(f"jammed partitions need NFQUEUE: {detail}")
    net.partition("n2<-n1", jam=Jam("fifo"))
    assert [p for p, ok in probe.reachability(endpoints(run), [("n1", "n2"), ("n2", "n1")]).items() if not ok] \
        == [("n1", "n2")]
    listener = _numbered(run, "n1", "n2", range(300))
    with listener, _numbered(run, "n2", "n1", range(5)) as back:
        assert _drain(listener) == []  # held, not delivered
        assert _drain(back) == list(range(5))  # n2 -> n1 is not jammed
        net.heal()
        assert _drain(listener) == list(range(300))
    fifo = _last_jam_end(run)  # what the fault_end says the jam held: the 300 and n1's heartbeats to n2
    assert fifo["dropped"] == 0 and fifo["released"] == fifo["held"] >= 300, fifo
    net.partition("n2<-n1", jam=Jam("shuffle", cap=100))  # a shaper of its own: the heal ended the last one
    with _numbered(run, "n1", "n2", range(400)) as listener:
        assert _drain(listener) == []
        net.heal()
        got = _drain(listener)
    stats = shaper_control.read_stats(run.run_dir, "n1")  # its last counters, written as it ended
    assert len(got) == len(set(got)) and got != sorted(got), got  # shuffled, once each
    assert 90 <= len(got) <= 100 and min(got) >= 300 - 10, got  # the newest (a heartbeat or two may hold a place)
    assert stats["jam_dropped"] >= 300 and stats["jam_released"] == 100 and stats["jammed"] == 0, stats
    capped = _last_jam_end(run)
    assert capped["released"] == 100 and capped["dropped"] == capped["held"] - 100 >= 300, capped


def _last_jam_end(run) -> dict:
    """The `jam` detail of the last partition's fault_end in the controller's history."""
    lines = (run.run_dir / "events" / "controller.jsonl").read_text().splitlines()
    ends = [e for e in map(json.loads, lines) if e["type"] == "fault_end" and e["kind"] == "partition"]
    return ends[-1]["detail"]["jam"]


def test_a_jam_whose_controller_was_killed_is_released_by_splitlab_heal(run, net):
    ok, detail = capabilities()["nfqueue"]
    if not ok:
        pytest.skip(f"jammed partitions need NFQUEUE: {detail}")
    proc = chaoscli("partition", "n3<-n1", "--jam", "--run-id", run.run_id, "--hold")
    try:
        line = proc.stdout.readline()
        while line and "jammed" not in line:
            line = proc.stdout.readline()
        assert "jammed, released fifo" in line, line
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with _numbered(run, "n1", "n3", range(50)) as listener:
        assert _drain(listener) == []
        healed = subprocess.run([sys.executable, "-m", "chaos.cli.main", "heal", "--run-id", run.run_id],
                                capture_output=True, text=True, timeout=60)
        assert healed.returncode == 0, healed.stdout + healed.stderr
        assert _drain(listener) == list(range(50))  # nothing the jam held was lost with its controller
    assert leftovers(run) == []


def test_protocol_aware_drop_removes_only_the_matched_message_type(run, net):
    net.msg_fault(MsgRule(type=wire.Heartbeat.TYPE, src="n1", dst="n2", action="drop"))
    time.sleep(SETTLE_S)
    assert "n1" not in run.client("n2").hears()  # heartbeats n1 -> n2 are gone ...
    assert "n2" in run.client("n1").hears()
    n1 = run.client("n1")
    before = n1.state()["layers"]["ping"].get("n2", {}).get("answered", 0)
    n1.ping("n2", count=20, interval_ms=5)  # ... while pings n1 -> n2 (and pongs back) pass
    wait_for(lambda: n1.state()["layers"]["ping"]["n2"]["answered"] == before + 20, what="20 pongs")
    stats = (run.run_dir / "chaos" / "shaper-n1.json.stats")
    wait_for(lambda: stats.exists() and '"msg_drop"' in stats.read_text(), what="shaper stats")


def test_injected_packet_arrives_with_the_claimed_source(run, net):
    eps = endpoints(run)
    listener = socket_in(eps["n1"].pid, socket.AF_INET, socket.SOCK_DGRAM)
    try:
        listener.bind((eps["n1"].ip, 7198))
        listener.settimeout(2)
        payload = inject.forge(run.run_id, "n2", [inject.message("UnicastAck", seqno=5, conn_id=3, timestamp=1)])
        inject.inject(eps["n2"], eps["n1"], payload, dport=7198)
        data, addr = listener.recvfrom(2048)
    finally:
        listener.close()
    assert addr == (eps["n2"].ip, wire.DATA_PORT)
    assert wire.decode_datagram(data, wire.cluster_id_of(run.run_id)) == ("n2", [wire.UnicastAck(5, 3, 1)])
    # the node itself: a datagram of another run, forged as n2's, is counted and recorded with n2's address
    foreign = inject.forge("some-other-run", "n2", [inject.message("Heartbeat", counter=1)])
    pcap = run.run_dir / "chaos" / "inject.pcap"
    with net.capture(pcap):
        net.inject("n2", "n1", foreign)
        wait_for(lambda: run.client("n1").state()["dropped"].get("foreign", 0) >= 1, what="n1 counts the datagram")
    history = run.run_dir / "events" / "n1.jsonl"
    wait_for(lambda: f'"src_ip":"{eps["n2"].ip}"' in history.read_text(), what="datagram_dropped with n2's address")
    # the capture holds it as n1 received it; replaying it sends it again from n2's namespace
    captured = [pkt for _, pkt in read_pcap(pcap) if pkt.endswith(foreign)]
    assert len(captured) == 1 and captured[0][12:16] == socket.inet_aton(eps["n2"].ip)
    assert net.replay(captured) == 1
    wait_for(lambda: run.client("n1").state()["dropped"].get("foreign", 0) >= 2, what="n1 counts the replay")


def container_state(run, node: str) -> dict:
    return docker.from_env().containers.get(run.node(node).container).attrs["State"]


def test_pause_and_kill_take_effect_and_heal_undoes_both(run, net):
    net.pause("n3")
    assert container_state(run, "n3")["Paused"] is True
    time.sleep(SETTLE_S)
    assert "n3" not in run.client("n1").hears()
    killed_pid = run.node("n2").pid
    net.kill("n2")
    assert container_state(run, "n2")["Running"] is False and not os.path.exists(f"/proc/{killed_pid}")
    with pytest.raises(EnvironmentProblem, match="not reachable"):
        run.client("n2").state()
    assert sorted(e.key.split(":")[0] for e in Ledger(run.run_dir).outstanding()) == ["kill", "pause"]
    net.heal_all()
    assert container_state(run, "n3")["Paused"] is False and container_state(run, "n2")["Running"] is True
    run.nodes = clusters.load(run.run_id).nodes  # n2 has a new process and namespace now
    assert run.node("n2").pid not in (0, killed_pid)
    wait_for(run.all_hear_all, what="all hear all after heal")


def test_restart_brings_a_node_back_with_the_partition_applied_to_its_new_namespace(run, net):
    net.partition("n3<-n1")
    old_pid = run.node("n3").pid
    net.restart("n3")
    run.nodes = clusters.load(run.run_id).nodes
    assert run.node("n3").pid != old_pid
    seen = probe.reachability(endpoints(run), [("n1", "n3"), ("n3", "n1"), ("n2", "n3")])
    assert seen == {("n1", "n3"): False, ("n3", "n1"): True, ("n2", "n3"): True}, seen
    events = (run.run_dir / "events" / "controller.jsonl").read_text()
    assert '"kind":"restart"' in events and '"kind":"kill"' in events
    net.heal()
    wait_for(run.all_hear_all, what="all hear all after the restart and heal", while_restarting=True)


def chaoscli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "chaos.cli.main", "chaos", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_sigkill_of_the_controller_mid_fault_then_heal_leaves_nothing(run, net):
    procs = [chaoscli("partition", "n1<->n3", "--run-id", run.run_id, "--hold"),
             chaoscli("shape", "n1->n2:delay_ms=20,loss_pct=5", "--run-id", run.run_id, "--hold")]
    try:
        for proc in procs:
            line = proc.stdout.readline()
            while line and "fault" not in line and "backend" not in line:
                line = proc.stdout.readline()
            assert "backend" in line, line
        shapers = [pid for pid in shaper_pids() if any(str(run.run_dir) in a for a in process_cmdline(pid))]
        assert len(shapers) == 1
        assert not probe.reachability(endpoints(run), [("n1", "n3")])[("n1", "n3")]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    assert leftovers(run)  # the faults outlived their controller ...
    healed = subprocess.run([sys.executable, "-m", "chaos.cli.main", "heal", "--run-id", run.run_id],
                            capture_output=True, text=True, timeout=60)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert leftovers(run) == []  # ... and `splitlab heal` removed every one of them
    assert all(probe.reachability(endpoints(run), [(a, b) for a in run.names for b in run.names if a != b]).values())
    events = (run.run_dir / "events" / "controller.jsonl").read_text()
    assert '"type":"heal"' in events and '"kind":"partition"' in events


def test_a_leased_fault_heals_by_itself_after_its_controller_was_sigkilled(run, net):
    """`--ttl-s`: while the controller runs it renews the lease; killed, it renews nothing, and the watchdog in
    n2's namespace ends the partition once the TTL passed, with a fault_end that says why."""
    ttl_s = 2.0
    proc = chaoscli("partition", "n2<-n1", "--run-id", run.run_id, "--hold", "--ttl-s", str(ttl_s))
    try:
        line = proc.stdout.readline()
        while line and "lease of" not in line:
            line = proc.stdout.readline()
        assert "lease of 2 s" in line, line
        time.sleep(ttl_s)  # renewed meanwhile: still cut
        assert not probe.reachability(endpoints(run), [("n1", "n2")])[("n1", "n2")]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_s = time.monotonic()
    assert not probe.reachability(endpoints(run), [("n1", "n2")])[("n1", "n2")]  # the fault outlived its controller
    wait_for(lambda: probe.reachability(endpoints(run), [("n1", "n2")])[("n1", "n2")], timeout_s=ttl_s + 5,
             what="the lease's watchdog to heal n2<-n1")
    assert time.monotonic() - killed_s >= ttl_s - 2 * ttl_s / 3  # not before the last renewal's lease expired

    def last_end_reason() -> str | None:
        lines = (run.run_dir / "events" / "controller.jsonl").read_text().splitlines()
        ends = [e for e in map(json.loads, lines) if e["type"] == "fault_end"]
        return ends[-1].get("reason") if ends else None

    # the watchdog records the fault_end just after its heal took effect
    wait_for(lambda: last_end_reason() == "lease_expired", timeout_s=5, what="the watchdog's fault_end")
    wait_for(lambda: leftovers(run) == [], timeout_s=5, what="the watchdog to settle its ledger entry")


@pytest.mark.parametrize("argv, fragment", [
    (["partition", "n9<-n1"], "unknown node(s) n9"),
    (["partition", "n1<-"], "malformed grudge"),
    (["flaky", "--loss-pct", "150"], "loss_pct must be within 0..100, got 150"),
    (["slow", "--delay-ms", "10", "--jitter-ms", "2", "--distribution", "gauss"],
     "distribution must be one of uniform, normal, pareto, paretonormal, got 'gauss'"),
    (["slow", "--delay-ms", "10", "--delay-corr-pct", "50"], "delay_corr_pct=50 needs jitter_ms > 0"),
    (["msg-fault", "--type", "Nope", "--from", "n1", "--to", "n2", "--action", "drop"], "unknown message type"),
    (["pause", "n7"], "has no node 'n7'"),
])
def test_bad_input_gets_one_clear_error(run, net, capsys, argv, fragment):
    from chaos.cli.main import main

    assert main(["chaos", *argv, "--run-id", run.run_id]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2, err


def test_a_nonexistent_run_id_gets_one_clear_error(capsys):
    from chaos.cli.main import main

    assert main(["chaos", "partition", "n2<-n1", "--run-id", "no-such-run"]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err
    assert main(["heal", "--run-id", "no-such-run"]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err
    with pytest.raises(UsageError):
        clusters.load("no-such-run")
