"""Runs across hosts on the test bed: three lab hosts as containers, each with its own sshd and Docker engine,
reached only over SSH with the bed's key (chaos.hosts.bed). Nodes on every host hear each other over the VXLAN
data network, deliver unicast and multicast across hosts, a one-way cut between hosts is applied on the
receiver's host and a link fault or a jam on the sender's (the shaper as a container there), a controller SIGKILLed
while it holds either leaves nothing that `splitlab heal` cannot remove, kill and start act on the node's host,
inject, capture and replay go through the wire agent on the node's host, seed scenarios give the same verdicts
as on one machine, `down` leaves no container, network, VXLAN device or directory on any host, and
`down --force` gives up on a host that cannot be reached, leaving a script that cleans it."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cluster_wait import wait_for

from chaos.cluster import engine, images, lifecycle
from chaos.cluster.naming import LABEL_RUN
from chaos.faults.grudge import Jam
from chaos.hosts import bed, hostengine, multi, ship
from chaos.hosts.doctor import check_inventory
from chaos.hosts.inventory import Inventory, parse
from chaos.hosts.remote import RemoteHost, closing
from chaos.net.docker import DockerNet
from node import history
from node.errors import EnvironmentProblem

pytestmark = pytest.mark.splitlab_cluster


# `make test` runs this module beside the other container tests (tests/conftest.py): the bed's hosts, and the
# nodes inside them, yield the CPU to those tests' nodes (a quarter of a container's default weight)
BED_CPU_SHARES = 256
DEFAULT_CPU_SHARES = 1024  # Docker's: a node container's weight
HOLD_WAIT_S = 60.0  # a `--hold` command's fault in place: a new CLI process that reaches the hosts over SSH


@pytest.fixture(scope="module")
def bed_inventory(tmp_path_factory: pytest.TempPathFactory) -> Inventory:
    from chaos.harness.pytest_plugin import require_cluster_machine

    require_cluster_machine()
    bed_dir = tmp_path_factory.mktemp("bed")
    try:
        yield bed.up(bed_dir, 3, cpu_shares=BED_CPU_SHARES)
    finally:
        bed.down(bed_dir)




def bed_containers(inventory: Inventory) -> list[str]:
    """The containers that play the bed's hosts."""
    name = bed.bed_name(inventory.path.parent)
    return [bed.container(name, i) for i in range(1, len(inventory.hosts) + 1)]


@contextlib.contextmanager
def at_full_weight(inventory: Inventory):
    """The bed's hosts at a container's CPU weight while a run whose outcome is a matter of timing goes on, and back
    to their quarter after: under `make test`, jgrp1873's heal over SSH took 2.5 s on starved hosts, the acks it
    then held for 5.5 s went out in the middle of it, and the legacy bug did not show (2026-11-30)."""
    hosts = bed_containers(inventory)

    def weigh(shares: int) -> None:
        subprocess.run(["docker", "update", "--cpu-shares", str(shares), *hosts], capture_output=True, text=True,
                       check=True)

    weigh(DEFAULT_CPU_SHARES)
    try:
        yield
    finally:
        weigh(BED_CPU_SHARES)


def on_hosts(inventory: Inventory, script: str) -> dict[str, str]:
    out = {}
    for spec in inventory.hosts:
        host = RemoteHost(spec)
        try:
            out[spec.name] = host.run(["sh", "-c", script], timeout_s=60).stdout
        finally:
            host.close()
    return out


def wait_while_held(holder: subprocess.Popen, predicate, what: str) -> None:
    """`wait_for(predicate)` while `holder` (a `--hold` command, which reaches the hosts over SSH: tens of seconds
    on a loaded machine) runs; a holder that exited fails the test at once, with what it printed."""
    def check() -> bool:
        if holder.poll() is not None:
            output = holder.stdout.read() if holder.stdout else ""
            pytest.fail(f"the holding command exited ({holder.returncode}) before {what}:\n{output}")
        return predicate()
    wait_for(check, HOLD_WAIT_S, what)


def events(run_dir: Path, node: str, type_: str) -> list[dict]:
    return [e for e in history.read(run_dir / "events" / f"{node}.jsonl") if e["type"] == type_]


def test_doctor_checks_every_host_over_ssh_and_names_an_unreachable_one(bed_inventory: Inventory) -> None:
    results = check_inventory(bed_inventory)
    for host, checks in results.items():
        by_name = {c.name: c for c in checks}
        for name in ("SSH", "root (sudo)", "Docker engine", "Docker API over SSH", "iptables in a network namespace",
                     "VXLAN", "clock offset", "free disk"):
            assert by_name[name].ok, (host, by_name[name])
        table = by_name["neighbour table (ARP)"]  # a bed host shares this kernel: its netns may not show the limit
        assert not table.required and (not table.ok or "room for" in table.detail), (host, table)
    first = bed_inventory.hosts[0]
    wrong = parse(f"hosts: [{{name: gone, address: {first.address}, port: 2, key: {first.key}}}]",
                  bed_inventory.path)
    (only,) = check_inventory(wrong)["gone"]
    assert only.name == "SSH" and not only.ok and "cannot connect" in only.detail


def test_a_hosts_engine_starts_containers_over_ssh_and_its_refusal_names_the_image(bed_inventory) -> None:
    """`multi._start_nodes` through the host's engine API (relays over one SSH connection): more containers than
    relays (sshd refuses sessions past its MaxSessions, 10), one of them of an image the host lacks."""
    spec = bed_inventory.hosts[0]
    run_id = "enginetest"
    with closing({spec.name: RemoteHost(spec)}) as hosts:
        host = hosts[spec.name]
        ship.ship([images.node_image()], hosts)

        def container(name: str, image: str) -> engine.ContainerSpec:
            return engine.ContainerSpec(name, {"image": image, "name": f"splitlab-{run_id}-{name}",
                                               "labels": {LABEL_RUN: run_id}, "entrypoint": ["sleep", "60"]},
                                        {}, [engine.Endpoint("bridge", [])])

        started = [container(f"c{i}", images.node_image()) for i in range(hostengine.MAX_RELAYS + 4)]
        try:
            with pytest.raises(EnvironmentProblem, match="splitlab-missing"):
                multi._start_nodes(host, [*started, container("bad", "splitlab-missing:none")], 3, run_id)
            running = host.run(["docker", "ps", "-q", "--filter", f"label={LABEL_RUN}={run_id}"]).stdout.split()
            assert len(running) == len(started)
        finally:
            host.run_script(f"docker ps -aq --filter label={LABEL_RUN}={run_id} | xargs -r docker rm -f >/dev/null\n"
                            f"rm -rf {multi.remote_dir(run_id)}\n")


def test_the_beds_hosts_carry_the_cpu_weight_asked_for(bed_inventory: Inventory) -> None:
    weights = [subprocess.run(["docker", "inspect", "-f", "{{.HostConfig.CpuShares}}", host],
                              capture_output=True, text=True, check=True).stdout.strip()
               for host in bed_containers(bed_inventory)]
    assert weights == [str(BED_CPU_SHARES)] * 3, weights


def test_nodes_on_every_host_deliver_unicast_and_multicast_across_hosts(splitlab_up, bed_inventory) -> None:
    nodes = [f"n{i}" for i in range(1, 7)]
    run = splitlab_up(6, inventory=bed_inventory, node_env={n: {"SPLITLAB_UNICAST": "unicast3",
                                                                 "SPLITLAB_MULTICAST": "nakack4"} for n in nodes})
    assert {n.host for n in run.nodes} == set(bed_inventory.names)
    assert {n.name: n.host for n in run.nodes}["n4"] == "host1"  # round-robin
    assert run.all_hear_all()
    run.client("n1").unicast("n2", count=300, size=200, rate=600)   # host1 -> host2
    run.client("n3").multicast(count=100, size=100, rate=200)       # host3 -> everyone
    layers = lambda node: run.client(node).state()["layers"]
    wait_for(lambda: (layers("n2")["unicast"]["peers"].get("n1", {}).get("recv") or {}).get("highest_delivered") == 300,
             30, "300 unicasts on n2")
    wait_for(lambda: all(layers(n)["multicast"]["counters"].get("delivered", 0) >= 100 for n in nodes if n != "n3"),
             30, "100 multicasts on every other node")
    lifecycle.down(run.run_id)  # stops the nodes and brings their histories over
    sent = [e["msg_id"] for e in events(run.run_dir, "n1", "app_send") if e["kind"] == "unicast"]
    got = [e["msg_id"] for e in events(run.run_dir, "n2", "app_deliver") if e["from"] == "n1"]
    assert len(sent) == 300 and got == sent
    mc_sent = [e["msg_id"] for e in events(run.run_dir, "n3", "app_send") if e["kind"] == "multicast"]
    for node in ("n1", "n5", "n6"):
        assert [e["msg_id"] for e in events(run.run_dir, node, "app_deliver") if e["from"] == "n3"] == mc_sent
    for node in nodes:  # flushed on SIGTERM, then collected
        assert events(run.run_dir, node, "node_stop"), node
    state = json.loads((run.run_dir / "hosts.json").read_text())
    assert set(state["offsets_s"]["up"]) == set(state["offsets_s"]["stop"]) == set(bed_inventory.names)
    assert not state["up"] and multi.find(run.run_id) is None


def test_a_one_way_cut_across_hosts_survives_a_killed_controller_and_down_leaves_nothing(
        splitlab_up, bed_inventory) -> None:
    run = splitlab_up(4, inventory=bed_inventory, placement="n1,n3@host1;n2@host2;n4@host3")
    env = dict(os.environ, SPLITLAB_RUNS_DIR=str(run.run_dir.parent))
    holder = subprocess.Popen([sys.executable, "-m", "chaos.cli.main", "chaos", "partition", "n2<-n1",
                               "--run-id", run.run_id, "--hold"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        wait_while_held(holder, lambda: "n1" not in run.client("n2").hears(), "n2 stops hearing n1")
        hearing = run.hearing()
        assert "n2" in hearing["n1"] and hearing["n3"] == {"n1", "n2", "n4"}, hearing  # one way, one receiver
    finally:
        holder.send_signal(signal.SIGKILL)  # the controller dies holding the cut
        holder.wait(10)
    chain = f"SL-{run.run_id}"
    ns = lifecycle.namespaces(run)
    assert f"-s {run.node('n1').data_ip}/32 -j DROP" in ns["n2"].exec(["iptables", "-S", chain]).stdout
    healed = subprocess.run([sys.executable, "-m", "chaos.cli.main", "heal", "--run-id", run.run_id], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert healed.returncode == 0, healed.stdout
    for node, netns in ns.items():
        assert chain not in netns.exec(["iptables", "-S"]).stdout, node
    wait_for(run.all_hear_all, 15, "all hear all after heal")
    lifecycle.down(run.run_id)
    left = on_hosts(bed_inventory, f"docker ps -aq --filter label=splitlab.run={run.run_id}; "
                                   f"docker network ls -q --filter label=splitlab.run={run.run_id}; "
                                   "ip -o link show type vxlan; ip -o link show type bridge | grep ' sl' || true; "
                                   f"ls {multi.remote_dir(run.run_id)} 2>/dev/null || true")
    assert left == {h: "" for h in bed_inventory.names}, left


def shaper_containers(inventory: Inventory, run_id: str) -> dict[str, list[str]]:
    out = on_hosts(inventory, f"docker ps -a --format '{{{{.Names}}}}' --filter label=splitlab.run={run_id}")
    return {host: [n for n in names.split() if "-shaper-" in n] for host, names in out.items()}


def test_link_and_process_faults_act_on_the_nodes_host_and_heal_after_a_killed_controller(
        splitlab_up, bed_inventory) -> None:
    from chaos.net.shaper import control

    run = splitlab_up(3, inventory=bed_inventory)  # n1 on host1, n2 on host2, n3 on host3
    env = dict(os.environ, SPLITLAB_RUNS_DIR=str(run.run_dir.parent))
    holder = subprocess.Popen([sys.executable, "-m", "chaos.cli.main", "chaos", "flaky", "--loss-pct", "100",
                               "--links", "n1->n2", "--run-id", run.run_id, "--hold"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:  # n1's shaper, a container on host1 in n1's namespace, drops everything n1 sends n2
        wait_while_held(holder, lambda: "n1" not in run.client("n2").hears(), "n2 stops hearing n1")
        assert run.client("n1").hears() >= {"n2", "n3"} and "n1" in run.client("n3").hears()
    finally:
        holder.send_signal(signal.SIGKILL)  # the controller dies holding the shaper
        holder.wait(10)
    assert shaper_containers(bed_inventory, run.run_id) == {"host1": [
        f"splitlab-{run.run_id}-n1-shaper-{lifecycle.namespaces(run)['n1'].inode}"], "host2": [], "host3": []}
    healed = subprocess.run([sys.executable, "-m", "chaos.cli.main", "heal", "--run-id", run.run_id], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert healed.returncode == 0, healed.stdout
    assert shaper_containers(bed_inventory, run.run_id) == {h: [] for h in bed_inventory.names}
    ns = lifecycle.namespaces(run)
    assert f"SLQ-{run.run_id}" not in ns["n1"].exec(["iptables", "-S"]).stdout
    wait_for(run.all_hear_all, 15, "all hear all after heal")

    with DockerNet(run, verify=False) as net:
        net.slow(100.0, links=[("n3", "n1")])  # host3 -> host1
        wait_for(lambda: control.read_stats(run.run_dir, "n3", net.hosts["host3"]).get("delayed", 0) >= 5, 15,
                 "n3's shaper on host3 delays what n3 sends n1")
        stats = control.read_stats(run.run_dir, "n3", net.hosts["host3"])
        assert stats["packets"] >= stats["delayed"] and stats.get("lost", 0) == 0, stats  # delay only
        # a jammed cut n1<-n3: n3's shaper on host3 holds what n3 sends n1, and lets it go at the heal
        net.partition("n1<-n3", jam=Jam("fifo"))
        wait_for(lambda: "n3" not in run.client("n1").hears(), 20, "n1 stops hearing the jammed n3")
        held = control.read_stats(run.run_dir, "n3", net.hosts["host3"])
        assert held["jammed"] >= 1 and held.get("jam_released", 0) == 0, held
        net.heal()
        released = control.read_stats(run.run_dir, "n3", net.hosts["host3"])
        assert released["jammed"] == 0 and released["jam_released"] == released["jam_held"] >= held["jammed"], released
        wait_for(lambda: "n3" in run.client("n1").hears(), 20, "n1 hears n3 again after the heal")
        net.kill("n2")  # docker kill on host2
        wait_for(lambda: "n2" not in run.client("n1").hears(), 20, "n1 stops hearing the killed n2")
        net.start("n2")  # its control port is published anew: net.cluster knows the new one
        wait_for(net.cluster.all_hear_all, 30, "all hear all after n2 started again", while_restarting=True)
    assert shaper_containers(bed_inventory, run.run_id) == {h: [] for h in bed_inventory.names}


def agent_containers(inventory: Inventory, run_id: str) -> dict[str, list[str]]:
    out = on_hosts(inventory, f"docker ps -a --format '{{{{.Names}}}}' --filter label=splitlab.run={run_id}")
    return {host: sorted(n for n in names.split() if "-capture-" in n) for host, names in out.items()}


def test_inject_capture_and_replay_act_through_the_agent_on_the_nodes_host(splitlab_up, bed_inventory) -> None:
    from chaos.wire import inject
    from chaos.wire.capture import read_pcap

    run = splitlab_up(3, inventory=bed_inventory)  # n1 on host1, n2 on host2, n3 on host3
    ip = {n.name: socket.inet_aton(n.data_ip) for n in run.nodes}
    foreign = inject.forge("some-other-run", "n2", [inject.message("Heartbeat", counter=1)])
    dropped = lambda: run.client("n1").state()["dropped"].get("foreign", 0)
    pcap = run.run_dir / "chaos" / "across.pcap"
    with DockerNet(run, verify=False) as net:
        with net.capture(pcap) as cap:
            assert [len(names) for names in agent_containers(bed_inventory, run.run_id).values()] == [1, 1, 1]
            net.inject("n2", "n1", foreign, count=3)  # from n2's namespace on host2 to n1 on host1
            wait_for(lambda: dropped() >= 3, 20, "n1 counts the 3 forged datagrams")
        packets = read_pcap(pcap)
        assert cap.count == len(packets) > 3  # heartbeats too, as every node received them
        assert {pkt[16:20] for _, pkt in packets} == set(ip.values())  # one file of every host's node
        stamps = [ts for ts, _ in packets]
        assert stamps == sorted(stamps) and abs(stamps[-1] - time.time()) < 60
        forged = [pkt for _, pkt in packets if pkt.endswith(foreign)]
        assert len(forged) == 3 and {(p[12:16], p[16:20]) for p in forged} == {(ip["n2"], ip["n1"])}
        assert net.replay(forged) == 3  # again from n2's namespace on host2
        wait_for(lambda: dropped() >= 6, 20, "n1 counts the replayed datagrams")
        assert agent_containers(bed_inventory, run.run_id) == {h: [] for h in bed_inventory.names}
        assert "capture-" not in "".join(on_hosts(bed_inventory, f"ls {multi.remote_dir(run.run_id)}/chaos || true")
                                         .values())
    orphan = DockerNet(run, verify=False)  # as if the controller died while capturing: no stop, no heal
    with closing(orphan.hosts):
        orphan.capture(run.run_dir / "chaos" / "left.pcap").start()
    assert [len(names) for names in agent_containers(bed_inventory, run.run_id).values()] == [1, 1, 1]
    env = dict(os.environ, SPLITLAB_RUNS_DIR=str(run.run_dir.parent))
    healed = subprocess.run([sys.executable, "-m", "chaos.cli.main", "heal", "--run-id", run.run_id], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert healed.returncode == 0, healed.stdout
    assert agent_containers(bed_inventory, run.run_id) == {h: [] for h in bed_inventory.names}


def test_a_seed_scenario_gives_the_same_verdict_across_hosts_as_on_one_machine(
        bed_inventory, splitlab_runs_dir, splitlab_spark) -> None:
    """On one machine jgrp1873's legacy variant holds every expectation, with n2 asking n1 in vain
    (tests/scenarios/test_jgrp1873.py, in the same suite); across hosts it must do the same: an outcome that
    differs from one machine's is an expectation that does not hold."""
    from chaos.harness import runner
    from chaos.harness.load import load_scenario

    loaded = load_scenario(Path(__file__).parents[2] / "scenarios" / "jgrp1873.yaml", (), "legacy")
    with at_full_weight(bed_inventory):
        result = runner.run(loaded, out=splitlab_runs_dir, spark=splitlab_spark, report=False,
                            hosts=(bed_inventory, "n1@host2;n2@host3"))
    outcomes = [(o.check, o.expected, o.actual) for o in result.verdict.outcomes]
    assert result.verdict.held and outcomes, outcomes
    worst = result.summary.checks["endless_retransmission"].details["examples"][0]
    assert (worst["requester"], worst["sender"], worst["proto"]) == ("n2", "n1", "unicast2"), worst
    assert json.loads((result.run_dir / "hosts.json").read_text())["placement"] == {"n1": "host2", "n2": "host3"}


@pytest.mark.long  # 75 s: in `make bench`, beside the other long runs
def test_torture_runs_on_the_hosts_and_its_replay_runs_where_it_ran(bed_inventory, splitlab_runs_dir,
                                                                    splitlab_spark) -> None:
    from chaos.cli.main import main as splitlab
    from chaos.harness import torture

    placement = "n1@host3;n2@host1;n3@host2"
    result = torture.run(11, 10.0, 3, out=splitlab_runs_dir, spark=splitlab_spark, report=False,
                         hosts=(bed_inventory, placement))
    assert result.verdict.held, [(o.check, o.actual, o.reason) for o in result.verdict.outcomes]
    assert json.loads((result.run_dir / "hosts.json").read_text())["placement"] == \
        {"n1": "host3", "n2": "host1", "n3": "host2"}
    before = {p.name for p in splitlab_runs_dir.iterdir()}
    assert splitlab(["replay", str(result.run_dir), "--out", str(splitlab_runs_dir), "--no-report", "--quiet"]) == 0
    (replayed,) = [splitlab_runs_dir / p for p in {p.name for p in splitlab_runs_dir.iterdir()} - before]
    again = json.loads((replayed / "hosts.json").read_text())
    assert again["placement"] == {"n1": "host3", "n2": "host1", "n3": "host2"}  # where it ran
    assert {h["name"] for h in again["inventory"]["hosts"]} == set(bed_inventory.names)


def test_down_force_gives_up_on_a_host_that_cannot_be_reached(splitlab_up, bed_inventory) -> None:
    from chaos.host.heal import heal_run
    from chaos.host.ledger import Ledger
    from chaos.host.proc import run as local

    run = splitlab_up(3, inventory=bed_inventory)  # n1 on host1, n2 on host2, n3 on host3
    net = DockerNet(run, verify=False)
    with closing(net.hosts):
        net.partition("n3<-n1;n1<-n2")  # held on host3 and on host1: the controller goes without healing
    assert {e.host for e in Ledger(run.run_dir).outstanding()} == {"host1", "host3"}
    host3 = bed.container(bed.bed_name(bed_inventory.path.parent), 3)
    ssh = ["INPUT", "-p", "tcp", "--dport", "22", "-j", "REJECT", "--reject-with", "tcp-reset"]
    local(["docker", "exec", host3, "iptables", "-I", *ssh])  # host3 no longer answers SSH
    try:
        with pytest.raises(EnvironmentProblem, match="host3") as refused:
            lifecycle.down(run.run_id)
        assert "--force" in (refused.value.hint or "")
        lifecycle.down(run.run_id, force=True)
    finally:
        local(["docker", "exec", host3, "iptables", "-D", *ssh])
    state = json.loads((run.run_dir / "hosts.json").read_text())
    assert list(state["abandoned"]) == ["host3"] and not state["up"] and multi.find(run.run_id) is None
    assert events(run.run_dir, "n1", "node_stop") and events(run.run_dir, "n2", "node_stop")
    assert not (run.run_dir / "events" / "n3.jsonl").exists()  # lost with its host, as the log said
    assert not Ledger(run.run_dir).outstanding() and heal_run(run.run_dir, run.run_id) == 0
    listing = (f"docker ps -aq --filter label=splitlab.run={run.run_id}; ip -o link show type vxlan; "
               f"ls {multi.remote_dir(run.run_id)} 2>/dev/null || true")
    left = on_hosts(bed_inventory, listing)
    assert left["host1"] == left["host2"] == "" and left["host3"] != ""
    (spec,) = [s for s in bed_inventory.hosts if s.name == "host3"]
    with closing({"host3": RemoteHost(spec)}) as hosts:  # host3 is back: its script removes what was left
        hosts["host3"].run_script((run.run_dir / "leftovers-host3.sh").read_text(), what="leftovers")
    assert on_hosts(bed_inventory, listing)["host3"] == ""
