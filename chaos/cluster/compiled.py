"""The node's compiled build: its hot modules compiled by mypyc, in a site of their own beside the pure sources.

`build()` copies the `node` package into `~/.cache/splitlab/compiled/<key>/site/node` (the user's cache,
`node.usercache`) and compiles `COMPILED` there with mypyc (from the same sources: mypyc needs no annotation
beyond what mypy checks, `tests/unit/test_types.py`), so the site holds a whole `node` package whose hot modules
are extension modules (which Python's import system prefers to the `.py` beside them) and mypyc's shared library
at the site's top. `<key>` is a digest of the sources, the Python ABI and mypy's version: a build is made once
per machine, in a directory it then renames into place, so a half-built site is never used and concurrent
builders agree. In the user's cache, not the checkout: a fresh clone of the same sources (CI's) finds the build
another clone made (CI's `test_compiled` built it: 370 s of a worker, against 150 s with the build there).

Who runs which build:
- the node image carries both, and its nodes run the compiled one (`images/node/Dockerfile`: the compiled site
  comes first on `PYTHONPATH`); `PURE_ENV` given to a node (`splitlab up --pure`, a bench's `node_env`)
  runs the pure sources, for py-spy's flame graphs (py-spy sees no frame inside a compiled function);
- on the host, the tests run the pure sources, and `COMPILED_TESTS` run again on the compiled site
  (`tests/unit/test_compiled.py`), which `SITE_ENV` names and `BUILD_ENV` asserts.

The extension modules are built with the controller's Python 3.11 for the image's (Debian's 3.11): the ABI of
one minor version is stable, as it is for every cp311 wheel the image installs.

Compiled: what every message passes through. Not compiled: `node/errors.py` (exceptions that the controller's
code subclasses, never on the hot path), the settings dataclasses (`node/unicast/config.py`,
`node/multicast/config.py`: frozen, on a plain Python mixin; read once at start), `node/unicast/noretx.py` (the
README's example of an extension layer, which stays the plain Python a user writes) and the rest of the node.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Callable

from chaos.host.proc import run
from node.errors import EnvironmentProblem
from node.usercache import user_cache

REPO = Path(__file__).resolve().parents[2]
COMPILED = ("node/core.py", "node/wire.py", "node/driver.py", "node/stack.py", "node/history.py",
            "node/incarnation.py", "node/unicast/__init__.py", "node/unicast/base.py", "node/unicast/connid.py",
            "node/unicast/entries.py", "node/unicast/unicast1.py", "node/unicast/unicast2.py",
            "node/unicast/unicast3.py", "node/unicast/window.py",
            "node/multicast/__init__.py", "node/multicast/nakack4.py", "node/multicast/ring.py",
            "node/multicast/receiver.py", "node/multicast/sender.py", "node/multicast/sync.py",
            "node/multicast/bounds.py", "node/workload.py")
# the unit tests that run again on the compiled build: every test of the compiled modules and of the stacks,
# simulations and properties built on them
COMPILED_TESTS = ("test_wire_unicast.py", "test_multicast_wire.py", "test_auth_wire.py", "test_driver.py",
                  "test_stack_send.py", "test_batch_receive.py", "test_history.py", "test_unicast_protocol.py",
                  "test_unicast_connections.py", "test_unicast_lifecycle.py", "test_unicast_lives.py",
                  "test_unicast_recovery.py", "test_unicast_jgrp1873.py", "test_unicast_property.py",
                  "test_property_hostile_stack.py", "test_property_hostile_unicast.py", "test_extension_layers.py",
                  "test_extension_example.py", "test_runtime_receive.py", "test_sim.py", "test_multicast_node.py",
                  "test_multicast_property.py", "test_nakack4_bounds.py", "test_nakack4_delivery.py",
                  "test_nakack4_forged_state.py", "test_nakack4_kept_window.py", "test_nakack4_protocol.py",
                  "test_nakack4_send_atomic.py", "test_nakack4_sync_acks.py", "test_nakack4_xmit_persistent.py",
                  "test_property_hostile_multicast.py", "test_tipc_bcast_sync.py", "test_payload_ids.py")
SITE_ENV = "SPLITLAB_COMPILED_SITE"  # set by the compiled test run: where the compiled site is
BUILD_ENV = "SPLITLAB_NODE_BUILD"  # `compiled` or `pure` (the default): which build a test process must import
IMAGE_SITE = "/opt/splitlab/site"  # the node image's pure site (images/node/Dockerfile)
PURE_ENV = {"PYTHONPATH": IMAGE_SITE}  # a node's environment that runs the pure sources in the node image
_BUILD_TIMEOUT_S = 900.0

Log = Callable[[str], None]


def extension_suffix() -> str:
    """The file name ending of this Python's extension modules (`.cpython-311-x86_64-linux-gnu.so`)."""
    return str(sysconfig.get_config_var("EXT_SUFFIX"))


def node_sources(repo: Path = REPO) -> list[Path]:
    """Every source file of the `node` package (what the node image and the compiled build are made of)."""
    return sorted(p for p in (repo / "node").rglob("*.py") if "__pycache__" not in p.parts)


def build_key(repo: Path = REPO) -> str:
    """The digest of what a build depends on: every node source, the compiled list, the ABI and mypy's version."""
    try:
        mypy_version = importlib.metadata.version("mypy")
    except importlib.metadata.PackageNotFoundError:
        raise EnvironmentProblem("mypy (which brings mypyc) is not installed: the node's compiled build needs it",
                                 hint="install the dev extra: make venv") from None
    digest = hashlib.sha256()
    for part in [extension_suffix(), mypy_version, *COMPILED]:
        digest.update(part.encode() + b"\0")
    for path in node_sources(repo):
        digest.update(str(path.relative_to(repo)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def site_dir(repo: Path = REPO) -> Path:
    """Where the compiled site for the current sources is (or will be)."""
    return user_cache("compiled") / build_key(repo) / "site"


def build(log: Log, repo: Path = REPO) -> Path:
    """The compiled site for the current sources, built unless it exists; returns its directory (on
    `PYTHONPATH`, it gives the compiled `node`). Raises `CommandFailed` when mypyc fails (its output says why),
    `EnvironmentProblem` when the user's cache cannot be written."""
    site = site_dir(repo)
    if site.is_dir():
        return site
    log(f"compiling the node's {len(COMPILED)} hot modules with mypyc ...")
    parent = site.parent.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="build-", dir=parent))
    except OSError as exc:
        raise EnvironmentProblem(f"cannot write the compiled node's cache {parent}: {exc.strerror or exc}",
                                 hint="point XDG_CACHE_HOME at a writable directory") from None
    try:
        shutil.copytree(repo / "node", work / "site" / "node", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        run([sys.executable, "-m", "mypyc", *COMPILED], cwd=work / "site", timeout_s=_BUILD_TIMEOUT_S,
            hint="mypyc needs a C compiler (gcc) and Python's headers")
        shutil.rmtree(work / "site" / "build")  # mypyc's C sources and objects
        try:
            work.rename(site.parent)
        except OSError:
            if not site.is_dir():  # not another builder's rename: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"compiled the node into {site}")
    return site


def compiled_modules(site: Path) -> list[Path]:
    """The extension modules a build holds for `COMPILED`, in that order (a missing one is left out)."""
    suffix = extension_suffix()
    found = [site / (name.removesuffix(".py") + suffix) for name in COMPILED]
    return [p for p in found if p.is_file()]


def expected_build() -> str:
    """The build a test process must have imported: `$SPLITLAB_NODE_BUILD`, `pure` by default."""
    return os.environ.get(BUILD_ENV, "pure")
