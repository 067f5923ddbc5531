"""Extension point: an analysis check is one file in pipeline/checks/ plus one `register_check` line.

The toy check is the README's own code block ("Extending splitlab"), loaded as a module the way a new file in
pipeline/checks/ would be: it joins every analysis (its result in the summary, its parameters resolved), the
scenario loader accepts its name and parameters in `expect` and refuses them once it is gone, and the shipped
checks keep their report order with new ones after them."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

import pipeline_fixtures as pf
from pipeline_fixtures import spark  # noqa: F401  (shared fixture)

from chaos.harness.errors import ScenarioError
from chaos.harness.expect import check_params
from chaos.harness.load import load_text
from node.errors import ConfigError
from pipeline import api
from pipeline.checks import CHECKS, Check, register_check, unregister_check
from pipeline.checks.registry import REPORT_ORDER
from pipeline.params import resolve

REPO = Path(__file__).resolve().parents[2]
TOY = "resend_budget"
SCENARIO = """cluster: {nodes: 2}
expect:
  default:
    resend_budget: {status: ok, max_resend_pct: 25}
"""


def readme_check_source() -> str:
    """The README's toy check: the python block of "Extending splitlab" that opens with its docstring."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    (source,) = [b for b in blocks if b.startswith(f'"""Check `{TOY}`')]
    return source


@pytest.fixture
def toy_check(tmp_path: Path) -> Iterator[ModuleType]:
    """The README's check file, imported as a module (which registers it); unregistered afterwards."""
    path = tmp_path / f"{TOY}.py"
    path.write_text(readme_check_source())
    spec = importlib.util.spec_from_file_location(f"readme_{TOY}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        unregister_check(TOY)
        del sys.modules[spec.name]


def test_the_shipped_checks_keep_the_report_order() -> None:
    assert tuple(c.name for c in CHECKS) == REPORT_ORDER


def test_a_registered_check_comes_after_the_shipped_ones_and_goes_when_unregistered(toy_check: ModuleType) -> None:
    assert [c.name for c in CHECKS] == [*REPORT_ORDER, TOY] and CHECKS[-1] is toy_check.CHECK
    unregister_check(TOY)
    assert TOY not in [c.name for c in CHECKS]


def test_a_second_check_under_a_taken_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="registered twice"):
        register_check(Check(name="delivery", summary="impostor", defaults={}, func=lambda ctx, params: None))
    assert next(c for c in CHECKS if c.name == "delivery").summary != "impostor"


def test_the_toy_check_runs_in_the_analysis_and_its_result_is_in_the_summary(tmp_path: Path, spark,  # noqa: F811
                                                                            toy_check: ModuleType) -> None:
    """The clean fixture resends 2 of its 16 messages: 12.5 % is over the default 10 % and within 25 %."""
    run_dir = pf.clean_scenario().write(tmp_path / "r1")
    summary = api.analyze(run_dir, spark=spark, report=False)
    result = summary.checks[TOY]
    assert (result.status, result.reason) == ("fail", "2 resends for 16 messages (12.5 %)")
    assert result.params == {"max_resend_pct": 10.0} and result.details["resent"] == 2
    assert summary.status == "fail" and pf.not_ok(summary) == {TOY}
    written = (Path(summary.run_dir) / "report" / "summary.json").read_text()
    assert f'"{TOY}"' in written


def test_the_scenario_loader_accepts_the_check_while_it_is_registered(toy_check: ModuleType) -> None:
    loaded = load_text(SCENARIO, "s.yaml")
    assert resolve(CHECKS, check_params(loaded.expectations()))[TOY] == {"max_resend_pct": 25.0}
    with pytest.raises(ScenarioError) as info:
        load_text(SCENARIO.replace("max_resend_pct", "max_pct"), "s.yaml")
    assert "s.yaml:4: expect.default.resend_budget: check resend_budget has no parameter 'max_pct'" in \
        str(info.value.problems[0])
    unregister_check(TOY)
    with pytest.raises(ScenarioError) as info:
        load_text(SCENARIO, "s.yaml")
    assert str(info.value.problems[0]).startswith(
        "s.yaml:4: expect.default.resend_budget: unknown check 'resend_budget'; expected one of history, delivery,")
