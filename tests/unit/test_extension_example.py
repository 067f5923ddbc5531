"""The README's extension walkthrough end to end in the simulator: scenarios/examples/noretx_loss.yaml (10 % loss
on n1->n2, every message must be delivered) holds under unicast3 and fails under the toy layer noretx
(node/unicast/noretx.py), which the scenario selects by its registered name alone."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline_fixtures import only_checks, spark  # noqa: F401  (shared fixture)

from chaos.harness import runner
from chaos.harness.load import load_scenario
from chaos.harness.progress import Progress

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "examples" / "noretx_loss.yaml"
SEED = 1


@pytest.mark.parametrize("variant, held", [("unicast3", True), ("noretx", False)])
def test_noretx_loss_holds_for_unicast3_and_fails_for_noretx(tmp_path: Path, spark, monkeypatch,  # noqa: F811
                                                              variant: str, held: bool) -> None:
    # the expectations name `delivery` (and the harness's `workloads`): run that check alone, to keep it light
    only_checks(monkeypatch, "delivery")
    result = runner.run(load_scenario(SCENARIO, variant=variant), backend="sim", seed=SEED, out=tmp_path,
                        spark=spark, progress=Progress(quiet=True), report=False, analyze=True)
    how = f"reproduce with: splitlab sim {SCENARIO} --seed {SEED} --variant {variant}"
    assert result.verdict.held is held, ([o for o in result.verdict.outcomes if not o.held], how)
    assert result.status("workloads") == "ok", how
    assert result.status("delivery") == ("ok" if held else "fail"), how
    history = (result.run_dir / "events" / "n1.jsonl").read_text().splitlines()
    protos = {e["proto"] for e in map(json.loads, history) if e["type"] == "data_tx"}
    assert protos == {variant}, how  # the node ran the layer the scenario named
