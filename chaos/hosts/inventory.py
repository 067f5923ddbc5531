"""The inventory of hosts (a YAML file) and the placement of nodes on them.

    hosts:
      - name: hosta              # [a-z][a-z0-9-]*, at most 16 characters
        address: 192.0.2.10      # what SSH connects to; also the VXLAN endpoint unless data_address is given
        user: root               # default: root
        port: 22                 # default: 22
        key: keys/id_ed25519     # private key, relative to the inventory file; default: the SSH agent / ~/.ssh
        sudo: false              # run root commands through `sudo -n` (needs passwordless sudo); default: false
        data_address: 10.1.0.10  # optional: the address VXLAN uses between hosts (a separate lab NIC)

Every mistake is a `UsageError` naming the file, the host and the field.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from node.errors import UsageError

NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
FIELDS = {"name", "address", "user", "port", "key", "sudo", "data_address"}
MAX_HOSTS = 64


@dataclass(frozen=True)
class HostSpec:
    """One host of the inventory."""

    name: str
    address: str
    user: str = "root"
    port: int = 22
    key: str | None = None
    sudo: bool = False
    data_address: str | None = None

    @property
    def vxlan_address(self) -> str:
        """The address the other hosts' VXLAN devices send to."""
        return self.data_address or self.address


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: tuple[HostSpec, ...]

    def host(self, name: str) -> HostSpec:
        for spec in self.hosts:
            if spec.name == name:
                return spec
        raise UsageError(f"inventory {self.path} has no host {name!r}; hosts: {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def as_dict(self) -> dict[str, Any]:
        return {"hosts": [{k: v for k, v in vars(h).items() if v is not None} for h in self.hosts]}


def _address(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where}: must be an IP address or a host name")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        if HOSTNAME_RE.match(value) and not value.replace(".", "").isdigit():
            return value
        raise UsageError(f"{where}: {value!r} is neither an IP address nor a host name") from None


def _host(raw: Any, index: int, path: Path) -> HostSpec:
    where = f"{path}: hosts[{index}]"
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: must be a mapping with name and address")
    unknown = sorted(set(map(str, raw)) - FIELDS)
    if unknown:
        raise UsageError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(FIELDS))}")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise UsageError(f"{where}: name {name!r} must match {NAME_RE.pattern}")
    where = f"{path}: host {name}"
    if "address" not in raw:
        raise UsageError(f"{where}: address is missing")
    address = _address(raw["address"], f"{where}: address")
    user = raw.get("user", "root")
    if not isinstance(user, str) or not re.match(r"^[a-z_][a-z0-9_-]{0,31}$", user):
        raise UsageError(f"{where}: user {user!r} is not a user name")
    port = raw.get("port", 22)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise UsageError(f"{where}: port {port!r} must be an integer from 1 to 65535")
    sudo = raw.get("sudo", False)
    if not isinstance(sudo, bool):
        raise UsageError(f"{where}: sudo must be true or false, not {sudo!r}")
    key = raw.get("key")
    if key is not None:
        if not isinstance(key, str) or not key:
            raise UsageError(f"{where}: key must be a file path")
        key_path = (path.parent / Path(key).expanduser()).resolve()
        if not key_path.is_file():
            raise UsageError(f"{where}: key file {key_path} does not exist")
        key = str(key_path)
    data_address = raw.get("data_address")
    if data_address is not None:
        data_address = _address(data_address, f"{where}: data_address")
    return HostSpec(name, address, user, port, key, sudo, data_address)


def parse(text: str, path: Path) -> Inventory:
    """The inventory in `text` (read from `path`, which anchors relative key paths). Raises `UsageError`."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(doc, dict) or set(doc) != {"hosts"} or not isinstance(doc["hosts"], list):
        raise UsageError(f"{path}: must be a mapping with one key, 'hosts', holding a list of hosts")
    if not doc["hosts"]:
        raise UsageError(f"{path}: lists no host")
    if len(doc["hosts"]) > MAX_HOSTS:
        raise UsageError(f"{path}: {len(doc['hosts'])} hosts; at most {MAX_HOSTS}")
    hosts = tuple(_host(raw, i, path) for i, raw in enumerate(doc["hosts"]))
    for field in ("name", "vxlan_address"):
        seen: dict[str, str] = {}
        for h in hosts:
            value = getattr(h, field)
            if value in seen:
                raise UsageError(f"{path}: hosts {seen[value]} and {h.name} share the "
                                 f"{'name' if field == 'name' else 'data address'} {value}")
            seen[value] = h.name
    return Inventory(path, hosts)


def load(path: str | Path) -> Inventory:
    """Read and check the inventory file. Raises `UsageError`."""
    path = Path(path).expanduser().resolve()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the inventory {path}: {exc}") from None
    return parse(text, path)


def place(nodes: Sequence[str], hosts: Sequence[str], placement: str | None) -> dict[str, str]:
    """Which host runs each node: `round-robin` (default) or an explicit `n1,n2@hosta;n3@hostb` naming every
    node exactly once. Raises `UsageError`."""
    if placement in (None, "", "round-robin"):
        return {node: hosts[i % len(hosts)] for i, node in enumerate(nodes)}
    out: dict[str, str] = {}
    for group in placement.split(";"):
        names, at, host = group.strip().partition("@")
        if not at or not names.strip() or not host.strip():
            raise UsageError(f"placement group {group.strip()!r} must read 'n1,n2@host'",
                             hint="e.g. --placement 'n1,n2@hosta;n3@hostb', or round-robin")
        host = host.strip()
        if host not in hosts:
            raise UsageError(f"placement names host {host!r}, not in the inventory ({', '.join(hosts)})")
        for node in (n.strip() for n in names.split(",")):
            if node not in nodes:
                raise UsageError(f"placement names node {node!r}; this run has {', '.join(nodes)}")
            if node in out:
                raise UsageError(f"placement puts node {node} on both {out[node]} and {host}")
            out[node] = host
    missing = [n for n in nodes if n not in out]
    if missing:
        raise UsageError(f"placement leaves node(s) {', '.join(missing)} without a host")
    return {n: out[n] for n in nodes}


def placement_text(where: dict[str, str]) -> str:
    """The `--placement` text that gives back `where` (node -> host), for `place`."""
    by_host: dict[str, list[str]] = {}
    for node, host in where.items():
        by_host.setdefault(host, []).append(node)
    return ";".join(f"{','.join(nodes)}@{host}" for host, nodes in by_host.items())
