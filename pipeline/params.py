"""Check parameters: parse `name.key=value` assignments and merge them over each check's defaults.

Values are read as JSON when they parse (`20`, `1.5`, `true`, `null`, `["n3"]`), else as plain text; a list
parameter also takes comma-separated text (`delivery.ignore_receivers=n3,n4`). Unknown checks or keys and
values of the wrong type raise `UsageError`.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Protocol

from node.errors import UsageError

Params = dict[str, dict[str, Any]]


class Parameterised(Protocol):
    """What `resolve` reads of a check (pipeline.checks.base.Check): its name and its parameters' defaults.
    (Not the class itself: a client parses parameters without loading Spark, which the checks need.)"""

    @property
    def name(self) -> str: ...

    @property
    def defaults(self) -> Mapping[str, Any]: ...


def parse_assignments(items: Iterable[str]) -> Params:
    """Parse `name.key=value` strings into `{name: {key: value}}`. Raises `UsageError` on a malformed item."""
    out: Params = {}
    for item in items:
        target, sep, text = item.partition("=")
        name, dot, key = target.strip().partition(".")
        if not sep or not dot or not name or not key:
            raise UsageError(f"bad check parameter {item!r}: expected name.key=value",
                             hint="for example --check-param endless_retransmission.min_requests=10")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        out.setdefault(name, {})[key] = value
    return out


def _coerce(check: str, key: str, default: Any, value: Any) -> Any:
    where = f"check parameter {check}.{key}"
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise UsageError(f"{where} must be true or false, not {value!r}")
    if isinstance(default, list):
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            return value
        raise UsageError(f"{where} must be a list (JSON or comma-separated), not {value!r}")
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise UsageError(f"{where} must be an integer, not {value!r}")
    if isinstance(default, float) or default is None:
        if value is None and default is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise UsageError(f"{where} must be a number{' or null' if default is None else ''}, not {value!r}")
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        raise UsageError(f"{where} must be text, not {value!r}")
    raise UsageError(f"{where} has a default of unsupported type {type(default).__name__}")


def resolve(checks: Iterable[Parameterised], given: Mapping[str, Mapping[str, Any]] | None) -> Params:
    """Every check's parameters: its defaults overridden by `given`. Raises `UsageError` for unknown names."""
    by_name = {c.name: c for c in checks}
    given = given or {}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        raise UsageError(f"unknown check(s) {', '.join(unknown)} in check parameters",
                         hint=f"checks are: {', '.join(by_name)}")
    resolved: Params = {}
    for name, check in by_name.items():
        values = dict(check.defaults)
        for key, value in (given.get(name) or {}).items():
            if key not in check.defaults:
                raise UsageError(f"check {name} has no parameter {key!r}",
                                 hint=f"its parameters are: {', '.join(check.defaults) or '(none)'}")
            values[key] = _coerce(name, key, check.defaults[key], value)
        resolved[name] = values
    return resolved
