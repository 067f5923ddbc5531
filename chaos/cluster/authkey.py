"""A run's key of the authenticated wire (`splitlab up --auth`, a scenario's `cluster.auth`): made once by `up`,
kept beside the control token in the run directory (`auth.key`, hex, readable by its owner only), given to every
node as `node.auth.AUTH_KEY_ENV`, and read back from the run directory by what signs for the run: `splitlab chaos
inject --sign`, `replay --sign`, `fuzz --sign`, and the shaper, which signs again the datagrams its message rules
rewrite. A run without the file runs the open wire.
"""
from __future__ import annotations

from pathlib import Path

from node.auth import AUTH_KEY_ENV, WireKey
from node.errors import ConfigError, EnvironmentProblem, UsageError

KEY_FILE = "auth.key"


def create(run_dir: Path) -> WireKey:
    """A fresh key, written to `run_dir/auth.key` (mode 0600, made so before the key is in it)."""
    key = WireKey.new()
    path = Path(run_dir) / KEY_FILE
    path.touch(mode=0o600, exist_ok=False)
    path.write_text(key.hex())
    return key


def read(run_dir: Path) -> WireKey | None:
    """The run's key, None for a run of the open wire. Raises `EnvironmentProblem` when the file is there but
    cannot be read or is no key."""
    path = Path(run_dir) / KEY_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot read the run's key {path}: {exc}", hint="run as its owner (root)") from None
    try:
        return WireKey.from_hex(text, str(path))
    except ConfigError as exc:
        raise EnvironmentProblem(exc.message) from None


def required(run_dir: Path, run_id: str, flag: str = "--sign") -> WireKey:
    """The run's key for `flag`. Raises `UsageError` when the run runs the open wire."""
    key = read(run_dir)
    if key is None:
        raise UsageError(f"{flag}: run {run_id} has no key to sign with: it runs the open wire",
                         hint="start a run with 'splitlab up --auth' (a scenario: cluster: {auth: true}), or drop "
                              f"{flag}")
    return key


def with_key(node_env: dict[str, dict[str, str]] | None, nodes: list[str], key: WireKey) -> dict[str, dict[str, str]]:
    """Every node's environment with the run's key added."""
    node_env = node_env or {}
    return {n: {**node_env.get(n, {}), AUTH_KEY_ENV: key.hex()} for n in nodes}
