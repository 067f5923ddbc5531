"""`splitlab doctor --inventory FILE`: what each host of an inventory has, checked over SSH with the same
probes as the local doctor where they apply (Docker, iptables in a namespace, NFQUEUE), plus what a host of a
multi-host run needs besides: sudo, its engine's API over SSH, VXLAN, netem, its clock offset to the controller,
free disk, and the room in its neighbour table (not required: the script that readies a host for a run raises
it where it can)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import docker
import requests

from chaos.cluster.doctor import (Check, Probe, check_disk, check_docker, check_iptables_netns, check_neighbours,
                                  check_nfqueue, first_line)
from chaos.hosts import hostengine
from chaos.hosts.inventory import Inventory
from chaos.hosts.remote import RemoteHost, closing, each
from node.errors import CommandFailed, EnvironmentProblem

MAX_CLOCK_OFFSET_S = 0.05  # beyond this, events of different hosts may be ordered wrongly by more than a heartbeat


def remote_probe(host: RemoteHost) -> Probe:
    """A doctor probe (argv -> (exit code, output)) that runs on `host` as root; 255 when SSH fails."""
    def probe(argv: Sequence[str]) -> tuple[int, str]:
        try:
            proc = host.run(argv, check=False, timeout_s=60)
        except EnvironmentProblem as exc:
            return 255, exc.message
        return proc.returncode, proc.stdout
    return probe


def check_ssh(host: RemoteHost) -> Check:
    try:
        who = host.run(["id", "-un"], root=False, timeout_s=20).stdout.strip()
    except (EnvironmentProblem, CommandFailed) as exc:
        return Check("SSH", False, first_line(exc.message), "check address, user, key and sshd on the host")
    return Check("SSH", True, f"{who}@{host.spec.address}:{host.spec.port}")


def check_root(host: RemoteHost, probe: Probe) -> Check:
    rc, out = probe(["id", "-u"])
    if rc == 0 and out.strip() == "0":
        how = "sudo -n" if host.command_line(["x"]).startswith("sudo") else "logged in as root"
        return Check("root (sudo)", True, how)
    return Check("root (sudo)", False, first_line(out) or "not root",
                 "log in as root, or set 'sudo: true' with passwordless sudo for the user")


def check_engine_api(host: RemoteHost) -> Check:
    """The engine's API through an SSH channel (`RemoteHost.engine`), the way a run's nodes start."""
    try:
        client = host.engine(timeout_s=20)
    except (EnvironmentProblem, CommandFailed) as exc:
        return Check("Docker API over SSH", False, first_line(exc.message), exc.hint or "")
    try:
        version = client.version(api_version=False)["ApiVersion"]
    except (docker.errors.DockerException, requests.RequestException, KeyError) as exc:
        return Check("Docker API over SSH", False, first_line(str(exc)) or type(exc).__name__, hostengine.HINT)
    finally:
        client.close()
    return Check("Docker API over SSH", True, f"API {version}, relayed by 'docker system dial-stdio'")


def check_vxlan(probe: Probe) -> Check:
    rc, out = probe(["unshare", "--net", "ip", "link", "add", "slcheck", "type", "vxlan", "id", "42", "dstport", "4789"])
    if rc == 0:
        return Check("VXLAN", True, "vxlan devices can be made (the data network across hosts)")
    return Check("VXLAN", False, first_line(out) or "failed",
                 "the kernel needs the vxlan module (modprobe vxlan); apt-get install iproute2")


def check_netem_tc(probe: Probe) -> Check:
    rc, out = probe(["unshare", "--net", "sh", "-c",
                     "ip link add d0 type veth peer name d1 && tc qdisc add dev d0 root netem delay 1ms"])
    if rc == 0:
        return Check("sch_netem (tc netem)", True, "tc netem works in a namespace", required=False)
    return Check("sch_netem (tc netem)", False, first_line(out) or "not available",
                 "not needed for partitions; link faults then need NFQUEUE", required=False)


def check_clock(host: RemoteHost) -> Check:
    try:
        offset_s, rtt_s = host.clock_offset_s()
    except EnvironmentProblem as exc:
        return Check("clock offset", False, exc.message, exc.hint or "")
    detail = f"{offset_s * 1000:+.1f} ms (round trip {rtt_s * 1000:.1f} ms)"
    if abs(offset_s) <= MAX_CLOCK_OFFSET_S:
        return Check("clock offset", True, detail)
    return Check("clock offset", False, detail, "run NTP or chrony on the hosts; histories are corrected by the "
                 "offset measured at up and stop, but drift in between is not", required=False)


def check_remote_disk(probe: Probe) -> Check:
    """Free disk under /var/lib, where the nodes' histories go (`multi.REMOTE_RUNS`), judged as the local doctor's."""
    rc, out = probe(["df", "-Pk", "/var/lib"])
    try:
        free_bytes = int(out.strip().splitlines()[-1].split()[3]) * 1024
    except (IndexError, ValueError):
        rc = 1
    if rc != 0:
        return Check("free disk", False, out.strip()[:200] or "df failed", "the host needs df (coreutils)")
    return check_disk(free_bytes, Path("/var/lib"))


def check_host(host: RemoteHost) -> list[Check]:
    """Every check of one host, in order; nothing after SSH when SSH fails."""
    ssh = check_ssh(host)
    if not ssh.ok:
        return [ssh]
    probe = remote_probe(host)
    return [ssh, check_root(host, probe), check_docker(probe), check_engine_api(host), check_iptables_netns(probe),
            check_vxlan(probe), check_netem_tc(probe), check_nfqueue(probe), check_clock(host),
            check_remote_disk(probe), check_neighbours(probe)]


def check_inventory(inventory: Inventory) -> dict[str, list[Check]]:
    """Every host's checks, hosts in parallel."""
    with closing({s.name: RemoteHost(s) for s in inventory.hosts}) as hosts:
        return each(hosts, check_host)
