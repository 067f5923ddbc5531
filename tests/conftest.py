"""The suite's fixtures come from splitlab's own pytest plugin (chaos/harness/pytest_plugin.py, registered as the
`pytest11` entry point `splitlab`): this file only refuses to start without it, so that an environment installed
before the entry point existed fails with its fix instead of with "fixture 'splitlab_up' not found"."""
from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("splitlab"):
        raise pytest.UsageError("splitlab's pytest plugin is not registered in this environment: run "
                                "'.venv/bin/pip install -e .' (or 'make venv') so its pytest11 entry point exists")
