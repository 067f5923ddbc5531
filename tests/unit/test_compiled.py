"""The node's compiled build (chaos.cluster.compiled): the node's tests pass on it as on the pure sources, and each
test process runs the build it was asked for (a compiled run that silently imported the pure sources would prove
nothing)."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from chaos.cluster import compiled

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BUILD_CHECK = "tests/unit/test_compiled.py::test_this_process_runs_the_build_it_was_asked_for"


def _module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def test_this_process_runs_the_build_it_was_asked_for():
    want = compiled.expected_build()
    assert want in ("pure", "compiled"), want
    suffix = compiled.extension_suffix() if want == "compiled" else ".py"
    files = {name: importlib.import_module(_module_name(name)).__file__ or "" for name in compiled.COMPILED}
    wrong = {name: f for name, f in files.items() if not f.endswith(suffix)}
    assert wrong == {}, f"{want} build asked for, but these modules are not {suffix}: {wrong}"
    if want == "compiled":  # the site the run was given, not another build lying around
        site = os.environ[compiled.SITE_ENV]
        assert all(f.startswith(site) for f in files.values()), files


def test_every_compiled_module_is_checked_by_mypy():
    """mypyc compiles a function mypy cannot check into one that raises at run time: no module is compiled that
    `tests/unit/test_types.py` does not hold clean."""
    checked = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    unchecked = [m for m in compiled.COMPILED if not any(m == c or m.startswith(c.rstrip("/") + "/") for c in checked)]
    assert unchecked == []
    assert all((HERE / name).is_file() for name in compiled.COMPILED_TESTS)


@pytest.mark.slow
def test_the_node_tests_pass_on_the_compiled_build():
    """The node's own unit tests (`COMPILED_TESTS`) again, in a process whose `node` is the compiled site, with the
    build check that proves it."""
    if compiled.expected_build() == "compiled":
        pytest.fail("this test starts the compiled run: it must not run inside one (run only the files it names)")
    site = compiled.build(lambda line: None)
    assert len(compiled.compiled_modules(site)) == len(compiled.COMPILED)
    # the site before the repository (whose `node` is the pure one) on pytest's path and on the interpreter's (-P:
    # not the working directory first), and on PYTHONPATH for the processes the tests start
    env = {**os.environ, "PYTHONPATH": str(site), compiled.BUILD_ENV: "compiled", compiled.SITE_ENV: str(site)}
    argv = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not long",
            "-o", f"pythonpath={site} .", BUILD_CHECK, *(f"tests/unit/{name}" for name in compiled.COMPILED_TESTS)]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, f"the node's tests on the compiled build failed:\n{tail}"
    assert " passed" in tail and " failed" not in tail and " skipped" not in tail, tail
