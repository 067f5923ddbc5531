"""What every layer's settings dataclass shares: built from a mapping (parsed environment or YAML) with unknown
keys refused, and shown as a JSON-able dict (for `node_start` events and the control API)."""
from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar, Mapping, TypeVar

from node.errors import ConfigError

T = TypeVar("T", bound="Settings")


class Settings:
    """Mixin for frozen settings dataclasses; `LABEL` names the layer in error messages."""

    LABEL: ClassVar[str] = "settings"

    @classmethod
    def from_mapping(cls: type[T], values: Mapping[str, Any]) -> T:
        """Build the settings from `values`. Raises ConfigError for unknown keys (and, from the dataclass's own
        validation, for bad values)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{cls.LABEL} config: unknown setting(s) {', '.join(unknown)}",
                              hint=f"known settings: {', '.join(sorted(known))}")
        return cls(**cls.coerce(dict(values)))

    @classmethod
    def coerce(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Adjust parsed values before validation (e.g. 0/1 to a bool); the default keeps them."""
        return values

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
