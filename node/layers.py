"""The protocol layers a node can run, by slot and name, and the stack a node configuration asks for.

A node's stack is liveness and ping (always), then one layer per slot, chosen by name (`SPLITLAB_UNICAST`,
`SPLITLAB_MEMBERSHIP`, `SPLITLAB_MULTICAST`; in a scenario file `unicast:`, `membership:`, `multicast:`):

| slot | package | registered there | a layer class is built as | `none` |
|---|---|---|---|---|
| unicast | node.unicast | unicast3, unicast2, unicast1, noretx (toy) | cls(name, unicast_config, members) | no |
| membership | node.membership | gms | cls(name, members, membership_config, liveness) | yes |
| multicast | node.multicast | nakack4 | cls(name, nakack4_config, members, bcast_sync) | yes |

A new layer is one file in the slot's package with one registration line (built-ins register the same way, in
their package's `__init__`):

    @register_layer("unicast", "noretx")
    class NoRetx(Unicast3): ...

On the first lookup every module of the slot's package is imported (`node.registry`), so the node's
configuration (`node.config`), the scenario loader (`chaos.harness.schema`) and `build_stack` know the new name
and no other file names it. Containers get it too: the node image copies node/ and its tag hashes every
node/*.py (`chaos.cluster.images`). The registered name becomes the class's `NAME`, the `proto` of its events.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping, TypeVar

from node.core import Protocol
from node.errors import ConfigError
from node.liveness import Liveness
from node.ping import PingWorkload
from node.registry import Registry
from node.stack import Stack

if TYPE_CHECKING:
    from node.config import NodeConfig

NONE = "none"  # a slot's choice "no layer" (optional slots only)
L = TypeVar("L", bound=type)
Builder = Callable[[type, "NodeConfig", Mapping[str, Protocol]], Protocol]


@dataclass(frozen=True)
class Slot:
    """A place in the stack: its layers live in `package`, `build` makes one from its class, the node's config
    and the layers below it; `optional` slots also accept `none`."""

    name: str
    package: str
    optional: bool
    build: Builder
    registry: Registry[type]


def _slot(name: str, package: str, optional: bool, build: Builder) -> Slot:
    return Slot(name, package, optional, build, Registry(f"{name} layer", (package,)))


# in stack order (membership installs the views the multicast layer follows)
SLOTS: dict[str, Slot] = {s.name: s for s in (
    _slot("unicast", "node.unicast", False,
          lambda cls, c, below: cls(c.name, c.unicast_config, list(c.members))),
    _slot("membership", "node.membership", True,
          lambda cls, c, below: cls(c.name, list(c.members), c.membership_config, below["liveness"])),
    _slot("multicast", "node.multicast", True,
          lambda cls, c, below: cls(c.name, c.nakack4_config, list(c.members), c.bcast_sync)),
)}


def _slot_named(slot: str) -> Slot:
    found = SLOTS.get(slot)
    if found is None:
        raise ConfigError(f"unknown stack slot {slot!r}", hint=f"slots: {', '.join(SLOTS)}")
    return found


def register_layer(slot: str, name: str) -> Callable[[L], L]:
    """Class decorator: register the layer class as `name` in `slot` and make `name` its `NAME`. Raises
    ConfigError for an unknown slot, the reserved name `none`, a name taken by another class, or a class whose
    own `NAME` says otherwise."""
    target = _slot_named(slot)
    if name == NONE:
        raise ConfigError(f"{NONE!r} is reserved: it means no {slot} layer")

    def decorate(cls: L) -> L:
        own = cls.__dict__.get("NAME")
        if own is not None and own != name:
            raise ConfigError(f"{cls.__qualname__} registers as {slot} layer {name!r} but its NAME is {own!r}",
                              hint="drop NAME (the registered name becomes it) or register under the same name")
        target.registry.register(name, cls)
        cls.NAME = name
        return cls

    return decorate


def layer_names(slot: str) -> tuple[str, ...]:
    """The layers registered in `slot`, in registration order (built-ins first)."""
    return _slot_named(slot).registry.names()


def layer_choices(slot: str) -> tuple[str, ...]:
    """What a configuration may name for `slot`: its registered layers, and `none` where the slot is optional."""
    return layer_names(slot) + ((NONE,) if _slot_named(slot).optional else ())


def layer_class(slot: str, name: str) -> type:
    """The class registered as `name` in `slot`. Raises ConfigError naming the registered layers."""
    target = _slot_named(slot)
    cls = target.registry.get(name)
    if cls is None:
        none = f" (or {NONE}: no layer)" if target.optional else ""
        raise ConfigError(f"unknown {slot} layer {name!r}",
                          hint=f"registered: {', '.join(target.registry.names())}{none}; a new one is a file in "
                               f"{target.package.replace('.', '/')}/ with @register_layer({slot!r}, NAME)")
    return cls


def build_stack(config: NodeConfig) -> Stack:
    """The node's protocol layers for `config`: liveness and ping, then each slot's chosen layer (none: left
    out); the membership layer installs views on top of the liveness record."""
    members = list(config.members)
    layers: dict[str, Protocol] = {
        "liveness": Liveness(config.name, members, config.heartbeat_ms, config.silence_ms,
                             quiet_ms=min(config.silence_ms, config.membership_config.suspect_timeout_ms)),
        "ping": PingWorkload(config.name, members),
    }
    for slot in SLOTS.values():
        chosen = getattr(config, slot.name)
        if chosen == NONE and slot.optional:
            continue
        layers[slot.name] = slot.build(layer_class(slot.name, chosen), config, layers)
    return Stack(layers)
