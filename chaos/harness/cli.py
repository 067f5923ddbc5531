"""`splitlab run`, `splitlab replay` and `splitlab sim`: scenarios on real containers, again from a realised
schedule, or in the seeded simulator.

Exit codes: 0 the expectations hold, 1 they do not (or the machine could not run it), 2 bad input (the
scenario's errors are printed as `file:line: field: what was expected`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console
from rich.markup import escape

from chaos.harness.progress import Progress
from node.errors import SplitlabError, report_error

RUN_EXAMPLES = """examples:
  splitlab run scenarios/jgrp1873.yaml --variant legacy        # reproduce JGRP-1873 under unicast2
  splitlab run scenarios/jgrp1873.yaml --variant all           # every variant, one after the other
  splitlab run scenarios/unicast2_s6.yaml --seed 7 --set settle_s=8 --set cluster.defaults.timeouts.conn_close_timeout_ms=500
"""
REPLAY_EXAMPLES = """examples:
  splitlab replay runs/261121-231947-589f                      # the same steps at their realised times
"""
SIM_EXAMPLES = """examples:
  splitlab sim scenarios/jgrp1873.yaml --seed 3 --variant all   # no Docker: the seeded simulator
"""


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file (see scenarios/README.md)")
    p.add_argument("--variant", help="variant to run (default: the first the scenario defines); 'all' runs each")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario field by its path, e.g. settle_s=8 or steps.2.at_s=3 (repeatable)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", help="put the run directory under DIR (default: $SPLITLAB_RUNS_DIR or "
                                                "./runs)")
    p.add_argument("--no-report", action="store_true", help="write summary.json only (no HTML report)")
    p.add_argument("--quiet", action="store_true", help="print the verdict only")


def _parser(prog: str, description: str, epilog: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=prog, description=description, epilog=epilog,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def run_parser() -> argparse.ArgumentParser:
    p = _parser("splitlab run", "Run a scenario on a fresh cluster of real containers: timeline, heal, analysis, "
                "verdict against its expectations.", RUN_EXAMPLES)
    _scenario_args(p)
    p.add_argument("--seed", type=int, help="seed of every random choice (default: the scenario's)")
    _common(p)
    return p


def replay_parser() -> argparse.ArgumentParser:
    p = _parser("splitlab replay", "Run a saved schedule again: the same scenario, variant and seed, each step at "
                "the time it was really applied.", REPLAY_EXAMPLES)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory holding schedule.json")
    p.add_argument("--sim", action="store_true", help="replay in the simulator instead of on containers")
    _common(p)
    return p


def sim_parser() -> argparse.ArgumentParser:
    p = _parser("splitlab sim", "Run a scenario in the seeded simulator (no Docker, virtual time): the same "
                "protocol code, the same analysis and verdict.", SIM_EXAMPLES)
    _scenario_args(p)
    p.add_argument("--seed", type=int, required=True, help="seed of the simulator and of every random choice")
    _common(p)
    return p


def _print_result(console: Console, result, progress: Progress) -> None:
    title = escape(f"run {result.run_id} [{result.variant or 'default'}, seed {result.seed}]")
    console.print(progress.verdict_table(title, result.verdict.outcomes, result.verdict.held))
    if result.verdict.note:
        console.print(f"[dim]{result.verdict.note}[/dim]")
    console.print(f"run directory: {result.run_dir}", highlight=False)
    if result.summary is not None:
        console.print(f"summary: {result.summary_json}", highlight=False)
        if result.report_html.exists():
            console.print(f"report:  {result.report_html}", highlight=False)
    console.print(f"replay:  splitlab replay {result.run_dir}", highlight=False)


def _variants(loaded_first, wanted: str | None) -> list[str | None]:
    if wanted == "all":
        return list(loaded_first.scenario.variants) or [None]
    return [loaded_first.variant]


def guard(prog: str, body: Callable[[], int]) -> int:
    """Run a command body: a SplitlabError becomes its message, hint and exit code; Ctrl-C exit 130."""
    try:
        return body()
    except SplitlabError as exc:
        return report_error(prog, exc)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (the cluster was removed and every fault healed)", file=sys.stderr)
        return 130


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    try:
        return parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse exits on --help (0) and on bad arguments (2)
        return int(exc.code or 0)


def _run_all(args: argparse.Namespace, simulate: bool) -> int:
    from chaos.harness.load import load_scenario

    console = Console(highlight=False)
    progress = Progress(console, quiet=args.quiet)
    first = load_scenario(args.scenario, args.sets, None if args.variant == "all" else args.variant)
    codes = []
    for variant in _variants(first, args.variant):
        loaded = first if variant == first.variant else load_scenario(args.scenario, args.sets, variant)
        if simulate:
            from chaos.harness import simrun

            result = simrun.run(loaded, seed=args.seed, out=args.out, progress=progress, report=not args.no_report)
        else:
            from chaos.harness import runner

            result = runner.run(loaded, seed=args.seed, out=args.out, progress=progress, report=not args.no_report)
        _print_result(console, result, progress)
        codes.append(result.verdict.exit_code)
    return max(codes)


def run_main(argv: Sequence[str] | None = None) -> int:
    """`splitlab run ...`; returns the exit code."""
    args = _parse(run_parser(), argv)
    return args if isinstance(args, int) else guard("splitlab run", lambda: _run_all(args, simulate=False))


def sim_main(argv: Sequence[str] | None = None) -> int:
    """`splitlab sim ...`; returns the exit code."""
    args = _parse(sim_parser(), argv)
    return args if isinstance(args, int) else guard("splitlab sim", lambda: _run_all(args, simulate=True))


def replay_main(argv: Sequence[str] | None = None) -> int:
    """`splitlab replay RUN_DIR`; returns the exit code."""
    args = _parse(replay_parser(), argv)
    if isinstance(args, int):
        return args

    def body() -> int:
        from chaos.harness import schedule as schedules
        from chaos.harness.load import from_data

        run_dir = Path(args.run_dir)
        saved = schedules.load(run_dir)
        loaded = from_data(schedules.replay_document(saved), f"{run_dir / schedules.FILE}", saved.variant)
        console = Console(highlight=False)
        progress = Progress(console, quiet=args.quiet)
        progress.say(f"replaying {saved.run_id} ({saved.backend}): {len(loaded.scenario.steps)} step(s) at their "
                     f"realised times, variant {saved.variant or 'default'}, seed {saved.seed}")
        simulate = args.sim or saved.backend == "sim"
        if simulate:
            from chaos.harness import simrun

            result = simrun.run(loaded, seed=saved.seed, out=args.out, progress=progress,
                                report=not args.no_report, replay_of=str(run_dir))
        else:
            from chaos.harness import runner

            result = runner.run(loaded, seed=saved.seed, out=args.out, progress=progress,
                                report=not args.no_report, replay_of=str(run_dir))
        _print_result(console, result, progress)
        return result.verdict.exit_code

    return guard("splitlab replay", body)


__all__ = ["replay_main", "run_main", "sim_main"]
