"""From a scenario's cluster settings and a variant to each node's environment (the SPLITLAB_* variables of
`node/config.py`).

Layers, later wins: `cluster.defaults` < `cluster.overrides[node]` < the variant's own fields <
the variant's `overrides[node]`. `check_node_env` builds each node's `NodeConfig` from that environment, so a
value the node would refuse is refused when the scenario is loaded.
"""
from __future__ import annotations

from typing import Any

from chaos.harness.schema import TIMEOUT_ENV, NodeSettings, Scenario
from node.config import from_env
from node.errors import ConfigError

_CHOICES = {"unicast": "SPLITLAB_UNICAST", "multicast": "SPLITLAB_MULTICAST", "membership": "SPLITLAB_MEMBERSHIP",
            "bcast_sync": "SPLITLAB_BCAST_SYNC", "bundle_max_bytes": "SPLITLAB_BUNDLE_MAX_BYTES"}
_SETTINGS = {"unicast_settings": "SPLITLAB_UNICAST_", "nakack4_settings": "SPLITLAB_NAKACK4_",
             "membership_settings": "SPLITLAB_MEMBERSHIP_"}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def settings_env(settings: NodeSettings) -> dict[str, str]:
    """The variables one NodeSettings layer sets (unset fields set nothing)."""
    env: dict[str, str] = {}
    for name, var in _CHOICES.items():
        value = getattr(settings, name)
        if value is not None:
            env[var] = _text(value)
    if settings.timeouts is not None:
        for name, value in settings.timeouts.model_dump(exclude_none=True).items():
            env[TIMEOUT_ENV[name]] = _text(value)
    for name, prefix in _SETTINGS.items():
        block = getattr(settings, name)
        if block is not None:
            for key, value in block.model_dump(exclude_none=True).items():
                env[prefix + key.upper()] = _text(value)
    env.update(settings.env)
    return env


def node_env(scenario: Scenario, variant: str | None) -> dict[str, dict[str, str]]:
    """Every node's environment for `variant` (None: no variant). Raises KeyError for an unknown variant
    (the loader checks variant names first)."""
    chosen = scenario.variants[variant] if variant is not None else None
    out: dict[str, dict[str, str]] = {}
    for node in scenario.node_names:
        env = settings_env(scenario.cluster.defaults)
        if node in scenario.cluster.overrides:
            env.update(settings_env(scenario.cluster.overrides[node]))
        if chosen is not None:
            env.update(settings_env(chosen))
            if node in chosen.overrides:
                env.update(settings_env(chosen.overrides[node]))
        out[node] = env
    return out


def check_node_env(nodes: list[str], env: dict[str, str], node: str) -> str | None:
    """The node's own verdict on its environment: None when it would start, else the error text."""
    full = {"SPLITLAB_NODE": node, "SPLITLAB_RUN": "check", "SPLITLAB_MEMBERS": ",".join(nodes),
            "SPLITLAB_TOKEN": "check", **env}
    try:
        from_env(full)
    except ConfigError as exc:
        return str(exc)
    return None
