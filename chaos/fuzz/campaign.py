"""One fuzzing campaign against a running cluster's nodes, from one seed: `run(options, log) -> report`.

Datagrams come from chaos.fuzz.gen (built from node.wire's message registry, aimed at the targets' windows as
their /state shows them) or from a recorded file, and leave from member namespaces, a share with another
member's address as source (chaos.fuzz.run sends, watches and judges). Every datagram is recorded in
runs/<run>/fuzz/<seed>.jsonl and .pcap. Afterwards every target must answer /health within 1 s, its RSS must
have grown less than the bound, and the cluster must deliver a workload. The report (plain data, what
`splitlab fuzz --json` prints) holds the checks, the targets' drop counters by reason, and on a failure the
suspected datagrams (hex and decoded) with the command lines that replay them. `sign` signs every datagram with
the run's key after its mutation (a run of `splitlab up --auth`); the record holds the datagrams as made and says
`signed`, the pcap the packets as sent.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from chaos.fuzz import gen as fuzzgen, record as fuzzrecord, run as fuzzrun, shrink as fuzzshrink
from node import wire
from node.errors import SplitlabError, UsageError

SHOWN_CULPRITS = 5
Log = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """What to fuzz and how; the fields are `splitlab fuzz`'s flags. `targets` None: every node."""

    run_id: str | None = None
    targets: tuple[str, ...] | None = None
    seed: int = 0
    count: int = 10_000
    rate_per_s: float = 1000.0
    spoof_pct: float = fuzzgen.SPOOF_PCT
    mutations: tuple[str, ...] = fuzzgen.MUTATIONS
    max_rss_growth_mb: float = 64.0
    workload_count: int = 100
    check_delivery: bool = True
    check_every_s: float = 0.5
    shrink: bool = False
    replay: Path | None = None
    select: str | None = None
    record_every: bool = True
    sign: bool = False

    def check(self) -> None:
        """Raises `UsageError` (naming the flag) for a value out of range or options that do not go together."""
        if self.count < 1:
            raise UsageError(f"--count must be at least 1, got {self.count}")
        if self.rate_per_s < 0:
            raise UsageError(f"--rate must be >= 0 (0: as fast as possible), got {self.rate_per_s:g}")
        if not 0 <= self.spoof_pct <= 100:
            raise UsageError(f"--spoof-pct must be within 0..100, got {self.spoof_pct:g}")
        if self.max_rss_growth_mb <= 0 or self.check_every_s <= 0 or self.workload_count < 1:
            raise UsageError("--max-rss-growth-mb and --check-every-s must be > 0, --workload-count >= 1")
        if self.select and not self.replay:
            raise UsageError("--select needs --replay FILE")
        if self.replay and self.targets:
            raise UsageError("--targets does not go with --replay: a record names its targets",
                             hint="pick datagrams with --select")
        unknown = [m for m in self.mutations if m not in fuzzgen.MUTATIONS]
        if unknown or not self.mutations:
            raise UsageError(f"unknown mutation class(es) {', '.join(unknown) or '(none)'}; classes: "
                             f"{', '.join(fuzzgen.MUTATIONS)}")


def names(text: str | None) -> tuple[str, ...] | None:
    """`a,b` -> ("a", "b"); None stays None (the default)."""
    return None if text is None else tuple(t.strip() for t in text.split(",") if t.strip())


def reproduce(options: Options, run_id: str, targets: list[str]) -> str:
    """The command line that sends the same datagrams again."""
    parts = ["splitlab fuzz", f"--run-id {run_id}", f"--seed {options.seed}", f"--count {options.count}",
             f"--targets {','.join(targets)}", f"--rate {options.rate_per_s:g}"]
    if options.spoof_pct != fuzzgen.SPOOF_PCT:
        parts.append(f"--spoof-pct {options.spoof_pct:g}")
    if options.mutations != fuzzgen.MUTATIONS:
        parts.append(f"--mutations {','.join(options.mutations)}")
    return " ".join(parts) + _sign_flag(options)


def _sign_flag(options: Options) -> str:
    return " --sign" if options.sign else ""


def _settings(options: Options, targets: list[str], cluster: Any) -> fuzzrun.Settings:
    from chaos.cluster import authkey

    return fuzzrun.Settings(targets=targets, rate_per_s=options.rate_per_s, check_every_s=options.check_every_s,
                            max_rss_growth_bytes=int(options.max_rss_growth_mb * fuzzrun.MIB),
                            workload_count=options.workload_count, check_delivery=options.check_delivery,
                            forged=not set(options.mutations) <= fuzzgen.MALFORMED,
                            auth_key=authkey.required(cluster.run_dir, cluster.run_id) if options.sign else None)


def run(options: Options, log: Log) -> dict[str, Any]:
    """Fuzz, check, shrink on request; returns the report (`report["ok"]`). Raises `SplitlabError`."""
    from chaos.cluster import lifecycle
    from chaos.host.history import ControllerHistory

    options.check()
    cluster = lifecycle.load(lifecycle.resolve_run_id(options.run_id))
    member_states = fuzzrun.states(cluster, cluster.names)
    fuzz_dir = cluster.run_dir / "fuzz"
    if options.replay:
        header, cases, count = fuzzrecord.load_replay(options.replay)
        cases = fuzzrecord.retarget(fuzzrecord.select(cases, options.select), header.get("run_id", cluster.run_id),
                                    cluster.run_id)
        targets = list(header.get("targets", []))
        settings = _settings(options, targets, cluster)
        fuzzrun.check_targets(cluster, settings)
        recorder = fuzzrecord.Recorder(fuzz_dir, f"replay-{options.replay.stem}",
                                       {**header, "run_id": cluster.run_id, "replayed": str(options.replay),
                                        "select": options.select, "signed": options.sign})
        seed = header.get("seed", options.seed)
        again = f"splitlab fuzz --run-id {cluster.run_id} --replay {options.replay}{_sign_flag(options)}"
        log(f"fuzz: replaying {count if not options.select else 'selected'} datagram(s) of {options.replay} at "
            f"{', '.join(targets)} of run {cluster.run_id}")
    else:
        targets = list(options.targets or cluster.names)
        settings = _settings(options, targets, cluster)
        fuzzrun.check_targets(cluster, settings)
        ctx = fuzzrun.context(cluster, targets, member_states)
        cases = fuzzgen.generate(options.seed, options.count, ctx, targets, options.mutations, options.spoof_pct)
        header = {"run_id": cluster.run_id, "seed": options.seed, "count": options.count, "targets": targets,
                  "mutations": list(options.mutations), "spoof_pct": options.spoof_pct,
                  "rate_per_s": options.rate_per_s, "created_s": time.time(), "context": ctx.as_dict(),
                  "signed": options.sign}
        recorder = fuzzrecord.Recorder(fuzz_dir, str(options.seed), header, lines=options.record_every)
        seed = options.seed
        again = reproduce(options, cluster.run_id, targets)
        log(f"fuzz: seed {options.seed}, {options.count} datagrams at {', '.join(targets)} of run {cluster.run_id}, "
            f"{'unpaced' if not options.rate_per_s else f'{options.rate_per_s:g}/s'}; recording "
            f"{recorder.jsonl_path}")
    record_path = recorder.jsonl_path
    ControllerHistory(cluster.run_dir, cluster.run_id).emit(
        "fault_start", fault_id=f"inject-fuzz-{seed}-{int(time.time())}", kind="inject",
        detail={"fuzz": {"seed": seed, "targets": targets, "file": str(record_path)}}, applied_ts=time.time(),
        effective_ts=None)
    outcome = fuzzrun.run(cluster, cases, settings, recorder, log, member_states)
    if options.shrink:
        shrinkable = [i for i, c in enumerate(outcome.culprits) if c.check != "memory" and c.cases]
        if shrinkable:  # the first failure only: each trial restarts the cluster
            i = shrinkable[0]
            try:
                outcome.culprits[i], cluster = fuzzshrink.shrink(cluster, outcome.culprits[i], settings, log)
            except SplitlabError as exc:  # the suspects stay as they were; the report says why
                outcome.culprits[i].symptom += f" (shrinking failed: {exc})"
    files = {}
    for k, culprits in enumerate(outcome.culprits):
        path = fuzz_dir / f"{seed}.culprits-{k + 1}.{culprits.check}.{culprits.target}.jsonl"
        files[k] = fuzzrecord.write_cases(path, {**header, "run_id": cluster.run_id, "culprits": culprits.symptom},
                                          culprits.cases)
    return _report(cluster, outcome, targets, record_path, files, again, _sign_flag(options))


def _report(cluster: Any, outcome: fuzzrun.Outcome, targets: list[str], record: Path, files: dict[int, Path],
            again: str, sign_flag: str = "") -> dict[str, Any]:
    cid = wire.cluster_id_of(cluster.run_id)
    culprits = []
    for k, c in enumerate(outcome.culprits):
        path = files[k]
        indexes = ",".join(str(case.index) for case in c.cases)
        culprits.append({
            "target": c.target, "check": c.check, "symptom": c.symptom, "count": len(c.cases),
            "confirmed": c.confirmed, "file": str(path),
            "replay": f"splitlab fuzz --run-id {cluster.run_id} --replay {path}{sign_flag}",
            "indexes": indexes if len(indexes) <= 200 else indexes[:200] + "...",
            "datagrams": [{**{k: v for k, v in case.as_record().items() if k != "hex"},
                           "hex": case.data.hex(), "decoded": fuzzrecord.decoded(case, cid)}
                          for case in c.cases[:SHOWN_CULPRITS]]})
    return {"ok": outcome.ok, "run_id": cluster.run_id, "targets": targets, "sent": outcome.sent,
            "elapsed_s": round(outcome.elapsed_s, 3),
            "rate_per_s": round(outcome.sent / outcome.elapsed_s, 1) if outcome.elapsed_s else None,
            "spoofed": outcome.spoofed, "mutations": dict(sorted(outcome.mutations.items())),
            "checks": outcome.checks, "drops": outcome.drops, "layer_counters": outcome.layer_counters,
            "culprits": culprits, "record": str(record), "signed": bool(sign_flag),
            "pcap": str(record.with_suffix(".pcap")) if record.with_suffix(".pcap").exists() else None,
            "reproduce": again}
