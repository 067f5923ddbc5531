"""Registered faults (chaos.faults.registry): a fault in one file runs from a scenario step through the Net
interface, ends with `duration_s`, and bad names or arguments are clear scenario errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.faults.registry import faults, lookup
from chaos.harness import runner
from chaos.harness.errors import ScenarioError
from chaos.harness.load import load_text
from chaos.harness.progress import Progress
from node.errors import UsageError

QUIET = Progress(quiet=True)
SCENARIO = """cluster: {nodes: 3, defaults: {unicast: unicast3}}
steps:
  - at_s: 0.5
    fault: {name: isolate, args: {node: n3}}
    duration_s: 1
  - at_s: 2
    workload: {kind: unicast, from: n1, to: n2, count: 3}
"""


def controller_events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events" / "controller.jsonl").read_text().splitlines()]


def test_the_isolate_fault_cuts_one_node_both_ways_and_duration_s_ends_it(tmp_path: Path) -> None:
    result = runner.run(load_text(SCENARIO, "f.yaml"), backend="sim", seed=3, out=tmp_path, progress=QUIET,
                        analyze=False)
    events = controller_events(result.run_dir)
    started = [e for e in events if e["type"] == "fault_start" and e["kind"] == "partition"]
    assert len(started) == 1
    assert started[0]["detail"]["grudge"] == {"n1": ["n3"], "n2": ["n3"], "n3": ["n1", "n2"]}
    ended = [e for e in events if e["type"] == "fault_end" and e["fault_id"] == started[0]["fault_id"]]
    assert len(ended) == 1 and ended[0]["applied_ts"] - started[0]["applied_ts"] == pytest.approx(1.0, abs=0.01)
    assert result.schedule.steps[0].end_detail["ended"] == started[0]["fault_id"]


def test_a_new_fault_file_is_found_without_another_edit() -> None:
    assert "isolate" in faults()  # chaos/faults/isolate.py registers itself when the registry is first read


def test_an_unknown_fault_or_a_bad_argument_is_a_scenario_error_naming_what_is_registered() -> None:
    with pytest.raises(ScenarioError, match=r"unknown fault 'nosuch'; registered: .*isolate"):
        load_text(SCENARIO.replace("name: isolate", "name: nosuch"), "f.yaml")
    with pytest.raises(UsageError, match=r"fault isolate: node: Field required"):
        lookup("isolate", {})
