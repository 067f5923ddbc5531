"""The test bed: lab hosts as containers on this machine, each running OpenSSH server and its own Docker engine,
reached by the controller only through SSH with a key made for this bed (what `splitlab bed up` starts and the
multi-host tests use). Nothing here is a mock: the hosts are real sshd and dockerd processes.

A nested engine cannot run `--privileged` here (the sandbox lacks CAP_SYS_RESOURCE). What it needs instead:
every capability but SYS_RESOURCE, seccomp, AppArmor and systempaths unconfined, a private cgroup namespace,
the cgroup v1 hierarchies mounted inside before dockerd starts (images/hostbed/entry.sh), and a host directory
as /var/lib/docker (overlay2 does not stack on the outer engine's overlay). The bed's directory holds the key,
the inventory `hosts.yaml` and each host's engine directory; `down` removes the containers, the network and
the engine directories.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from chaos.cluster import images
from chaos.host.proc import run
from chaos.hosts.inventory import HostSpec, Inventory, load
from chaos.hosts.remote import RemoteHost
from node.errors import CommandFailed, EnvironmentProblem, UsageError

LABEL_BED = "splitlab.bed"
MAX_HOSTS = 8
READY_TIMEOUT_S = 90
KEY_FILE = "id_ed25519"
Log = Callable[[str], None]


def bed_name(bed_dir: Path) -> str:
    """The bed's name: its directory's name, checked to be usable in container names."""
    name = bed_dir.resolve().name
    if not name.replace("-", "").isalnum() or len(name) > 24:
        raise UsageError(f"bed directory name {name!r} must be letters, digits and '-', at most 24 characters")
    return name.lower()


def container(bed: str, index: int) -> str:
    return f"splitlab-bed-{bed}-host{index}"


def network(bed: str) -> str:
    return f"splitlab-bed-{bed}"


def _write_key(bed_dir: Path) -> str:
    """A new Ed25519 key pair for this bed, in OpenSSH's formats (cryptography writes it; no ssh-keygen needed);
    returns the public line. Not RSA: paramiko loads a private key again for every connection, and a 3,072-bit RSA
    key takes 167 ms of CPU to load (cryptography checks it whole), an Ed25519 key 0.3 ms."""
    key = ed25519.Ed25519PrivateKey.generate()
    path = bed_dir / KEY_FILE
    path.touch(mode=0o600)
    path.chmod(0o600)  # a key left by an earlier bed in this directory too
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    line = f"{public.decode()} splitlab-bed"
    (bed_dir / f"{KEY_FILE}.pub").write_text(line + "\n")
    return line


def up(bed_dir: Path, hosts: int = 3, log: Log = lambda _: None, cpu_shares: int | None = None) -> Inventory:
    """Start `hosts` bed hosts and wait until each answers SSH and its Docker engine runs; returns the inventory
    (also written to `bed_dir/hosts.yaml`). `cpu_shares`: each host's CPU weight (`docker run --cpu-shares`,
    1024 by default; the nodes a host runs are inside it), lower for a bed that shares the machine with runs
    that must keep their timing. Raises `UsageError` when the bed exists, `EnvironmentProblem` when a host does
    not come up (with its log); what was started is removed again."""
    if not 1 <= hosts <= MAX_HOSTS:
        raise UsageError(f"--hosts {hosts}: a bed has 1 to {MAX_HOSTS} hosts")
    bed_dir = Path(bed_dir).resolve()
    bed = bed_name(bed_dir)
    if run(["docker", "ps", "-aq", "--filter", f"label={LABEL_BED}={bed}"]).stdout.strip():
        raise UsageError(f"bed {bed} already runs", hint=f"'splitlab bed down --dir {bed_dir}' first")
    image = images.build_hostbed(log)
    bed_dir.mkdir(parents=True, exist_ok=True)
    public = _write_key(bed_dir)
    try:
        run(["docker", "network", "create", "--label", f"{LABEL_BED}={bed}", network(bed)])
        specs = [_start_host(bed, bed_dir, i, image, public, cpu_shares) for i in range(1, hosts + 1)]
        doc = {"hosts": [{"name": s.name, "address": s.address, "user": "root", "key": KEY_FILE} for s in specs]}
        (bed_dir / "hosts.yaml").write_text("# the test bed's hosts, written by 'splitlab bed up'\n" +
                                            yaml.safe_dump(doc, sort_keys=False))
        inventory = load(bed_dir / "hosts.yaml")
        for spec in inventory.hosts:
            _wait_ready(bed, spec, log)
    except BaseException:
        log(f"bed {bed}: start failed, removing it")
        down(bed_dir)
        raise
    log(f"bed {bed}: {hosts} host(s) up: " + ", ".join(f"{h.name}={h.address}" for h in inventory.hosts))
    return inventory


def _start_host(bed: str, bed_dir: Path, index: int, image: str, public: str, cpu_shares: int | None) -> HostSpec:
    engine_dir = bed_dir / f"host{index}" / "docker"
    engine_dir.mkdir(parents=True, exist_ok=True)
    name = container(bed, index)
    run(["docker", "run", "-d", "--name", name, "--hostname", f"host{index}", "--label", f"{LABEL_BED}={bed}",
         "--network", network(bed), "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
         "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
         "--security-opt", "systempaths=unconfined", "--cgroupns", "private",
         *(["--cpu-shares", str(cpu_shares)] if cpu_shares else []),
         "-v", f"{engine_dir}:/var/lib/docker", "-e", f"SPLITLAB_BED_PUBKEY={public}", image], timeout_s=60)
    address = run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                   name]).stdout.strip()
    return HostSpec(f"host{index}", address, key=str(bed_dir / KEY_FILE))


def _wait_ready(bed: str, spec: HostSpec, log: Log) -> None:
    host = RemoteHost(spec, connect_timeout_s=5)
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = ""
    try:
        while time.monotonic() < deadline:
            try:
                host.run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout_s=10)
                log(f"bed {bed}: {spec.name} answers SSH and its Docker engine runs")
                return
            except (EnvironmentProblem, CommandFailed) as exc:
                last = exc.message
            time.sleep(0.5)
    finally:
        host.close()
    index = spec.name.removeprefix("host")
    logs = run(["docker", "exec", container(bed, int(index)), "sh", "-c",
                "tail -n 20 /var/log/splitlab-bed.log /var/log/dockerd.log"], check=False).stdout
    raise EnvironmentProblem(f"bed {bed}: {spec.name} not ready within {READY_TIMEOUT_S} s: {last}\n{logs}",
                             hint="the nested engine needs cgroup v1 and a non-overlay /var/lib/docker; see "
                                  "chaos/hosts/bed.py")


def down(bed_dir: Path) -> int:
    """Remove the bed's containers, network and engine directories; returns how many containers went.
    Idempotent."""
    bed_dir = Path(bed_dir).resolve()
    bed = bed_name(bed_dir)
    ids = run(["docker", "ps", "-aq", "--filter", f"label={LABEL_BED}={bed}"]).stdout.split()
    if ids:
        run(["docker", "rm", "-f", "-v", *ids], timeout_s=120)
    if run(["docker", "network", "ls", "-q", "--filter", f"name=^{network(bed)}$"]).stdout.strip():
        run(["docker", "network", "rm", network(bed)])
    for engine in (p for p in bed_dir.glob("host[0-9]*") if p.is_dir()):
        shutil.rmtree(engine, ignore_errors=False)
    return len(ids)
