"""What the generators of Wireshark Lua dissectors share: Lua literals and writing a plugin file.

Its one job: the pieces `chaos.wire.wireshark` (splitlab's own wire) and `chaos.wire.wireshark_jgroups` (the
real JGroups 2.12.2) both need: quoting a Python value as a Lua literal, and installing a generated dissector
where Wireshark and tshark load personal Lua plugins (`personal_plugin_dir`, `tshark -G folders`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from node.errors import EnvironmentProblem

DEFAULT_PLUGIN_DIR = Path.home() / ".local" / "lib" / "wireshark" / "plugins"


def lua_str(text: str) -> str:
    """A Lua string literal of `text`."""
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{out}"'


def lua_value(value: Any) -> str:
    """A Lua literal of None, a bool, an int, a str, a list/tuple (a sequence) or a dict (a table by key)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return lua_str(value)
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(lua_value(v) for v in value) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{lua_value(k)}] = {lua_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no Lua literal for {value!r}")


def install_plugin(plugin_dir: Path | None, file_name: str, source: str) -> Path:
    """Write `source` as `file_name` into `plugin_dir` (default: Wireshark's personal Lua plugin folder); returns
    its path. Raises `EnvironmentProblem` when it cannot be written."""
    folder = plugin_dir or DEFAULT_PLUGIN_DIR
    path = folder / file_name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    except OSError as exc:
        raise EnvironmentProblem(f"cannot write the dissector to {path}: {exc}",
                                 hint="choose another folder with --dir (`tshark -G folders` lists them)") from None
    return path
