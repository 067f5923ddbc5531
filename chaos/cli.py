"""The `splitlab` command: cluster lifecycle (up, down, ps), images, doctor, faults (chaos, heal), fuzzing,
demo and analysis.

Exit codes: 0 success, 1 the environment or a check failed, 2 bad usage. Errors are one clear line with a hint.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from node.errors import SplitlabError, report_error

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def _log(text: str) -> None:
    console.print(text)


def cmd_images(args: argparse.Namespace) -> int:
    from chaos import images

    tag = images.build_all(_log)
    console.print(f"node image ready: {tag}")
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from chaos import cluster

    run = cluster.up(args.n, log=_log, wait_timeout_s=args.timeout, run_id=args.run_id)
    if args.json:
        print(json.dumps(cluster.as_dict(run), indent=2))
        return 0
    table = Table(title=f"run {run.run_id}  ({run.run_dir})")
    for col in ("name", "data IP", "control URL"):
        table.add_column(col)
    for node in run.nodes:
        table.add_row(node.name, node.data_ip, node.control_url)
    console.print(table)
    console.print(f"token: {run.run_dir / 'token'}    stop with: splitlab down --run-id {run.run_id}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from chaos import cluster

    run_ids = [r.run_id for r in cluster.ps()] if args.all else [cluster.resolve_run_id(args.run_id)]
    for run_id in run_ids:
        cluster.down(run_id, log=_log)
    if args.all and not run_ids:
        console.print("no splitlab run exists")
    return 0


def cmd_ps(args: argparse.Namespace) -> int:
    from chaos import cluster

    runs = cluster.ps()
    table = Table()
    for col in ("run", "nodes", "running", "directory"):
        table.add_column(col)
    for r in runs:
        table.add_row(r.run_id, str(r.nodes), str(r.running), r.run_dir)
    console.print(table if runs else "no splitlab run exists")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from chaos import doctor, images

    def present() -> dict[str, bool]:
        return {s.tag: s.present for s in images.status()}

    checks = doctor.run_checks(doctor.system_probe, present, Path.cwd(), doctor.nfqueue_binding_error())
    table = Table(title="splitlab doctor")
    for col in ("capability", "status", "detail", "hint"):
        table.add_column(col)
    for c in checks:
        status = "[green]ok[/]" if c.ok else ("[red]missing[/]" if c.required else "[yellow]missing[/]")
        table.add_row(c.name, status, c.detail, c.hint)
    console.print(table)
    by_name = {c.name: c for c in checks}
    backends = doctor.fault_backends(by_name["sch_netem (tc netem)"], by_name["NFQUEUE"])
    console.print("fault backends on this machine:")
    for fault, backend in backends.items():
        console.print(f"  {fault}: {backend}")
    ok = doctor.can_run(checks)
    console.print("the testbed can run" if ok else "[red]the testbed cannot run: fix what is missing above[/]")
    return 0 if ok else 1


def cmd_compose_template(args: argparse.Namespace) -> int:
    from chaos import compose

    sys.stdout.write(compose.HEADER + compose.dump(compose.render_template(3)))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from chaos import demo

    return demo.main(_log)


def cmd_chaos(args: argparse.Namespace) -> int:
    from chaos import chaoscli

    return chaoscli.main(args.rest)


def cmd_heal(args: argparse.Namespace) -> int:
    from chaos import chaoscli

    return chaoscli.heal_main(args.rest)


def cmd_analyze(args: argparse.Namespace) -> int:
    from pipeline.cli import analyze_main

    return analyze_main(args.rest)


def cmd_run(args: argparse.Namespace) -> int:
    from chaos.harness.cli import run_main

    return run_main(args.rest)


def cmd_replay(args: argparse.Namespace) -> int:
    from chaos.harness.cli import replay_main

    return replay_main(args.rest)


def cmd_sim(args: argparse.Namespace) -> int:
    from chaos.harness.cli import sim_main

    return sim_main(args.rest)


def cmd_torture(args: argparse.Namespace) -> int:
    from chaos.torture import torture_main

    return torture_main(args.rest)


def cmd_fuzz(args: argparse.Namespace) -> int:
    from chaos.fuzz import main as fuzz_main

    return fuzz_main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="splitlab", description="A testbed for reliable-messaging protocols "
                                     "under network faults.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("images", help="build the base and node images (only what changed)")
    p.set_defaults(func=cmd_images)

    p = sub.add_parser("up", help="start a cluster and wait until all nodes hear each other",
                       epilog="example: splitlab up -n 5")
    p.add_argument("-n", type=int, default=3, help="number of nodes (default 3)")
    p.add_argument("--run-id", help="run id to use (default: a fresh one)")
    p.add_argument("--timeout", type=float, default=60, help="seconds to wait for all-hear-all (default 60)")
    p.add_argument("--json", action="store_true", help="print the cluster as JSON")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="remove a run's containers and networks (its directory stays)")
    p.add_argument("--run-id", help="the run (default: the only one)")
    p.add_argument("--all", action="store_true", help="every splitlab run")
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("ps", help="list runs")
    p.set_defaults(func=cmd_ps)

    p = sub.add_parser("doctor", help="what this machine can do; exit 1 when the testbed cannot run")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("compose-template", help="print the default docker-compose.yml")
    p.set_defaults(func=cmd_compose_template)

    p = sub.add_parser("demo", help="JGRP-1873 under unicast2, then the same schedule under unicast3, side by side")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("chaos", help="network and process faults: partition, heal, slow, fast, flaky, shape, "
                       "msg-fault, inject, capture, pause, resume, kill, start", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_chaos)

    p = sub.add_parser("heal", help="undo every fault the run's ledger lists (also after a crash)", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_heal)

    p = sub.add_parser("analyze", help="analyse a run's history with Spark", add_help=False)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_analyze)

    for name, func, help_ in (
            ("run", cmd_run, "run a scenario on a fresh cluster and judge it against its expectations"),
            ("replay", cmd_replay, "run a saved schedule again (the steps at their realised times)"),
            ("sim", cmd_sim, "run a scenario in the seeded simulator (no Docker)"),
            ("torture", cmd_torture, "random faults from one seed with a workload, invariants checked after a heal"),
            ("fuzz", cmd_fuzz, "structure-aware fuzzed datagrams at nodes, then health, memory and delivery checks")):
        p = sub.add_parser(name, help=help_, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=func)
    return parser


# Commands with their own parsers get the rest of the command line untouched (argparse's REMAINDER would
# swallow a leading --help).
PASSTHROUGH = {"chaos": cmd_chaos, "heal": cmd_heal, "analyze": cmd_analyze, "run": cmd_run, "replay": cmd_replay,
               "sim": cmd_sim, "torture": cmd_torture, "fuzz": cmd_fuzz}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in PASSTHROUGH:
        return PASSTHROUGH[argv[0]](argparse.Namespace(command=argv[0], rest=argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SplitlabError as exc:
        return report_error(f"splitlab {args.command}", exc)
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
