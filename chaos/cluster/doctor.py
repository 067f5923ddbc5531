"""`splitlab doctor`: which capabilities this machine has, each ok or missing with a hint.

Each probe is a function of an injected `Probe` runner (argv -> (exit code, output)) plus plain values, so the
verdicts are unit-tested on fake inputs. `required` capabilities decide the exit code: 0 when the testbed can
run, 1 when it cannot.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from chaos.cluster import neighbours
from chaos.cluster.naming import LABEL_RUN

Probe = Callable[[Sequence[str]], tuple[int, str]]
MIN_FREE_DISK_BYTES = 2 * 1024**3
PROBE_NETWORK_PREFIX = "splitlab-doctor-"  # the engine check's network, removed at once
PROBE_NETWORK_RUN = "doctor"  # its `splitlab.run` label


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    hint: str = ""
    required: bool = True


def system_probe(argv: Sequence[str]) -> tuple[int, str]:
    """Run argv for real (missing program: 127); output is stdout and stderr together."""
    if shutil.which(argv[0]) is None:
        return 127, f"{argv[0]}: not found"
    try:
        proc = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return 124, "timed out"
    return proc.returncode, proc.stdout


def first_line(text: str) -> str:
    """The first line of a command's output, stripped ("" for none)."""
    return text.strip().splitlines()[0] if text.strip() else ""


def check_docker(probe: Probe) -> Check:
    """The engine answers, and it creates and removes a network (every run makes two). An engine can answer
    `version` and list images while its network controller is wedged: then every run would wait 60 s for its
    networks and fail, test after test, so the doctor (which `make test` asks first) says so at once."""
    rc, out = probe(["docker", "version", "--format", "{{.Server.Version}}"])
    if rc != 0:
        return Check("Docker engine", False, first_line(out) or "no answer",
                     "install docker.io and start the daemon; check DOCKER_HOST")
    version = out.strip()
    network = f"{PROBE_NETWORK_PREFIX}{os.getpid()}"
    rc, out = probe(["docker", "network", "create", "--label", f"{LABEL_RUN}={PROBE_NETWORK_RUN}", network])
    if rc == 0:
        rc, out = probe(["docker", "network", "rm", network])
    if rc == 0:
        return Check("Docker engine", True, f"server {version}; creates and removes a network")
    return Check("Docker engine", False, f"server {version} does not create and remove a network: "
                 f"{first_line(out) or 'no answer'}",
                 "the engine's network controller is stuck: restart the Docker daemon, then 'splitlab down --all'")


def check_compose(probe: Probe) -> Check:
    rc, out = probe(["docker", "compose", "version", "--short"])
    if rc == 0:
        return Check("Docker Compose", True, f"v2 {out.strip()}")
    rc, out = probe(["docker-compose", "version", "--short"])
    if rc == 0:
        return Check("Docker Compose", True, f"v1 {out.strip()}")
    return Check("Docker Compose", False, "neither 'docker compose' nor 'docker-compose' (splitlab starts runs "
                 "through the engine's API; compose serves the repository's docker-compose.yml and a run's own file)",
                 "apt-get install docker-compose", required=False)


def check_images(present: dict[str, bool]) -> Check:
    missing = [tag for tag, ok in present.items() if not ok]
    if not missing:
        return Check("images built", True, ", ".join(present))
    return Check("images built", False, "missing " + ", ".join(missing), "make images")


def check_iptables_netns(probe: Probe) -> Check:
    """iptables inside a fresh network namespace, as the controller uses it inside a container's."""
    rc, out = probe(["unshare", "--net", "iptables", "-w", "-A", "INPUT", "-p", "udp", "-j", "DROP"])
    if rc == 0:
        rc2, ver = probe(["iptables", "--version"])
        return Check("iptables in a network namespace", True, first_line(ver) if rc2 == 0 else "ok")
    return Check("iptables in a network namespace", False, first_line(out),
                 "run as root; apt-get install iptables")


def check_netem(probe: Probe) -> Check:
    """The netem backend's own self-test (chaos.net.netem) in a throwaway network namespace."""
    rc, out = probe(["unshare", "--net", sys.executable, "-m", "chaos.net.netem"])
    if rc == 0:
        return Check("sch_netem (tc netem)", True, "netem (through pyroute2) serves delay with jitter, "
                     "correlation and distribution, loss, duplication, reordering, corruption, rate", required=False)
    return Check("sch_netem (tc netem)", False, first_line(out) or "not available",
                 "not needed: the NFQUEUE shaper serves every link fault", required=False)


def check_nfqueue(probe: Probe) -> Check:
    """The kernel's NFQUEUE target (the shaper speaks its netlink protocol itself: chaos.net.shaper.nfq)."""
    rc, out = probe(["unshare", "--net", "iptables", "-w", "-A", "OUTPUT", "-p", "udp", "-j", "NFQUEUE",
                     "--queue-num", "7", "--queue-bypass"])
    if rc != 0:
        return Check("NFQUEUE", False, first_line(out), "the kernel needs nfnetlink_queue / xt_NFQUEUE")
    return Check("NFQUEUE", True, "userspace shaper and protocol-aware faults available")


def check_java(probe: Probe) -> Check:
    rc, out = probe(["java", "-version"])
    if rc == 0:
        return Check("Java for Spark", True, first_line(out))
    return Check("Java for Spark", False, first_line(out) or "java not found",
                 "apt-get install default-jre-headless (make test installs it)")


def check_disk(free_bytes: int, where: Path) -> Check:
    gib = free_bytes / 1024**3
    if free_bytes >= MIN_FREE_DISK_BYTES:
        return Check("free disk", True, f"{gib:.1f} GiB free at {where}")
    return Check("free disk", False, f"{gib:.1f} GiB free at {where}",
                 f"free at least {MIN_FREE_DISK_BYTES // 1024**3} GiB (docker image prune, make clean)")


def check_neighbours(probe: Probe) -> Check:
    """How many nodes the kernel's ARP table has room for (`chaos.cluster.neighbours`); `up` raises it as root."""
    rc, out = probe(["sysctl", "-n", "net.ipv4.neigh.default.gc_thresh3"])
    name = "neighbour table (ARP)"
    if rc != 0 or not out.strip().isdigit():
        return Check(name, False, first_line(out) or "unreadable", "sysctl net.ipv4.neigh.default.gc_thresh3",
                     required=False)
    limit = int(out.strip())
    nodes = neighbours.room_for(limit)
    return Check(name, True, f"gc_thresh3 {limit}: room for {nodes} nodes; 'splitlab up' raises it for more (as "
                             f"root)", required=False)


def fault_backends(netem: Check, nfqueue: Check) -> dict[str, str]:
    """Which backend serves each fault on this machine."""
    link = "netem" if netem.ok else ("nfqueue (userspace shaper, seeded)" if nfqueue.ok else "none")
    from chaos.net.partition import bridges_filter

    on_bridge = "iptables on the run's data bridge (chain SLB-<run> in the host's FORWARD, one commit for every " \
                "node); on several hosts, in each node's namespace (SL-<run> in INPUT)"
    return {"partition": on_bridge if bridges_filter() else "iptables (chain SL-<run> in each node's INPUT)",
            "delay/jitter (correlation, distribution), duplication, reordering, corruption, rate": link,
            "loss": link if link != "none" else "iptables statistic (kernel RNG, not seeded)",
            "protocol-aware faults": "nfqueue + scapy" if nfqueue.ok else "none",
            "injection, replay, capture": "raw/packet sockets in the node namespace"}


def can_run(checks: list[Check]) -> bool:
    return all(c.ok for c in checks if c.required)


def run_checks(probe: Probe, images_present: Callable[[], dict[str, bool]], disk_path: Path) -> list[Check]:
    """Every check in order; image status is asked only when Docker answers."""
    docker_check = check_docker(probe)
    checks = [docker_check, check_compose(probe)]
    if docker_check.ok:
        checks.append(check_images(images_present()))
    else:
        checks.append(Check("images built", False, "Docker not reachable", "start Docker, then make images"))
    checks += [check_iptables_netns(probe), check_netem(probe), check_nfqueue(probe), check_java(probe),
               check_neighbours(probe)]
    path = disk_path if disk_path.exists() else Path("/")
    checks.append(check_disk(shutil.disk_usage(path).free, path))
    return checks
