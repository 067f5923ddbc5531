"""The fuzz verb of `splitlab`: `splitlab fuzz` runs one campaign (chaos.fuzz.campaign) and prints its report,
as tables or (`--json`) as JSON only.

Exit codes: 0 every target healthy and the cluster delivering, 1 a check failed (the culprits are printed),
2 bad usage.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.cli.verbs import add_verb, json_flag, progress, run_id_flag, seed_flag, sign_flag
from chaos.fuzz import gen

if TYPE_CHECKING:
    from chaos.fuzz.campaign import Options

HEX_SHOWN_BYTES = 96
EXAMPLES = [
    "splitlab fuzz --seed 7 --count 20000                     # every node of the only run, 1000 datagrams/s",
    "splitlab fuzz --run-id RUN --targets n2 --seed 3 --count 5000 --rate 500 --json",
    "splitlab fuzz --seed 7 --count 2000 --mutations header,truncated,bad_count   # header and framing faults only",
    "splitlab fuzz --seed 7 --count 20000 --shrink            # a failure: bisect its suspects down to one datagram",
    "splitlab fuzz --seed 7 --count 5000 --sign               # a run of 'up --auth': signed after the mutation",
    "splitlab fuzz --replay runs/RUN/fuzz/7.jsonl --select 1203,1290-1300   # send recorded datagrams again",
    "splitlab chaos inject --pcap runs/RUN/fuzz/7.pcap         # the same datagrams through the plain injector"]
EPILOG = "examples:\n  " + "\n  ".join(EXAMPLES) + "\n\nmutation classes: " + ", ".join(gen.MUTATIONS)


def options(args: argparse.Namespace) -> Options:
    """The campaign options of `splitlab fuzz`'s arguments."""
    from chaos.fuzz import campaign

    return campaign.Options(
        run_id=args.run_id, targets=campaign.names(args.targets), seed=args.seed, count=args.count,
        rate_per_s=args.rate, spoof_pct=args.spoof_pct,
        mutations=gen.MUTATIONS if args.mutations is None else campaign.names(args.mutations),
        max_rss_growth_mb=args.max_rss_growth_mb, workload_count=args.workload_count,
        check_delivery=not args.no_delivery, check_every_s=args.check_every_s, shrink=args.shrink,
        replay=Path(args.replay) if args.replay else None, select=args.select, record_every=not args.no_record,
        sign=args.sign)


def cmd_fuzz(args: argparse.Namespace) -> int:
    from chaos.fuzz import campaign

    report = campaign.run(options(args), progress)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0 if report["ok"] else 1


def _hex(data: bytes) -> str:
    shown = data[:HEX_SHOWN_BYTES].hex()
    return shown if len(data) <= HEX_SHOWN_BYTES else f"{shown}... ({len(data)} bytes)"


def _print(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from chaos.fuzz.run import MIB

    console = Console(highlight=False)
    console.print(f"sent {report['sent']} datagrams in {report['elapsed_s']:.1f} s "
                  f"({report['rate_per_s'] or 0:.0f}/s), {report['spoofed']} from a spoofed member source; "
                  + ", ".join(f"{k} {v}" for k, v in report["mutations"].items()))
    table = Table(title="drops and counters by reason (after minus before)")
    for col in ("target", "runtime drops by reason", "layer counters"):
        table.add_column(col)
    for target in report["targets"]:
        drops = report["drops"].get(target)
        layers = report["layer_counters"].get(target, {})
        table.add_row(target, "n/a (no answer)" if drops is None else
                      "\n".join(f"{k}: {v}" for k, v in drops.items()) or "none",
                      "\n".join(f"{layer}.{k}: {v}" for layer, cs in layers.items() for k, v in cs.items()) or "")
    console.print(table)
    for name, check in report["checks"].items():
        mark = {True: "[green]ok[/]", False: "[red]FAILED[/]", None: "[yellow]not checked[/]"}[check["ok"]]
        console.print(f"{name:9} {mark}  {escape(check['detail'])}")
        for node, values in check.get("nodes", {}).items():
            if name == "health":
                console.print(f"            {node}: {values['latency_ms']:.0f} ms" +
                              ("" if values["ok"] else f" [red]{escape(str(values['error']))}[/]"))
            elif name == "memory" and values["growth"] is not None:
                console.print(f"            {node}: {values['before'] / MIB:.1f} -> "
                              f"{values['after'] / MIB:.1f} MiB ({values['growth'] / MIB:+.1f})")
    console.print(f"recorded: {report['record']}" + (f" and {report['pcap']}" if report["pcap"] else ""))
    for c in report["culprits"]:
        console.print(f"[bold red]{c['check']} of {c['target']}[/]: {escape(c['symptom'])}")
        what = (("this datagram breaks it alone" if c["count"] == 1 else f"these {c['count']} datagrams break it")
                + " from a fresh start (every member restarted)") if c["confirmed"] else \
            f"{c['count']} suspect datagram(s)"
        console.print(f"  {what} (all in {c['file']}):")
        for d in c["datagrams"]:
            console.print(f"  #{d['i']} {d['src']}->{d['target']} (sent from {d['via']}'s namespace) "
                          f"{d['mutation']}: {escape(d['detail'])}")
            console.print(f"      hex: {_hex(bytes.fromhex(d['hex']))}")
            console.print(f"      decoded: {escape(d['decoded'])}")
        if c["count"] > len(c["datagrams"]):
            console.print(f"  ... and {c['count'] - len(c['datagrams'])} more")
        console.print(f"  replay: {c['replay']}")
    console.print(f"reproduce: {report['reproduce']}")
    if not report["ok"]:
        console.print(f"replay exactly: splitlab fuzz --run-id {report['run_id']} --replay {report['record']}"
                      + (" --sign" if report.get("signed") else ""))


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, "fuzz", "structure-aware fuzzed datagrams at nodes, then health, memory and delivery checks",
                 cmd_fuzz, description="Send structure-aware fuzzed datagrams (valid, boundary values, window edges, "
                 "other conn_ids, unknown types, truncated, oversized, wrong counts, bad headers, bundles) from "
                 "member namespaces at chosen nodes; then check that they answer /health within 1 s, that their "
                 "memory stayed bounded and that the cluster still delivers a workload.", epilog=EPILOG)
    run_id_flag(p)
    p.add_argument("--targets", metavar="N1,N2", help="comma-separated nodes to fuzz (default: every node)")
    seed_flag(p, "seed of every random choice (default 0)", default=0)
    p.add_argument("--count", type=int, default=10_000, help="datagrams to send (default 10000)")
    p.add_argument("--rate", type=float, default=1000.0, metavar="PER_S",
                   help="datagrams per second, 0 = as fast as possible (default 1000)")
    p.add_argument("--spoof-pct", type=float, default=gen.SPOOF_PCT, metavar="PCT",
                   help="percent of datagrams whose source address is another member's than the namespace they "
                        f"leave from (default {gen.SPOOF_PCT:g})")
    p.add_argument("--mutations", metavar="A,B", help="comma-separated mutation classes (default: all; see below)")
    p.add_argument("--max-rss-growth-mb", type=float, default=64.0, metavar="MB",
                   help="memory bound: a target's RSS may grow less than this (default 64)")
    p.add_argument("--workload-count", type=int, default=100,
                   help="messages per member and kind in the delivery check (default 100)")
    p.add_argument("--no-delivery", action="store_true", help="skip the delivery check")
    p.add_argument("--check-every-s", type=float, default=0.5, metavar="S",
                   help="how often the targets' /health is probed while fuzzing (default 0.5)")
    p.add_argument("--shrink", action="store_true",
                   help="on a failure (a target hangs or dies, a stream stops delivering), bisect the first one's "
                        "suspects down to one datagram, each trial on a freshly restarted cluster (restarts every "
                        "member)")
    p.add_argument("--replay", metavar="FILE", help="send the datagrams of a recorded .jsonl instead of generating")
    p.add_argument("--select", metavar="I,J-K", help="with --replay: only these datagram indexes")
    p.add_argument("--no-record", action="store_true",
                   help="record the header (seed, context: enough to generate the same datagrams) only, not every "
                        "datagram (a replay always records what it sends)")
    sign_flag(p)
    json_flag(p, "the report")
