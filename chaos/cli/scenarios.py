"""The scenario verbs of `splitlab`: run, replay, sim (a scenario on containers, again from its realised
schedule, or in the seeded simulator), torture (random faults from one seed), shrink (a failing run's schedule
made smaller) and demo.

Exit codes: 0 the expectations hold, 1 they do not (or the machine could not run it), 2 bad input (the
scenario's errors are printed as `file:line: field: what was expected`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from chaos.cli.verbs import add_verb, inventory_flag, nodes_flag, progress, seed_flag
from node.errors import UsageError

INTERRUPTED = "interrupted (the cluster was removed and every fault healed)"
RUN_EXAMPLES = [
    "splitlab run scenarios/jgrp1873.yaml --variant legacy        # reproduce JGRP-1873 under unicast2",
    "splitlab run scenarios/jgrp1873.yaml --variant all           # every variant, one after the other",
    "splitlab run scenarios/jgrp1873.yaml --variant all --repeat 20 --jobs 2   # how often each holds",
    "splitlab run scenarios/unicast2_s6.yaml --seed 7 --set settle_s=8 "
    "--set cluster.defaults.timeouts.conn_close_timeout_ms=500"]
REPLAY_EXAMPLES = ["splitlab replay runs/261121-231947-589f                      # the same steps at their "
                   "realised times",
                   "splitlab replay runs/261121-231947-589f --sim                # in the simulator",
                   "splitlab replay runs/261121-231947-589f --sign               # its inject steps signed (auth)"]
SIM_EXAMPLES = ["splitlab sim scenarios/jgrp1873.yaml --seed 3 --variant all   # no Docker: the seeded simulator"]
TORTURE_EXAMPLES = ["splitlab torture --seed 7 --duration-s 60",
                    "splitlab torture --seed 7 --duration-s 120 --nodes 5",
                    "splitlab torture --seed 7 --duration-s 60 --sim      # in the simulator",
                    "splitlab torture --seed 7 --duration-s 60 --print    # the scenario only"]
SHRINK_EXAMPLES = ["splitlab shrink runs/261121-231947-589f            # -> runs/261121-231947-589f/shrunk.yaml",
                   "splitlab shrink runs/261121-231947-589f --check delivery --out small.yaml --max-trials 100",
                   "splitlab shrink runs/261121-231947-589f --confirm  # the result once more on containers"]


def _console() -> Console:
    return Console(highlight=False)


class _VerdictPrinter:
    """Prints a run's verdict table when the harness tells it (once a run: as soon as the checks are done, the
    report still to come)."""

    def __init__(self, console: Console, progress_: Any) -> None:
        self.console = console
        self.progress = progress_
        self.title = ""

    def __call__(self, verdict: Any) -> None:
        self.console.print(self.progress.verdict_table(self.title, verdict.outcomes, verdict.held))
        if verdict.note:
            self.console.print(f"[dim]{verdict.note}[/dim]")

    def run(self, loaded: Any, seed: int | None, **kwargs: Any) -> Any:
        """`runner.run` with the verdict printed as soon as it is known; returns the result."""
        from chaos.harness import runner

        self.title = escape(f"[{loaded.variant or 'default'}, seed "
                            f"{loaded.scenario.seed if seed is None else seed}]")
        return runner.run(loaded, seed=seed, progress=self.progress, on_verdict=self, **kwargs)


def _print_result(console: Console, result: Any) -> None:
    console.print(f"run {result.run_id}, run directory: {result.run_dir}", highlight=False)
    if result.summary is not None:
        console.print(f"summary: {result.summary_json}", highlight=False)
        if result.report_html.exists():
            console.print(f"report:  {result.report_html}", highlight=False)
    console.print(f"replay:  splitlab replay {result.run_dir}", highlight=False)


def _run_all(args: argparse.Namespace, backend: str) -> int:
    from chaos.harness.load import load_scenario
    from chaos.harness.progress import Progress

    hosts = _hosts_of(args)
    if args.repeat is None and (args.until_fail or args.jobs != 1):
        raise UsageError("--until-fail and --jobs go with --repeat N")
    console = _console()
    progress_ = Progress(console, quiet=args.quiet)
    printer = _VerdictPrinter(console, progress_)
    first = load_scenario(args.scenario, args.sets, None if args.variant == "all" else args.variant)
    variants = (list(first.scenario.variants) or [None]) if args.variant == "all" else [first.variant]
    codes = []
    for variant in variants:
        loaded = first if variant == first.variant else load_scenario(args.scenario, args.sets, variant)
        if args.repeat is not None:
            codes.append(_repeat(console, loaded, backend, args, hosts))
            continue
        result = printer.run(loaded, args.seed, backend=backend, out=args.out, report=not args.no_report,
                             hosts=hosts)
        _print_result(console, result)
        codes.append(result.verdict.exit_code)
    return max(codes)


def _repeat(console: Console, loaded: Any, backend: str, args: argparse.Namespace, hosts: Any) -> int:
    """`--repeat N` of one variant: the runs (fresh clusters, seeds base..base+N-1), a line as each ends, then per
    check how often it held with its 95 % Wilson interval, the failing seeds, and the expected rate judged.
    Writes the tally as JSON beside the runs. Exit 0 when the rate holds."""
    import json
    import time

    from rich.table import Table

    from chaos.cluster.lifecycle import runs_root
    from chaos.harness import repeat, runner
    from chaos.harness.load import load_scenario
    from chaos.harness.progress import Progress

    rate_text = loaded.expected_rate()
    expected = repeat.parse_rate(rate_text) if rate_text else None
    base = loaded.scenario.seed if args.seed is None else args.seed
    repeat.check_counts(args.repeat, args.jobs, base)
    label = loaded.label
    quiet = Progress(quiet=True)
    console.print(f"[bold]{escape(args.scenario)} [{label}][/bold]: {args.repeat} run(s) on "
                  f"{'the simulator' if backend == 'sim' else 'fresh clusters'}, seeds {base}..{base + args.repeat - 1}"
                  f"{f', {args.jobs} at a time' if args.jobs > 1 else ''}"
                  f"{', until one fails' if args.until_fail else ''}")

    def one(seed: int) -> Any:  # each run loads its own copy: nothing is shared between the threads
        return runner.run(load_scenario(args.scenario, args.sets, loaded.variant), backend=backend, seed=seed,
                          out=args.out, progress=quiet, report=False, hosts=hosts)

    def ended(seed: int, result: Any) -> None:
        verdict = "held" if result.verdict.held else "[bold red]did not hold[/]"
        console.print(f"  seed {seed}: {verdict} ({result.elapsed_s:.1f} s)  {result.run_dir}", highlight=False)

    tally = repeat.repeat(loaded.variant, args.repeat, base, one, jobs=args.jobs, until_fail=args.until_fail,
                          on_result=ended)
    data = tally.to_dict(expected)
    judged = "[green]holds[/]" if data["judged"] else "[bold red]does not hold[/]"
    low, high = data["wilson95"]
    table = Table(title=f"{label}: expectations held in {tally.held}/{tally.runs} run(s) ({data['rate']:.0%}, "
                        f"95 % interval {low:.0%}..{high:.0%}); expected rate {data['expected_rate']}: {judged}",
                  title_justify="left")
    for col in ("check", "held", "runs", "rate", "95 % interval"):
        table.add_column(col)
    for name, share in data["checks"].items():
        low, high = share["wilson95"]
        table.add_row(name, str(share["held"]), str(share["runs"]), f"{share['rate']:.0%}", f"{low:.0%}..{high:.0%}")
    console.print(table)
    for seed, run_dir in data["failing_runs"].items():
        console.print(f"  failed: seed {seed} ({run_dir}); again: splitlab run {args.scenario} --variant {label} "
                      f"--seed {seed}", highlight=False)
    out = Path(args.out).resolve() if args.out else runs_root()
    path = out / f"repeat-{Path(args.scenario).stem}-{label}-{time.strftime('%y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"scenario": str(args.scenario), "sets": args.sets, "base_seed": base, **data}
    path.write_text(json.dumps(document, indent=2) + "\n")
    console.print(f"tally: {path}", highlight=False)
    return 0 if data["judged"] else 1


def _hosts_of(args: argparse.Namespace) -> tuple[Any, str | None] | None:
    """(inventory, placement) from --inventory/--placement, or None for this machine. Raises `UsageError`."""
    if not getattr(args, "inventory", None):
        if getattr(args, "placement", None):
            raise UsageError("--placement needs --inventory")
        return None
    if getattr(args, "sim", False):
        raise UsageError("--inventory runs the nodes on hosts, --sim in the simulator: choose one")
    from chaos.hosts.inventory import load

    return load(args.inventory), args.placement


def _hosts_flags(p: argparse.ArgumentParser) -> None:
    inventory_flag(p, "run the nodes over the hosts of this inventory (every fault works across hosts)")
    p.add_argument("--placement", metavar="SPEC",
                   help="with --inventory: 'round-robin' (default) or 'n1,n2@hosta;n3@hostb'")


def cmd_run(args: argparse.Namespace) -> int:
    return _run_all(args, "docker")


def cmd_sim(args: argparse.Namespace) -> int:
    return _run_all(args, "sim")


def cmd_replay(args: argparse.Namespace) -> int:
    from chaos.harness import schedule as schedules
    from chaos.harness.load import from_data
    from chaos.harness.progress import Progress

    explicit = _hosts_of(args)
    run_dir = Path(args.run_dir)
    saved = schedules.load(run_dir)
    loaded = from_data(schedules.replay_document(saved, sign=args.sign), f"{run_dir / schedules.FILE}",
                       saved.variant)
    console = _console()
    progress_ = Progress(console, quiet=args.quiet)
    progress_.say(f"replaying {saved.run_id} ({saved.backend}): {len(loaded.scenario.steps)} step(s) at their "
                  f"realised times, variant {saved.variant or 'default'}, seed {saved.seed}")
    hosts = None
    if not args.sim:
        from chaos.hosts import multi

        hosts = explicit or multi.hosts_of(run_dir)  # by default where it ran: one machine or its hosts
        if hosts is not None:
            progress_.say(f"on host(s) {', '.join(hosts[0].names)}"
                          f"{f' (placement {hosts[1]})' if hosts[1] else ''}")
    result = _VerdictPrinter(console, progress_).run(loaded, saved.seed, backend="sim" if args.sim else saved.backend,
                                                     out=args.out, report=not args.no_report,
                                                     replay_of=str(run_dir), hosts=hosts)
    _print_result(console, result)
    return result.verdict.exit_code


def cmd_torture(args: argparse.Namespace) -> int:
    import yaml

    from chaos.harness import torture
    from chaos.harness.progress import Progress

    if args.print_only:
        doc = torture.generate(args.seed, args.duration_s, args.nodes,
                               torture.SIM_EPISODES if args.sim else torture.EPISODES)
        torture.load_generated(doc, args.seed)
        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
        return 0
    console = _console()
    progress_ = Progress(console, quiet=args.quiet)
    result = torture.run(args.seed, args.duration_s, args.nodes, simulate=args.sim, out=args.out,
                         progress=progress_, report=not args.no_report, hosts=_hosts_of(args))
    console.print(progress_.verdict_table(escape(f"torture seed {args.seed} (run {result.run_id})"),
                                          result.verdict.outcomes, result.verdict.held))
    console.print(f"run directory: {result.run_dir} (scenario.yaml, schedule.json)", highlight=False)
    if not result.verdict.held:
        console.print(f"[bold red]invariants broken[/]: replay with 'splitlab replay {result.run_dir}', or "
                      f"generate the same schedule with 'splitlab torture --seed {args.seed} --duration-s "
                      f"{args.duration_s:g} --nodes {args.nodes}{' --sim' if args.sim else ''}'")
    return result.verdict.exit_code


def cmd_shrink(args: argparse.Namespace) -> int:
    """Exit 0: a smaller (or the same) failing schedule written; 1: the failure did not reproduce; 2: bad input."""
    from chaos.harness.shrink_run import shrink_run

    console = _console()
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    outcome = shrink_run(args.run_dir, checks=args.checks, out=args.out, max_trials=args.max_trials,
                         backend=args.backend, confirm=args.confirm, log=lambda line: err.print(escape(line)))
    if outcome.out is None:
        console.print(f"[bold red]did not reproduce[/]: check(s) {', '.join(outcome.checks)} did not fail with the "
                      f"full schedule; nothing written", soft_wrap=True)
        return 1
    shrunk = outcome.shrunk
    console.print(f"smallest failing schedule: {outcome.out} ({shrunk.units_after} of {shrunk.units_before} fault "
                  f"unit(s), {shrunk.nodes_after} node(s), {shrunk.trials} trial(s)"
                  f"{'' if shrunk.complete else '; ' + '; '.join(shrunk.notes)})", highlight=False, soft_wrap=True)
    if outcome.confirmed is not None:
        console.print(f"on containers: {'fails too' if outcome.confirmed else '[bold red]passes[/]'}", soft_wrap=True)
    run = f"splitlab sim {outcome.out} --seed {shrunk.doc['seed']}" if outcome.backend == "sim" else \
        f"splitlab run {outcome.out}"
    console.print(f"run it: {run}", highlight=False, soft_wrap=True)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from chaos.harness import demo

    return demo.main(progress, jgroups=args.jgroups)


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file (see scenarios/README.md)")
    p.add_argument("--variant", help="variant to run (default: the first the scenario defines); 'all' runs each")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario field by its path, e.g. settle_s=8 or steps.2.at_s=3 (repeatable)")
    p.add_argument("--repeat", type=int, metavar="N",
                   help="run each variant N times (seeds SEED..SEED+N-1, fresh clusters, no HTML reports) and print "
                        "per check how often it held with a 95 %% Wilson interval; exit 0 when the rate the "
                        "scenario expects (expect.<variant>.rate, default: every run) holds")
    p.add_argument("--until-fail", action="store_true", help="with --repeat: stop at the first run that fails")
    p.add_argument("--jobs", type=int, default=1, metavar="J", help="with --repeat: J runs side by side (default 1)")


def _output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", help="put the run directory under DIR (default: $SPLITLAB_RUNS_DIR or "
                                                "./runs)")
    p.add_argument("--no-report", action="store_true", help="write summary.json only (no HTML report)")
    p.add_argument("--quiet", action="store_true", help="print the verdict only")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, "run", "run a scenario on a fresh cluster and judge it against its expectations", cmd_run,
                 description="Run a scenario on a fresh cluster of real containers: timeline, heal, analysis, "
                             "verdict against its expectations.", examples=RUN_EXAMPLES, interrupted=INTERRUPTED)
    _scenario_args(p)
    seed_flag(p, "seed of every random choice (default: the scenario's)")
    _output_args(p)
    _hosts_flags(p)

    p = add_verb(sub, "replay", "run a saved schedule again (the steps at their realised times)", cmd_replay,
                 description="Run a saved schedule again: the same scenario, variant and seed, each step at the "
                             "time it was really applied.", examples=REPLAY_EXAMPLES, interrupted=INTERRUPTED)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory holding schedule.json")
    p.add_argument("--sim", action="store_true", help="replay in the simulator instead of on containers")
    p.add_argument("--sign", action="store_true",
                   help="every inject step signs its datagram with the new run's key (a schedule whose cluster has "
                        "auth: true); without it, such a run's nodes drop what the inject steps send")
    _output_args(p)
    _hosts_flags(p)  # default: the hosts and placement the run had (its hosts.json), else this machine

    p = add_verb(sub, "sim", "run a scenario in the seeded simulator (no Docker)", cmd_sim,
                 description="Run a scenario in the seeded simulator (no Docker, virtual time): the same protocol "
                             "code, the same analysis and verdict.", examples=SIM_EXAMPLES)
    _scenario_args(p)
    seed_flag(p, "seed of the simulator and of every random choice", required=True)
    _output_args(p)

    p = add_verb(sub, "torture", "random faults from one seed with a workload, invariants checked after a heal",
                 cmd_torture, description="Random faults from one seed with a workload running; the invariants are "
                                          "checked after a final heal.", examples=TORTURE_EXAMPLES,
                 interrupted=INTERRUPTED)
    seed_flag(p, "seed of the schedule and of every random choice", required=True)
    # '--duration 60', the older spelling, still parses: argparse takes an unambiguous prefix of a flag
    p.add_argument("--duration-s", type=float, required=True, metavar="S", help="timeline length in seconds")
    nodes_flag(p, 3)
    p.add_argument("--sim", action="store_true", help="run in the simulator (no pauses there)")
    p.add_argument("--print", dest="print_only", action="store_true", help="print the generated scenario and exit")
    _output_args(p)
    _hosts_flags(p)

    p = add_verb(sub, "shrink", "make a failing run's fault schedule smaller (delta debugging); write it as a scenario",
                 cmd_shrink, description="Search for a smaller fault schedule that fails the same check as a run "
                                         "did (a torture run or a scenario run): fewer steps, shorter faults, fewer "
                                         "nodes, smaller workloads. Trials run in the simulator when it can express "
                                         "the schedule and reproduces the failure, else on fresh clusters. The "
                                         "smallest schedule found is written as a scenario file. Exit 0 written, "
                                         "1 the failure did not reproduce, 2 bad input.",
                 examples=SHRINK_EXAMPLES, interrupted=INTERRUPTED)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a finished run directory (schedule.json, verdict.json)")
    p.add_argument("--check", dest="checks", action="append", default=[], metavar="NAME",
                   help="the check that must keep failing (repeatable; default: the checks that failed against the "
                        "run's expectations, else those that failed as expected)")
    p.add_argument("--out", metavar="FILE", help="the scenario file to write (default: RUN_DIR/shrunk.yaml)")
    p.add_argument("--max-trials", type=int, default=60, metavar="N", help="at most N trial runs (default 60)")
    p.add_argument("--backend", choices=("sim", "docker"),
                   help="run the trials there (default: the simulator when it can run the schedule and reproduces "
                        "the failure, else containers)")
    p.add_argument("--confirm", action="store_true",
                   help="run the smallest schedule the simulator found once more on containers (root and Docker)")

    p = add_verb(sub, "demo", "JGRP-1873 under unicast2, then the same schedule under unicast3, side by side",
                 cmd_demo, examples=["splitlab demo      # or: make demo",
                                     "splitlab demo --jgroups   # or: make demo-jgroups"], interrupted=INTERRUPTED)
    p.add_argument("--jgroups", action="store_true",
                   help="also JGRP-1873 in the real UNICAST2 of JGroups 2.12.2 (needs its image: "
                        "'splitlab images --kind jgroups')")
