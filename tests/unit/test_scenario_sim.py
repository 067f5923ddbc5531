"""`splitlab sim`: the scenario files run in the seeded simulator with the nodes' real stacks, write a history
the pipeline reads, reproduce JGRP-1873 under unicast2 and not under unicast3, are deterministic per seed, and
refuse steps without a simulator equivalent."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.harness import runner
from chaos.harness.errors import ScenarioError
from chaos.harness.load import load_scenario, load_text
from chaos.harness.progress import Progress
from pipeline_fixtures import spark  # noqa: F401  (shared fixture)

REPO = Path(__file__).resolve().parents[2]
QUIET = Progress(quiet=True)


def events(run_dir: Path, node: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events" / f"{node}.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("seed", [3])
def test_jgrp1873_in_the_simulator_unicast2_endless_unicast3_clean(tmp_path: Path, seed: int,
                                                                   spark) -> None:  # noqa: F811
    # the shared local[2] session: a session this test started on the default master (local[*]) would refuse the
    # pipeline tests that run after it in the same process
    path = REPO / "scenarios" / "jgrp1873.yaml"
    legacy = runner.run(load_scenario(path, variant="legacy"), backend="sim", seed=seed, out=tmp_path, progress=QUIET,
                        report=False, spark=spark)
    fixed = runner.run(load_scenario(path, variant="fixed"), backend="sim", seed=seed, out=tmp_path, progress=QUIET,
                       report=False, spark=spark)
    how = f"reproduce with: splitlab sim {path} --seed {seed} --variant all"
    assert legacy.verdict.held, ([o for o in legacy.verdict.outcomes if not o.held], how)
    assert fixed.verdict.held, ([o for o in fixed.verdict.outcomes if not o.held], how)
    assert legacy.status("endless_retransmission") == "fail" and fixed.status("endless_retransmission") == "ok"
    assert legacy.schedule.backend == "sim" and (legacy.run_dir / "schedule.json").exists()
    # the analysis judged each run against its variant's expectations: the summary carries the same verdict
    for result in (legacy, fixed):
        verdict = json.loads(result.summary_json.read_text())["verdict"]
        assert (verdict["variant"], verdict["held"]) == (result.variant, True)
        assert {o["check"]: o["actual"] for o in verdict["outcomes"]} == {
            o.check: o.actual for o in result.verdict.outcomes}


def test_same_seed_same_history(tmp_path: Path) -> None:
    loaded = load_scenario(REPO / "scenarios" / "unicast2_s6.yaml", variant="legacy")
    runs = [runner.run(loaded, backend="sim", seed=6, out=tmp_path / str(i), progress=QUIET, analyze=False) for i in range(2)]
    strip = [[{k: v for k, v in e.items() if k not in ("ts", "run", "boot")} for e in events(r.run_dir, "n2")]
             for r in runs]
    assert strip[0] == strip[1]
    assert len(strip[0]) > 50


def test_steps_without_a_simulator_equivalent_are_refused_with_their_line() -> None:
    text = ("cluster: {nodes: 3}\nsteps:\n  - at_s: 0\n    kill: n3\n"
            "  - at_s: 1\n    msg-fault: {type: UnicastAck, from: n1, to: n2, action: duplicate}\n")
    with pytest.raises(ScenarioError) as info:
        runner.check_backend(load_text(text, "s.yaml"), "sim")
    lines = [str(p) for p in info.value.problems]
    assert lines[0].startswith("s.yaml:3: steps[0].kill: kill has no simulator equivalent")
    assert lines[1] == "s.yaml:5: steps[1].msg-fault: the duplicate message fault has no simulator equivalent"
    assert info.value.exit_code == 2


def test_splitlab_sim_prints_the_verdict_before_the_report_is_drawn(tmp_path: Path, capsys, monkeypatch) -> None:
    """The harness judges the analysis's early summary: the verdict table is printed while report.html is not yet
    there, the paths after it."""
    from chaos.cli import scenarios
    from chaos.cli.main import main as splitlab

    drawn_at_verdict: list[bool] = []
    tell = scenarios._VerdictPrinter.__call__

    def watch(self, verdict):
        drawn_at_verdict.append(any(tmp_path.glob("*/report/report.html")))
        tell(self, verdict)

    monkeypatch.setattr(scenarios._VerdictPrinter, "__call__", watch)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()  # this process's session when one runs, else the one the others share
    monkeypatch.setenv("SPLITLAB_SPARK_MASTER", active.sparkContext.master if active is not None else "local[2]")
    path = REPO / "scenarios" / "jgrp1873.yaml"
    assert splitlab(["sim", str(path), "--seed", "3", "--variant", "fixed", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert drawn_at_verdict == [False], "the verdict should come before the report"
    assert out.index("endless_retransmission") < out.index("report:") and list(tmp_path.glob("*/report/report.html"))
