"""The node's configuration, read from the environment the cluster definition sets (SPLITLAB_*).

| variable | meaning | default |
|---|---|---|
| SPLITLAB_NODE | this node's name | required |
| SPLITLAB_RUN | run id | required |
| SPLITLAB_MEMBERS | initial members, comma separated, in join order (at most `MAX_NODES`) | required |
| SPLITLAB_TOKEN | control API token of the run | required |
| SPLITLAB_RUN_DIR | bind-mounted run directory; history goes to events/<node>.jsonl | /splitlab/run |
| SPLITLAB_DATA_PORT / SPLITLAB_CONTROL_PORT | UDP data port / HTTP control port | 7100 / 7000 |
| SPLITLAB_DATA_HOST_TEMPLATE | how a member's data address is resolved | {name}-data |
| SPLITLAB_CONTROL_HOST_TEMPLATE | how this node's control address is resolved | {name}-control |
| SPLITLAB_ADDRESSES | explicit `name=host:port,...` data addresses (overrides the template); an IPv6 host in brackets, `n1=[fd00::101]:7100`, makes the data socket IPv6 | empty |
| SPLITLAB_CONTROL_BIND | explicit control `host:port` (overrides the template) | empty |
| SPLITLAB_HEARTBEAT_MS / SPLITLAB_SILENCE_MS | heartbeat interval / silence before a peer counts as unheard | 250 / 1500 |
| SPLITLAB_BUNDLE_MAX_BYTES | bundling: max datagram size; 0 sends one message per datagram | 8192 |
| SPLITLAB_RECV_BUFFER_BYTES | SO_RCVBUF asked for the data socket (capped by net.core.rmem_max; the effective size is in `node_start`) | 4194304 |
| SPLITLAB_FLUSH_MS | history flush interval | 500 |
| SPLITLAB_AUTH_KEY | the run's key of the authenticated wire, hex (`splitlab up --auth`): every datagram sent is signed, every one received without its tag dropped (`node.auth`) | empty: the open wire |
| SPLITLAB_UNICAST | unicast layer: unicast3, unicast2, unicast1 or another registered one (node/layers.py) | unicast3 |
| SPLITLAB_UNICAST_<SETTING> | a `node.unicast.UnicastConfig` setting, e.g. SPLITLAB_UNICAST_CONN_CLOSE_TIMEOUT_MS | its default |
| SPLITLAB_MEMBERSHIP | membership layer: gms (views, suspicion, merges), another registered one, or none | gms |
| SPLITLAB_MEMBERSHIP_<SETTING> | a `node.membership.MembershipConfig` setting, e.g. ..._SUSPECT_TIMEOUT_MS | its default |
| SPLITLAB_MULTICAST | multicast layer: nakack4, another registered one, or none | nakack4 |
| SPLITLAB_BCAST_SYNC | broadcast-link start sync of nakack4: tipc (the fix) or legacy (the race) | tipc |
| SPLITLAB_NAKACK4_<SETTING> | a `node.multicast.Nakack4Config` setting, e.g. ..._CAPACITY (SEND_ATOMIC 0/1) | its default |

Within a splitlab cluster, `<name>-data` and `<name>-control` are the node's network aliases on the data and
control networks, so each address resolves inside the container to the right network.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Mapping

from node.auth import AUTH_KEY_ENV, WireKey
from node.errors import ConfigError
from node.layers import layer_choices
from node.membership import MembershipConfig
from node.multicast import SYNC_MODES, Nakack4Config
from node.unicast import UnicastConfig
from node.unicast.connid import conn_id_start_from_boot
from node.wire import DATA_PORT, MAX_DATAGRAM_BYTES, MAX_SENDER_BYTES, MAX_VIEW_MEMBERS

CONTROL_PORT = 7000
# The one limit on a cluster's size, used by the node, `splitlab up` and the scenario loader alike: a view
# carries its members with a one-byte count (node.wire). Nothing else binds first: the compose networks get
# Docker's /16 or /20 address pools, a Linux bridge takes 1024 ports, netem gives each peer an htb class.
MAX_NODES = MAX_VIEW_MEMBERS
NODE_COUNT = f"a whole number of nodes from 1 to {MAX_NODES}"  # what a count must be, as error messages say it
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_")
# The variables of the node contract (NODE_CONTRACT.md): every node implementation gets them and reads them the
# same way; the rest of this table is splitlab's own node's (another kind has variables of its own).
CONTRACT_VARIABLES = ("SPLITLAB_NODE", "SPLITLAB_RUN", "SPLITLAB_MEMBERS", "SPLITLAB_TOKEN", "SPLITLAB_RUN_DIR",
                      "SPLITLAB_DATA_PORT", "SPLITLAB_CONTROL_PORT", "SPLITLAB_DATA_HOST_TEMPLATE",
                      "SPLITLAB_CONTROL_HOST_TEMPLATE", "SPLITLAB_ADDRESSES", "SPLITLAB_CONTROL_BIND",
                      "SPLITLAB_HEARTBEAT_MS", "SPLITLAB_SILENCE_MS", "SPLITLAB_FLUSH_MS")
# Contract variables a node kind may offer (NODE_CONTRACT.md): a kind that does not is never given them
# (`splitlab up` and the scenario loader refuse what needs them; chaos.cluster.kinds.NodeKind.auth).
OPTIONAL_CONTRACT_VARIABLES = (AUTH_KEY_ENV,)


def check_name(name: str, what: str = "node name") -> str:
    """Validate a node name (lowercase letters, digits, '-' and '_', starting with a letter). Raises ConfigError."""
    if not name or not name[0].isalpha() or not set(name) <= _NAME_CHARS or len(name) > MAX_SENDER_BYTES:
        raise ConfigError(f"invalid {what} {name!r}",
                          hint="use lowercase letters, digits, '-' or '_', starting with a letter, at most "
                               f"{MAX_SENDER_BYTES} characters")
    return name


def check_node_count(count: object, where: str) -> int:
    """`count` when a cluster may have that many nodes. Raises ConfigError `<where>: expected <NODE_COUNT>, got
    <count>`, the message `splitlab up` and the scenario loader (chaos.harness.schema) share."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_NODES:
        raise ConfigError(f"{where}: expected {NODE_COUNT}, got {count!r}")
    return count


def _hostport(text: str, where: str) -> tuple[str, int]:
    """(host, port) from `host:port` or `[ipv6]:port` (the brackets removed)."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{where}: expected host:port or [ipv6]:port, got {text!r}")
    return host, int(port)


@dataclass(frozen=True)
class NodeConfig:
    name: str
    run_id: str
    members: tuple[str, ...]
    token: str
    run_dir: str = "/splitlab/run"
    data_port: int = DATA_PORT
    control_port: int = CONTROL_PORT
    data_host_template: str = "{name}-data"
    control_host_template: str = "{name}-control"
    addresses: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    control_bind: tuple[str, int] | None = None
    heartbeat_ms: int = 250
    silence_ms: int = 1500
    bundle_max_bytes: int = 8192
    recv_buffer_bytes: int = 4 << 20  # SO_RCVBUF asked for the data socket; the kernel caps it at rmem_max
    flush_ms: int = 500
    unicast: str = "unicast3"
    unicast_config: UnicastConfig = field(default_factory=UnicastConfig)
    membership: str = "gms"
    membership_config: MembershipConfig = field(default_factory=MembershipConfig)
    multicast: str = "nakack4"
    bcast_sync: str = "tipc"
    nakack4_config: Nakack4Config = field(default_factory=Nakack4Config)
    auth_key: WireKey | None = None  # the authenticated wire's key (None: the open wire)

    def data_address(self, member: str) -> tuple[str, int]:
        """(host, port) of a member's data socket; the host may still need DNS resolution."""
        if member in self.addresses:
            return self.addresses[member]
        return self.data_host_template.format(name=member), self.data_port

    @property
    def data_family(self) -> socket.AddressFamily:
        """AF_INET6 when this node's own data address is an IPv6 literal (`splitlab up --ipv6`), else AF_INET:
        the family of the data socket and of every member's address resolution."""
        return socket.AF_INET6 if ":" in self.data_address(self.name)[0] else socket.AF_INET

    def control_address(self) -> tuple[str, int]:
        if self.control_bind is not None:
            return self.control_bind
        return self.control_host_template.format(name=self.name), self.control_port

    @property
    def history_path(self) -> str:
        return os.path.join(self.run_dir, "events", f"{self.name}.jsonl")


def _int(env: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{key}={raw!r} is not an integer") from None
    if not low <= value <= high:
        raise ConfigError(f"{key}={value} is outside {low}..{high}")
    return value


def from_env(env: Mapping[str, str] | None = None) -> NodeConfig:
    """Build the configuration from `env` (default: os.environ). Raises ConfigError naming the bad variable."""
    env = os.environ if env is None else env
    missing = [k for k in ("SPLITLAB_NODE", "SPLITLAB_RUN", "SPLITLAB_MEMBERS", "SPLITLAB_TOKEN") if not env.get(k)]
    if missing:
        raise ConfigError(f"missing environment variable(s): {', '.join(missing)}")
    name = check_name(env["SPLITLAB_NODE"], "SPLITLAB_NODE")
    members = tuple(check_name(m.strip(), "member in SPLITLAB_MEMBERS") for m in env["SPLITLAB_MEMBERS"].split(","))
    check_node_count(len(members), "SPLITLAB_MEMBERS")
    if len(set(members)) != len(members):
        raise ConfigError(f"SPLITLAB_MEMBERS lists a member twice: {env['SPLITLAB_MEMBERS']}")
    if name not in members:
        raise ConfigError(f"SPLITLAB_NODE={name} is not in SPLITLAB_MEMBERS={env['SPLITLAB_MEMBERS']}")
    addresses: dict[str, tuple[str, int]] = {}
    for item in filter(None, (s.strip() for s in env.get("SPLITLAB_ADDRESSES", "").split(","))):
        member, sep, hostport = item.partition("=")
        if not sep or member not in members:
            raise ConfigError(f"SPLITLAB_ADDRESSES: {item!r} must be member=host:port with a listed member")
        addresses[member] = _hostport(hostport, "SPLITLAB_ADDRESSES")
    control_bind = env.get("SPLITLAB_CONTROL_BIND")
    heartbeat_ms = _int(env, "SPLITLAB_HEARTBEAT_MS", 250, 10, 60_000)
    silence_ms = _int(env, "SPLITLAB_SILENCE_MS", 1500, 20, 600_000)
    if silence_ms <= heartbeat_ms:
        raise ConfigError(f"SPLITLAB_SILENCE_MS={silence_ms} must exceed SPLITLAB_HEARTBEAT_MS={heartbeat_ms}")
    unicast_settings = _settings(env, "SPLITLAB_UNICAST_")
    unicast = _choice(env, "SPLITLAB_UNICAST", "unicast3", layer_choices("unicast"))
    # The first connection id comes from the boot time unless set (a new life is told apart by its incarnation,
    # not by its ids: node/unicast/connid.py).
    unicast_settings.setdefault("conn_id_start", conn_id_start_from_boot(int(time.time() * 1000)))
    membership = _choice(env, "SPLITLAB_MEMBERSHIP", "gms", layer_choices("membership"))
    multicast = _choice(env, "SPLITLAB_MULTICAST", "nakack4", layer_choices("multicast"))
    bcast_sync = _choice(env, "SPLITLAB_BCAST_SYNC", "tipc", SYNC_MODES)
    return NodeConfig(
        name=name, run_id=env["SPLITLAB_RUN"], members=members, token=env["SPLITLAB_TOKEN"],
        run_dir=env.get("SPLITLAB_RUN_DIR", "/splitlab/run"),
        data_port=_int(env, "SPLITLAB_DATA_PORT", DATA_PORT, 1, 65535),
        control_port=_int(env, "SPLITLAB_CONTROL_PORT", CONTROL_PORT, 1, 65535),
        data_host_template=env.get("SPLITLAB_DATA_HOST_TEMPLATE", "{name}-data"),
        control_host_template=env.get("SPLITLAB_CONTROL_HOST_TEMPLATE", "{name}-control"),
        addresses=addresses,
        control_bind=_hostport(control_bind, "SPLITLAB_CONTROL_BIND") if control_bind else None,
        heartbeat_ms=heartbeat_ms, silence_ms=silence_ms,
        bundle_max_bytes=_int(env, "SPLITLAB_BUNDLE_MAX_BYTES", 8192, 0, MAX_DATAGRAM_BYTES),
        recv_buffer_bytes=_int(env, "SPLITLAB_RECV_BUFFER_BYTES", 4 << 20, 4096, 1 << 30),
        flush_ms=_int(env, "SPLITLAB_FLUSH_MS", 500, 10, 60_000),
        unicast=unicast, unicast_config=UnicastConfig.from_mapping(unicast_settings),
        membership=membership, membership_config=MembershipConfig.from_mapping(_settings(env, "SPLITLAB_MEMBERSHIP_")),
        multicast=multicast, bcast_sync=bcast_sync,
        nakack4_config=Nakack4Config.from_mapping(_settings(env, "SPLITLAB_NAKACK4_")),
        auth_key=WireKey.from_hex(env[AUTH_KEY_ENV]) if env.get(AUTH_KEY_ENV) else None,
    )


def _settings(env: Mapping[str, str], prefix: str) -> dict[str, int]:
    """Integer settings from variables `<prefix><SETTING>` (e.g. SPLITLAB_NAKACK4_CAPACITY -> capacity)."""
    return {key[len(prefix):].lower(): _int(env, key, 0, 0, 2**32 - 1)
            for key in env if key.startswith(prefix) and len(key) > len(prefix)}


def _choice(env: Mapping[str, str], key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = env.get(key) or default
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not one of {', '.join(allowed)}")
    return value
