"""Faults a user adds: one file in `chaos/faults/` with one `@register_fault` and a scenario step `fault: {name:
..., args: {...}}` runs it, on containers and in the simulator alike, because a registered fault acts only through
the `chaos.net.base.Net` verbs (partition, slow, msg_fault, ...).

    from pydantic import BaseModel
    from chaos.faults.registry import register_fault

    class IsolateArgs(BaseModel):
        node: str

    @register_fault("isolate", IsolateArgs)
    def isolate(net, args):                      # returns the fault id of what it started
        others = [n for n in net.nodes if n != args.node]
        return net.partition({args.node: others, **{o: [args.node] for o in others}})

A fault whose start returns a fault id can be ended by `end: <step id>` or `duration_s` (`end=` receives the
Net, the fault id and the arguments; the default ends a partition with `heal`, link faults with `fast`).
Modules of this package are imported when the registry is first read, so a new file needs no other edit.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from node.errors import UsageError

Apply = Callable[[Any, Any], "str | None"]
End = Callable[[Any, str, Any], None]


@dataclass(frozen=True)
class FaultDef:
    """A registered fault: its arguments' model, how it starts and how it ends."""

    name: str
    args_model: type[BaseModel]
    apply: Apply
    end: End | None


_FAULTS: dict[str, FaultDef] = {}
_discovered = False


def register_fault(name: str, args_model: type[BaseModel], end: End | None = None) -> Callable[[Apply], Apply]:
    """Register `apply(net, args) -> fault id | None` as the fault `name` with arguments `args_model`."""
    def wrap(apply: Apply) -> Apply:
        if name in _FAULTS and _FAULTS[name].apply is not apply:
            raise ValueError(f"fault {name!r} is registered twice")
        _FAULTS[name] = FaultDef(name, args_model, apply, end)
        return apply
    return wrap


def faults() -> dict[str, FaultDef]:
    """Every registered fault, after importing the modules of this package (a user's new file included)."""
    global _discovered
    if not _discovered:
        _discovered = True
        from chaos import faults as package

        for info in pkgutil.iter_modules(package.__path__):
            if info.name != "registry":
                importlib.import_module(f"{package.__name__}.{info.name}")
    return dict(_FAULTS)


def lookup(name: str, args: dict[str, Any]) -> tuple[FaultDef, BaseModel]:
    """The fault `name` and its validated arguments. Raises `UsageError` naming the registered faults or the bad
    argument."""
    known = faults()
    if name not in known:
        raise UsageError(f"unknown fault {name!r}; registered: {', '.join(sorted(known)) or 'none'}",
                         hint="a fault is one file in chaos/faults/ with @register_fault")
    defn = known[name]
    try:
        return defn, defn.args_model.model_validate(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "args"
        raise UsageError(f"fault {name}: {where}: {first['msg']}") from None


__all__ = ["FaultDef", "faults", "lookup", "register_fault"]
