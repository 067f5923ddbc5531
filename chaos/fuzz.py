"""`splitlab fuzz`: structure-aware fuzzing of a running cluster's nodes, from one seed.

Datagrams come from chaos.fuzzgen (built from node.wire's message registry, aimed at the targets' windows as
their /state shows them) and leave from member namespaces, a share with another member's address as source
(chaos.fuzzrun sends, watches and judges). Every datagram is recorded in runs/<run>/fuzz/<seed>.jsonl and
.pcap. Afterwards every target must answer /health within 1 s, its RSS must have grown less than the bound, and
the cluster must deliver a workload; the targets' drop counters are printed by reason. On a failure the
suspected datagrams are printed (hex and decoded) with the command lines that replay them.

Exit codes: 0 every target healthy and the cluster delivering, 1 a check failed (the culprits are printed),
2 bad usage.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from chaos import fuzzgen, fuzzrecord, fuzzrun, fuzzshrink
from node import wire
from node.errors import SplitlabError, UsageError, report_error

EXAMPLES = """examples:
  splitlab fuzz --seed 7 --count 20000                     # every node of the only run, 1000 datagrams/s
  splitlab fuzz --run-id RUN --targets n2 --seed 3 --count 5000 --rate 500 --json
  splitlab fuzz --seed 7 --count 2000 --mutations header,truncated,bad_count   # header and framing faults only
  splitlab fuzz --seed 7 --count 20000 --shrink            # a failure: bisect its suspects down to one datagram
  splitlab fuzz --replay runs/RUN/fuzz/7.jsonl --select 1203,1290-1300   # send recorded datagrams again
  splitlab chaos inject --pcap runs/RUN/fuzz/7.pcap         # the same datagrams through the plain injector

mutation classes: """ + ", ".join(fuzzgen.MUTATIONS) + """
"""
SHOWN_CULPRITS = 5
HEX_SHOWN_BYTES = 96


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="splitlab fuzz", description="Send structure-aware fuzzed datagrams (valid, "
                                "boundary values, window edges, other conn_ids, unknown types, truncated, "
                                "oversized, wrong counts, bad headers, bundles) from member namespaces at chosen "
                                "nodes; then check that they answer /health within 1 s, that their memory "
                                "stayed bounded and that the cluster still delivers a workload.",
                                epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-id", help="the run (default: the only one)")
    p.add_argument("--targets", help="comma-separated nodes to fuzz (default: every node)")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    p.add_argument("--count", type=int, default=10_000, help="datagrams to send (default 10000)")
    p.add_argument("--rate", type=float, default=1000.0, metavar="PER_S",
                   help="datagrams per second, 0 = as fast as possible (default 1000)")
    p.add_argument("--spoof-pct", type=float, default=fuzzgen.SPOOF_PCT,
                   help=f"percent of datagrams whose source address is another member's than the namespace "
                        f"they leave from (default {fuzzgen.SPOOF_PCT})")
    p.add_argument("--mutations", help="comma-separated mutation classes (default: all)")
    p.add_argument("--max-rss-growth-mb", type=float, default=64.0,
                   help="memory bound: a target's RSS may grow less than this (default 64)")
    p.add_argument("--workload-count", type=int, default=100,
                   help="messages per member and kind in the delivery check (default 100)")
    p.add_argument("--no-delivery", action="store_true", help="skip the delivery check")
    p.add_argument("--check-every-s", type=float, default=0.5,
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
    p.add_argument("--json", action="store_true", help="print the result as JSON only")
    return p


def _validate(args: argparse.Namespace) -> tuple[str, ...]:
    if args.count < 1:
        raise UsageError(f"--count must be at least 1, got {args.count}")
    if args.rate < 0:
        raise UsageError(f"--rate must be >= 0 (0: as fast as possible), got {args.rate:g}")
    if not 0 <= args.spoof_pct <= 100:
        raise UsageError(f"--spoof-pct must be within 0..100, got {args.spoof_pct:g}")
    if args.max_rss_growth_mb <= 0 or args.check_every_s <= 0 or args.workload_count < 1:
        raise UsageError("--max-rss-growth-mb and --check-every-s must be > 0, --workload-count >= 1")
    if args.select and not args.replay:
        raise UsageError("--select needs --replay FILE")
    if args.replay and args.targets:
        raise UsageError("--targets does not go with --replay: a record names its targets",
                         hint="pick datagrams with --select")
    if not args.mutations:
        return fuzzgen.MUTATIONS
    chosen = tuple(m.strip() for m in args.mutations.split(",") if m.strip())
    unknown = [m for m in chosen if m not in fuzzgen.MUTATIONS]
    if unknown or not chosen:
        raise UsageError(f"unknown mutation class(es) {', '.join(unknown) or '(none)'}; classes: "
                         f"{', '.join(fuzzgen.MUTATIONS)}")
    return chosen


def _reproduce(args: argparse.Namespace, run_id: str, targets: list[str], mutations: tuple[str, ...]) -> str:
    parts = ["splitlab fuzz", f"--run-id {run_id}", f"--seed {args.seed}", f"--count {args.count}",
             f"--targets {','.join(targets)}", f"--rate {args.rate:g}"]
    if args.spoof_pct != fuzzgen.SPOOF_PCT:
        parts.append(f"--spoof-pct {args.spoof_pct:g}")
    if mutations != fuzzgen.MUTATIONS:
        parts.append(f"--mutations {','.join(mutations)}")
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """`splitlab fuzz ...`; returns the exit code."""
    try:
        args = parser().parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # --help (0) and bad arguments (2)
        return int(exc.code or 0)
    try:
        return _main(args)
    except SplitlabError as exc:
        return report_error("splitlab fuzz", exc)
    except KeyboardInterrupt:
        print("splitlab fuzz: interrupted", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    from chaos import cluster as clusters
    from chaos.net import ControllerHistory

    mutations = _validate(args)
    log = (lambda _: None) if args.json else (lambda text: print(text, flush=True))
    run = clusters.load(clusters.resolve_run_id(args.run_id))
    member_states = fuzzrun.states(run, run.names)
    fuzz_dir = run.run_dir / "fuzz"
    if args.replay:
        header, cases, count = fuzzrecord.load_replay(Path(args.replay))
        cases = fuzzrecord.retarget(fuzzrecord.select(cases, args.select), header.get("run_id", run.run_id),
                                    run.run_id)
        targets = list(header.get("targets", []))
        settings = _settings(args, targets)
        fuzzrun.check_targets(run, settings)
        recorder = fuzzrecord.Recorder(fuzz_dir, f"replay-{Path(args.replay).stem}",
                                       {**header, "run_id": run.run_id, "replayed": args.replay,
                                        "select": args.select})
        seed = header.get("seed", args.seed)
        reproduce = f"splitlab fuzz --run-id {run.run_id} --replay {args.replay}"
        log(f"fuzz: replaying {count if not args.select else 'selected'} datagram(s) of {args.replay} at "
            f"{', '.join(targets)} of run {run.run_id}")
        record_path = recorder.jsonl_path
    else:
        targets = [t.strip() for t in (args.targets or ",".join(run.names)).split(",") if t.strip()]
        settings = _settings(args, targets)
        fuzzrun.check_targets(run, settings)
        ctx = fuzzrun.context(run, targets, member_states)
        cases = fuzzgen.generate(args.seed, args.count, ctx, targets, mutations, args.spoof_pct)
        header = {"run_id": run.run_id, "seed": args.seed, "count": args.count, "targets": targets,
                  "mutations": list(mutations), "spoof_pct": args.spoof_pct, "rate_per_s": args.rate,
                  "created_s": time.time(), "context": ctx.as_dict()}
        recorder = fuzzrecord.Recorder(fuzz_dir, str(args.seed), header, lines=not args.no_record)
        record_path = recorder.jsonl_path
        seed = args.seed
        reproduce = _reproduce(args, run.run_id, targets, mutations)
        log(f"fuzz: seed {args.seed}, {args.count} datagrams at {', '.join(targets)} of run {run.run_id}, "
            f"{'unpaced' if not args.rate else f'{args.rate:g}/s'}; recording {record_path}")
    ControllerHistory(run.run_dir, run.run_id).emit(
        "fault_start", fault_id=f"inject-fuzz-{seed}-{int(time.time())}", kind="inject",
        detail={"fuzz": {"seed": seed, "targets": targets, "file": str(record_path)}}, applied_ts=time.time(),
        effective_ts=None)
    outcome = fuzzrun.run(run, cases, settings, recorder, log, member_states)
    if args.shrink:
        shrinkable = [i for i, c in enumerate(outcome.culprits) if c.check != "memory" and c.cases]
        if shrinkable:  # the first failure only: each trial restarts the cluster
            i = shrinkable[0]
            try:
                outcome.culprits[i], run = fuzzshrink.shrink(run, outcome.culprits[i], settings, log)
            except SplitlabError as exc:  # the suspects stay as they were; the report says why
                outcome.culprits[i].symptom += f" (shrinking failed: {exc})"
    files = {}
    for k, culprits in enumerate(outcome.culprits):
        path = fuzz_dir / f"{seed}.culprits-{k + 1}.{culprits.check}.{culprits.target}.jsonl"
        files[k] = fuzzrecord.write_cases(path, {**header, "run_id": run.run_id, "culprits": culprits.symptom},
                                       culprits.cases)
    report = _report(run, args, outcome, targets, record_path, files, reproduce)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0 if outcome.ok else 1


def _settings(args: argparse.Namespace, targets: list[str]) -> fuzzrun.Settings:
    return fuzzrun.Settings(targets=targets, rate_per_s=args.rate, check_every_s=args.check_every_s,
                            max_rss_growth_bytes=int(args.max_rss_growth_mb * fuzzrun.MIB),
                            workload_count=args.workload_count, check_delivery=not args.no_delivery)


def _hex(data: bytes) -> str:
    shown = data[:HEX_SHOWN_BYTES].hex()
    return shown if len(data) <= HEX_SHOWN_BYTES else f"{shown}... ({len(data)} bytes)"


def _report(run: Any, args: argparse.Namespace, outcome: fuzzrun.Outcome, targets: list[str], record: Path,
            files: dict[int, Path], reproduce: str) -> dict[str, Any]:
    cid = wire.cluster_id_of(run.run_id)
    culprits = []
    for k, c in enumerate(outcome.culprits):
        path = files[k]
        indexes = ",".join(str(case.index) for case in c.cases)
        culprits.append({
            "target": c.target, "check": c.check, "symptom": c.symptom, "count": len(c.cases),
            "confirmed": c.confirmed, "file": str(path),
            "replay": f"splitlab fuzz --run-id {run.run_id} --replay {path}",
            "indexes": indexes if len(indexes) <= 200 else indexes[:200] + "...",
            "datagrams": [{**{k: v for k, v in case.as_record().items() if k != "hex"},
                           "hex": case.data.hex(), "decoded": fuzzrecord.decoded(case, cid)}
                          for case in c.cases[:SHOWN_CULPRITS]]})
    return {"ok": outcome.ok, "run_id": run.run_id, "targets": targets, "sent": outcome.sent,
            "elapsed_s": round(outcome.elapsed_s, 3),
            "rate_per_s": round(outcome.sent / outcome.elapsed_s, 1) if outcome.elapsed_s else None,
            "spoofed": outcome.spoofed, "mutations": dict(sorted(outcome.mutations.items())),
            "checks": outcome.checks, "drops": outcome.drops, "layer_counters": outcome.layer_counters,
            "culprits": culprits, "record": str(record),
            "pcap": str(record.with_suffix(".pcap")) if record.with_suffix(".pcap").exists() else None,
            "reproduce": reproduce}


def _print(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

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
                console.print(f"            {node}: {values['before'] / fuzzrun.MIB:.1f} -> "
                              f"{values['after'] / fuzzrun.MIB:.1f} MiB ({values['growth'] / fuzzrun.MIB:+.1f})")
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
        console.print(f"replay exactly: splitlab fuzz --run-id {report['run_id']} --replay {report['record']}")


if __name__ == "__main__":
    sys.exit(main())
