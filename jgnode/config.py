"""The JGroups node's configuration: the node contract's variables (read by `node.config`, the same as splitlab's
own node) and the JGroups stack's own settings.

| variable | meaning | default |
|---|---|---|
| SPLITLAB_JGROUPS_UNICAST | the unicast protocol of the stack: `UNICAST2` or `UNICAST` (both as in 2.12.2) | UNICAST2 |
| SPLITLAB_JGROUPS_PROPS | protocol properties over the defaults, `PROTO.property=value;...`, e.g. `FD_ALL.timeout=3000;UNICAST2.stable_interval=1000` (`jgnode.stack` lists the protocols and defaults) | empty |
| SPLITLAB_JGROUPS_HEAP_MB | the JVM's maximum heap | 128 |

Everything else (name, members, token, run directory, data and control addresses, the liveness heartbeat and
silence) comes from the contract's variables (`node.config.CONTRACT_VARIABLES`). The optional contract variable
of the authenticated wire (`SPLITLAB_AUTH_KEY`) is refused: JGroups' wire is not signed here, and a node given a
key must not run open without saying so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from jgnode import stack
from node.auth import AUTH_KEY_ENV
from node.config import CONTRACT_VARIABLES, NodeConfig, from_env as contract_from_env
from node.errors import ConfigError

UNICAST_PROTOCOLS = ("UNICAST2", "UNICAST")
_PROP = re.compile(r"^([A-Za-z][A-Za-z0-9_.]*)\.([a-z][a-z0-9_.]*)=([A-Za-z0-9_.,:\[\]-]*)$")


@dataclass(frozen=True)
class JgConfig:
    node: NodeConfig  # the contract's part
    unicast: str = "UNICAST2"
    props: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # protocol -> property -> value
    heap_mb: int = 128


def parse_props(text: str) -> dict[str, dict[str, str]]:
    """`PROTO.property=value;...` as {protocol: {property: value}}. Raises ConfigError naming the bad item."""
    out: dict[str, dict[str, str]] = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        match = _PROP.match(item)
        if match is None:
            raise ConfigError(f"SPLITLAB_JGROUPS_PROPS: {item!r} is not PROTOCOL.property=value",
                              hint="e.g. FD_ALL.timeout=3000 (values: letters, digits, _ . , : [ ] -)")
        proto, prop, value = match.groups()
        out.setdefault(proto, {})[prop] = value
    return out


def from_env(env: Mapping[str, str]) -> JgConfig:
    """The configuration from `env`. Raises ConfigError naming the bad variable."""
    if env.get(AUTH_KEY_ENV):
        raise ConfigError(f"{AUTH_KEY_ENV}: the JGroups node does not sign or check its wire",
                          hint="run it without --auth (the authenticated wire is the splitlab kind's)")
    node = contract_from_env({k: v for k, v in env.items() if k in CONTRACT_VARIABLES})
    unicast = env.get("SPLITLAB_JGROUPS_UNICAST") or "UNICAST2"
    if unicast not in UNICAST_PROTOCOLS:
        raise ConfigError(f"SPLITLAB_JGROUPS_UNICAST={unicast!r} is not one of {', '.join(UNICAST_PROTOCOLS)}")
    heap = env.get("SPLITLAB_JGROUPS_HEAP_MB") or "128"
    if not heap.isdigit() or not 32 <= int(heap) <= 4096:
        raise ConfigError(f"SPLITLAB_JGROUPS_HEAP_MB={heap!r} is not a whole number of MB from 32 to 4096")
    props = parse_props(env.get("SPLITLAB_JGROUPS_PROPS", ""))
    stack.check_props(props, unicast)
    return JgConfig(node, unicast, props, int(heap))
