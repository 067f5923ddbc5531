"""What the dissector tests share: a message of every type with distinctive values, running tshark with the
generated dissector, and reading its PDML back as the codec's values would show."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from node import wire

TSHARK = shutil.which("tshark")


def sample(cls: type[wire.Message]) -> wire.Message:
    """One message of `cls` with distinctive values (every field non-zero where it can be)."""
    values: dict[str, Any] = {}
    for i, f in enumerate(dataclasses.fields(cls)):
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        if "bool" in kind:
            values[f.name] = True
        elif "bytes" in kind:
            values[f.name] = f"P|{cls.__name__}|{i}".encode()
        elif "tuple" in kind:
            values[f.name] = (3, 2**33 + i) if "int" in kind else ("n2", "n3")
        elif "str" in kind:
            values[f.name] = f"n{i + 1}"
        else:
            values[f.name] = 1000 * cls.TYPE + i + 1 if "B" not in cls.FORMAT else min(255, cls.TYPE + i)
    return cls(**values)


def run_tshark(lua: Path | list[Path], pcap: Path, *args: str) -> str:
    """tshark's output for `pcap` with the dissector `lua` (or several) and `args`; no Lua error may show."""
    if TSHARK is None:  # a failure, not a skip: `make test` installs it (images/host-deps.sh)
        pytest.fail("tshark is not installed: run 'make host-deps' (or apt-get install -y tshark)", pytrace=False)
    scripts = [arg for script in (lua if isinstance(lua, list) else [lua]) for arg in ("-X", f"lua_script:{script}")]
    done = subprocess.run([TSHARK, "-n", *scripts, "-r", str(pcap), *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Lua Error" not in done.stdout + done.stderr, done.stderr[-3000:]
    return done.stdout


def pdml_frames(text: str) -> list[ET.Element]:
    """The <packet> elements of tshark's PDML output."""
    return ET.fromstring(text).findall("packet")


def proto(frame: ET.Element) -> ET.Element | None:
    """The splitlab tree of a frame (None: the dissector did not take it)."""
    return frame.find("proto[@name='splitlab']")


def messages_of(frame: ET.Element) -> list[dict[str, Any]]:
    """Per message subtree: its type name and every field under splitlab.<type>.* as shown (repeated: a list)."""
    root = proto(frame)
    assert root is not None, ET.tostring(frame)[:500]
    out = []
    for sub in root.findall("proto"):
        kind = sub.get("showname", "").split(": ", 1)[-1]
        prefix = f"splitlab.{kind.lower()}."
        values: dict[str, Any] = {"type": kind}
        for f in sub.iter("field"):
            name = f.get("name", "")
            if not name.startswith(prefix):
                continue
            key, shown = name[len(prefix):], f.get("show")
            if key in values:
                values[key] = (values[key] if isinstance(values[key], list) else [values[key]]) + [shown]
            else:
                values[key] = shown
        out.append(values)
    return out


def expected(msg: wire.Message) -> dict[str, Any]:
    """What tshark shows for `msg`'s fields (numbers in decimal, payloads in hex, lists repeated)."""
    out: dict[str, Any] = {"type": msg.type_name}
    for kind, field in wire.body_layout(type(msg)):
        for name in field.split():
            value = getattr(msg, name)
            if kind == "payload":
                out[f"{name}_len"] = str(len(value))
                if value:
                    out[name] = ":".join(f"{b:02x}" for b in value)
            elif kind == "seqnos":
                out[f"{name}_count"] = str(len(value))
                if value:
                    out[name] = [str(v) for v in value] if len(value) != 1 else str(value[0])
            elif kind == "names":
                if value:
                    out[name] = list(value) if len(value) != 1 else value[0]
            elif kind == "bool":
                out[name] = "1" if value else "0"
            else:
                out[name] = str(value)
    return out
