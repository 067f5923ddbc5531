"""The node's hot modules (pyproject's [tool.mypy] `files`: the codec, the driver, the stack, the history writer,
the unicast and multicast layers, the workloads) are clean under mypy, without an ignored error: what mypyc needs before it compiles them
(issue 34), and a type confusion in them (a send entry where a receive entry is meant) is caught here."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_hot_modules_are_clean_under_mypy_without_ignores():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    checked = [REPO / f for f in config["files"]]
    sources = [p for f in checked for p in ([f] if f.is_file() else sorted(f.rglob("*.py")))]
    assert len(sources) >= 14 and all(p.exists() for p in checked), checked
    ignores = [f"{p.relative_to(REPO)}:{n}" for p in sources
               for n, line in enumerate(p.read_text().splitlines(), 1) if "type: ignore" in line]
    assert ignores == [], f"ignored type errors: {ignores}"
    assert "ignore_errors" not in config and "disable_error_code" not in config
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml")],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"no issues found in {len(sources)} source files" in done.stdout, done.stdout
