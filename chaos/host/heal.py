"""The crash-safe heal of a run: undo everything its ledger lists (also after its controller died or its
containers went), end the open faults in the controller history and record the `heal`."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Mapping

from chaos.host.history import ControllerHistory
from chaos.host.ledger import Ledger
from chaos.wire import probe
from node.errors import EnvironmentProblem, UsageError

Log = Callable[[str], None]


def heal_run(run_dir: Path, run_id: str, log: Log = lambda _: None,
             endpoints: Callable[[], Mapping[str, probe.Endpoint] | None] | None = None,
             missing_ok: bool = False) -> int:
    """Undo everything the run's ledger lists, also when its controller died or its containers are gone.

    Restarts killed nodes and unpauses paused ones, removes chains, qdiscs and shapers; then ends the open
    faults in the history (`fault_end`) and records `heal` (nothing, when nothing was outstanding). With
    `endpoints` (called after the ledger is settled: the nodes' probe endpoints, None when the cluster is not
    running), `heal` carries `effective_ts`: when probes first passed between all nodes again. Returns the number of entries
    settled. Raises `UsageError` when the run has no ledger (unless `missing_ok`), `EnvironmentProblem` when an
    undo fails or the probes do not pass within 5 s.
    """
    ledger = Ledger(run_dir)
    if not ledger.path.exists():
        if missing_ok:
            return 0
        raise UsageError(f"run {run_id} has no ledger at {ledger.path}: nothing was applied to it",
                         hint="see 'splitlab ps'")
    report = ledger.heal()
    applied_ts = time.time()
    state = Path(run_dir) / "chaos" / "state.json"
    try:
        active = json.loads(state.read_text()).get("active", {})
    except FileNotFoundError:
        active = {}
    except (OSError, json.JSONDecodeError) as exc:
        raise EnvironmentProblem(f"cannot read the chaos state {state}: {exc}") from None
    if not report.settled and not active:
        return 0  # nothing was outstanding: no `heal` event, so the run's last heal stays the real one
    log(f"heal {run_id}: {len(report.settled)} entr{'y' if len(report.settled) == 1 else 'ies'} settled "
        f"({report.count('undone')} undone, {report.count('absent')} already absent, "
        f"{report.count('namespace-gone') + report.count('process-gone')} gone with their container)")
    effective_ts = None
    live = endpoints() if endpoints is not None else None
    if live:
        effective_ts = probe.wait_for(live, {(a, b): True for a in live for b in live if a != b})
        if effective_ts is None:
            raise EnvironmentProblem(f"run {run_id}: after heal, probes still do not pass between all nodes",
                                     hint="something outside splitlab's ledger cuts the data network")
    history = ControllerHistory(run_dir, run_id)
    for fault_id, info in active.items():
        history.emit("fault_end", fault_id=fault_id, kind=info["kind"], applied_ts=applied_ts,
                     effective_ts=effective_ts)
    state.unlink(missing_ok=True)
    history.emit("heal", applied_ts=applied_ts, effective_ts=effective_ts)
    return len(report.settled)
