"""From a scenario's cluster settings and a variant to each node's environment (the SPLITLAB_* variables of
`node/config.py`, and of `jgnode/config.py` for a run of the real JGroups) and the run's node kind.

Layers, later wins: `cluster.defaults` < `cluster.overrides[node]` < the variant's own fields <
the variant's `overrides[node]` (JGroups properties are merged property by property). `check_node_env` builds
each node's configuration from that environment with its kind's own reader, so a value the node would refuse is
refused when the scenario is loaded.
"""
from __future__ import annotations

from typing import Any

from chaos.harness.schema import TIMEOUT_ENV, NodeSettings, Scenario
from jgnode.config import from_env as jgroups_from_env
from node.config import from_env
from node.errors import ConfigError

JGROUPS_PROPS = "SPLITLAB_JGROUPS_PROPS"

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
    if settings.jgroups is not None:
        if settings.jgroups.unicast is not None:
            env["SPLITLAB_JGROUPS_UNICAST"] = settings.jgroups.unicast
        if settings.jgroups.heap_mb is not None:
            env["SPLITLAB_JGROUPS_HEAP_MB"] = str(settings.jgroups.heap_mb)
    env.update(settings.env)
    return env


def _props(layers: list[NodeSettings]) -> str:
    """The JGroups properties of `layers`, later wins per property, as `SPLITLAB_JGROUPS_PROPS` says them."""
    merged: dict[str, str] = {}
    for layer in layers:
        if layer.jgroups is not None:
            merged.update({key: _text(value).lower() if isinstance(value, bool) else _text(value)
                           for key, value in layer.jgroups.props.items()})
    return ";".join(f"{key}={value}" for key, value in merged.items())


def run_kind(scenario: Scenario, variant: str | None) -> str:
    """The node kind of a run of `variant` (chaos.cluster.kinds): the variant's own, else the cluster's."""
    chosen = scenario.variants[variant] if variant is not None else None
    return (chosen.kind if chosen is not None else None) or scenario.cluster.kind


def run_auth(scenario: Scenario, variant: str | None) -> bool:
    """Whether a run of `variant` has the authenticated wire (a key of its own, made by `up`): the variant's own
    `auth`, else the cluster's."""
    chosen = scenario.variants[variant] if variant is not None else None
    own = chosen.auth if chosen is not None else None
    return scenario.cluster.auth if own is None else own


def node_env(scenario: Scenario, variant: str | None) -> dict[str, dict[str, str]]:
    """Every node's environment for `variant` (None: no variant). Raises KeyError for an unknown variant
    (the loader checks variant names first)."""
    chosen = scenario.variants[variant] if variant is not None else None
    out: dict[str, dict[str, str]] = {}
    for node in scenario.node_names:
        layers = [scenario.cluster.defaults]
        if node in scenario.cluster.overrides:
            layers.append(scenario.cluster.overrides[node])
        if chosen is not None:
            layers.append(chosen)
            if node in chosen.overrides:
                layers.append(chosen.overrides[node])
        env: dict[str, str] = {}
        for layer in layers:
            env.update(settings_env(layer))
        if props := _props(layers):
            env[JGROUPS_PROPS] = props
        out[node] = env
    return out


def check_node_env(nodes: list[str], env: dict[str, str], node: str, kind: str = "splitlab") -> str | None:
    """The node's own verdict on its environment (read as a node of `kind` reads it): None when it would start,
    else the error text."""
    full = {"SPLITLAB_NODE": node, "SPLITLAB_RUN": "check", "SPLITLAB_MEMBERS": ",".join(nodes),
            "SPLITLAB_TOKEN": "check", **env}
    try:
        (jgroups_from_env if kind == "jgroups" else from_env)(full)
    except ConfigError as exc:
        return str(exc)
    return None
