"""doctor's probes on fake inputs: each capability ok or missing with a hint, and the exit decision."""
import sys
from pathlib import Path

from chaos.cluster import doctor


def fake_probe(answers):
    """A probe answering by the first words of argv; unknown commands are 'not found' (127)."""
    def probe(argv):
        for prefix, answer in answers.items():
            if tuple(argv[:len(prefix)]) == prefix:
                return answer
        return 127, f"{argv[0]}: not found"
    return probe


def recording(probe, asked):
    """`probe`, appending every argv it is asked to `asked`."""
    def wrapped(argv):
        asked.append(list(argv))
        return probe(argv)
    return wrapped


HEALTHY = {
    ("docker", "version"): (0, "20.10.24\n"),
    ("docker", "network", "create"): (0, "3f1c\n"),
    ("docker", "network", "rm"): (0, "splitlab-doctor-1\n"),
    ("docker", "compose"): (1, "docker: 'compose' is not a docker command."),
    ("docker-compose", "version"): (0, "1.29.2\n"),
    ("unshare", "--net", "iptables", "-w", "-A", "INPUT"): (0, ""),
    ("iptables", "--version"): (0, "iptables v1.8.9 (nf_tables)\n"),
    ("unshare", "--net", sys.executable, "-m", "chaos.net.netem"):
        (1, "the netem self-test: the kernel refused 'qdisc add dev sl-netem parent 1:10 handle 10: netem delay 1ms':"
            " No such file or directory\n"),
    ("unshare", "--net", "iptables", "-w", "-A", "OUTPUT"): (0, ""),
    ("java", "-version"): (0, 'openjdk version "17.0.15" 2025-04-15\n'),
}


def checks_for(answers, images=None, path=Path("/")):
    return doctor.run_checks(fake_probe(answers), lambda: images or {"splitlab-node:abc": True}, path)


def by_name(checks):
    return {c.name: c for c in checks}


def test_healthy_machine_without_netem_can_run_and_uses_the_shaper():
    checks = by_name(checks_for(HEALTHY))
    assert checks["Docker Compose"].detail == "v1 1.29.2"
    netem = checks["sch_netem (tc netem)"]
    assert not netem.ok and not netem.required and "NFQUEUE shaper" in netem.hint
    assert doctor.can_run(list(checks.values()))
    backends = doctor.fault_backends(netem, checks["NFQUEUE"])
    assert backends["delay/jitter (correlation, distribution), duplication, reordering, corruption, rate"].startswith("nfqueue")
    assert backends["partition"].startswith("iptables")


def test_netem_present_serves_link_faults():
    answers = {**HEALTHY, ("unshare", "--net", sys.executable, "-m", "chaos.net.netem"): (0, "")}
    checks = by_name(checks_for(answers))
    assert doctor.fault_backends(checks["sch_netem (tc netem)"], checks["NFQUEUE"])["loss"] == "netem"


def test_docker_down_cannot_run_and_images_are_not_asked():
    asked = []
    answers = {**HEALTHY, ("docker", "version"): (1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock")}
    checks = doctor.run_checks(fake_probe(answers), lambda: asked.append(1) or {}, Path("/"))
    named = by_name(checks)
    assert not named["Docker engine"].ok and "Cannot connect" in named["Docker engine"].detail
    assert named["Docker engine"].hint
    assert not named["images built"].ok and not asked
    assert not doctor.can_run(checks)


def test_an_engine_that_answers_but_creates_no_network_cannot_run():
    """The engine of a wedged network controller answers `version` and lists images, and every run then waits
    60 s for its networks: the doctor (which make test asks first) fails at once, with what to do."""
    asked = []
    probe = recording(fake_probe({**HEALTHY, ("docker", "network", "create"): (124, "timed out")}), asked)
    checks = doctor.run_checks(probe, lambda: {"splitlab-node:abc": True}, Path("/"))
    engine = by_name(checks)["Docker engine"]
    assert not engine.ok and "does not create and remove a network: timed out" in engine.detail
    assert "restart the Docker daemon" in engine.hint and not doctor.can_run(checks)
    created = [a for a in asked if a[:3] == ["docker", "network", "create"]]
    assert len(created) == 1 and created[0][-1].startswith(doctor.PROBE_NETWORK_PREFIX)
    assert "splitlab.run=doctor" in created[0]


def test_a_healthy_engine_removes_the_network_it_created():
    asked = []
    probe = recording(fake_probe(HEALTHY), asked)
    engine = by_name(doctor.run_checks(probe, lambda: {"splitlab-node:abc": True}, Path("/")))["Docker engine"]
    assert engine.ok and engine.detail == "server 20.10.24; creates and removes a network"
    created = next(a[-1] for a in asked if a[:3] == ["docker", "network", "create"])
    assert ["docker", "network", "rm", created] in asked


def test_missing_images_java_and_compose_each_have_a_hint():
    answers = {k: v for k, v in HEALTHY.items() if k[0] not in ("java", "docker-compose")}
    checks = by_name(checks_for(answers, images={"splitlab-base:1": True, "splitlab-node:2": False}))
    assert checks["images built"].hint == "make images" and "splitlab-node:2" in checks["images built"].detail
    assert "default-jre-headless" in checks["Java for Spark"].hint
    assert "docker-compose" in checks["Docker Compose"].hint
    assert not doctor.can_run(list(checks.values()))


def test_low_disk_fails():
    low = doctor.check_disk(100 * 1024**2, Path("/x"))
    assert not low.ok and "0.1 GiB free at /x" == low.detail
    assert doctor.check_disk(3 * 1024**3, Path("/x")).ok


def test_no_nfqueue_and_no_netem_leaves_only_iptables_loss():
    answers = {**HEALTHY, ("unshare", "--net", "iptables", "-w", "-A", "OUTPUT"): (1, "No chain/target/match")}
    checks = by_name(checks_for(answers))
    assert not doctor.can_run(list(checks.values()))
    backends = doctor.fault_backends(checks["sch_netem (tc netem)"], checks["NFQUEUE"])
    assert backends["delay/jitter (correlation, distribution), duplication, reordering, corruption, rate"] == "none"
    assert backends["loss"].startswith("iptables statistic")


def test_partitions_go_to_the_data_bridge_where_bridges_filter(monkeypatch, tmp_path):
    from chaos.net import partition

    monkeypatch.setattr(partition, "BRIDGE_FILTERING", {4: tmp_path / "v4", 6: tmp_path / "v6"})
    checks = by_name(checks_for(HEALTHY))
    netem, nfqueue = checks["sch_netem (tc netem)"], checks["NFQUEUE"]
    assert doctor.fault_backends(netem, nfqueue)["partition"] == "iptables (chain SL-<run> in each node's INPUT)"
    (tmp_path / "v4").write_text("1\n")
    assert "chain SLB-<run> in the host's FORWARD" in doctor.fault_backends(netem, nfqueue)["partition"]
    assert partition.bridges_filter() and not partition.bridges_filter(ipv6=True)  # v6: no file, no filter


def test_the_neighbour_table_says_how_many_nodes_it_has_room_for():
    checks = by_name(checks_for({**HEALTHY, ("sysctl", "-n"): (0, "1024\n")}))
    table = checks["neighbour table (ARP)"]
    assert table.ok and not table.required and "room for 19 nodes" in table.detail  # the kernel default
    checks = by_name(checks_for({**HEALTHY, ("sysctl", "-n"): (0, "16384\n")}))
    assert "room for 89 nodes" in checks["neighbour table (ARP)"].detail
    unreadable = by_name(checks_for(HEALTHY))["neighbour table (ARP)"]
    assert not unreadable.ok and not unreadable.required and doctor.can_run(list(by_name(checks_for(HEALTHY)).values()))
