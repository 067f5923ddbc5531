"""Runs as root inside the netem VM (started by tests/netem_vm/init.sh, read by tests/cluster/test_netem_vm.py):
the netem backend's self-test, then its faults applied with `chaos.net.netem.apply` between three network
namespaces n1, n2, n3 on a bridge, measured from outside with `chaos.wire.probe` UDP probes (n1 -> n2 shaped,
n1 -> n3 the unshaped control), then `Ledger.heal`.

Writes RESULTS/result.json, rewritten after every check so that a crash or a timeout keeps what was measured:
{"kernel", "python", "finished", "total_s", "checks": {name: {"passed", "expected", "measured", "error",
"duration_s"}}}. Exits 0 when every check passed, 1 when one did not.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from chaos.wire import probe
from chaos.faults.grudge import LinkFault
from chaos.host.ledger import Ledger
from chaos.host.netns import Netns
from chaos.net import netem

NODES = {"n1": "10.77.0.1", "n2": "10.77.0.2", "n3": "10.77.0.3"}
PREFIX_LEN = 24
BRIDGE = "slbr0"
HOLD_S = 1800  # life of the sleeping process that holds each namespace; the VM is gone long before
NAMESPACE_READY_S = 10.0
REACHABLE_S = 10.0
SELF_TEST_TIMEOUT_S = 120
RESULT_FILE = "result.json"
VM_MARKER_ENV = "SPLITLAB_NETEM_VM"  # set by init.sh: never build the bridge in a real machine's namespace


@dataclass
class Outcome:
    """One check's verdict, what it expected (in words, with the thresholds) and what it measured."""

    passed: bool
    expected: str
    measured: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    duration_s: float = 0.0


@dataclass
class Lab:
    """The three namespaces (each held by a sleeping process), the ledger and the probe endpoints."""

    ledger: Ledger
    holders: dict[str, subprocess.Popen]
    ns: dict[str, Netns]
    eps: dict[str, probe.Endpoint]


def sh(argv: list[str], timeout_s: float = 30) -> str:
    """Run `argv`; its output, or RuntimeError naming the command and what it printed."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"'{' '.join(argv)}' failed with exit code {proc.returncode}: "
                           f"{(proc.stdout + proc.stderr).strip()}")
    return proc.stdout


def netns_inode(pid: int | str) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def make_lab(results: Path, holders: dict[str, subprocess.Popen]) -> Lab:
    """n1..n3: a network namespace each, held by an `unshare --net sleep` process (added to `holders` as it
    starts, so the caller ends it also when this fails), eth0 with its address, all on one bridge in the VM's
    own namespace; returns once every node reaches every other one."""
    sh(["ip", "link", "add", BRIDGE, "type", "bridge", "forward_delay", "0"])
    sh(["ip", "link", "set", BRIDGE, "up"])
    own = netns_inode("self")
    for name, ip in NODES.items():
        holder = holders[name] = subprocess.Popen(["unshare", "--net", "--", "sleep", str(HOLD_S)])
        deadline = time.monotonic() + NAMESPACE_READY_S
        while netns_inode(holder.pid) == own:
            if time.monotonic() > deadline or holder.poll() is not None:
                raise RuntimeError(f"'unshare --net sleep' for {name} (pid {holder.pid}) did not get a namespace "
                                   f"of its own within {NAMESPACE_READY_S:g} s")
            time.sleep(0.01)
        sh(["ip", "link", "add", f"v-{name}", "type", "veth", "peer", "name", "eth0", "netns", str(holder.pid)])
        sh(["ip", "link", "set", f"v-{name}", "master", BRIDGE, "up"])
        inside = ["nsenter", "-t", str(holder.pid), "-n"]
        sh([*inside, "ip", "link", "set", "lo", "up"])
        sh([*inside, "ip", "addr", "add", f"{ip}/{PREFIX_LEN}", "dev", "eth0"])
        sh([*inside, "ip", "link", "set", "eth0", "up"])
    lab = Lab(ledger=Ledger(results / "ledger"), holders=holders,
              ns={name: Netns(name, holders[name].pid) for name in NODES},
              eps={name: probe.Endpoint(name, holders[name].pid, ip) for name, ip in NODES.items()})
    every_pair = {(a, b): True for a in NODES for b in NODES if a != b}
    if probe.wait_for(lab.eps, every_pair, timeout_s=REACHABLE_S) is None:
        raise RuntimeError(f"the namespaces do not reach each other over {BRIDGE} within {REACHABLE_S:g} s: "
                           f"{probe.reachability(lab.eps, list(every_pair))}")
    return lab


def end_holders(holders: dict[str, subprocess.Popen]) -> None:
    for holder in holders.values():
        holder.kill()
        holder.wait()


def shape(lab: Lab, faults: dict[str, LinkFault], node: str = "n1") -> None:
    """`chaos.net.netem.apply` on `node` with faults keyed by peer name."""
    netem.apply(lab.ledger, lab.ns[node], NODES[node], {NODES[peer]: fault for peer, fault in faults.items()})


def measure(lab: Lab, src: str, dst: str, count: int, interval_ms: float) -> tuple[probe.LinkStats, dict]:
    """`count` probes src -> dst; the stats and their numbers for the JSON (stdev and the stream's wall time added)."""
    started_s = time.monotonic()
    stats = probe.measure(lab.eps[src], lab.eps[dst], count=count, interval_ms=interval_ms)
    stdev_ms = round(statistics.stdev(stats.delays_ms), 3) if len(stats.delays_ms) > 1 else None
    return stats, {**stats.as_dict(), "stdev_ms": stdev_ms, "interval_ms": interval_ms,
                   "elapsed_s": round(time.monotonic() - started_s, 2)}


def qdiscs(lab: Lab, node: str) -> str:
    return lab.ns[node].exec(["tc", "qdisc", "show"]).stdout


def leftovers(lab: Lab) -> list[str]:
    """htb/netem qdiscs in any namespace and outstanding ledger entries."""
    found = [f"{node}: {line.strip()}" for node in NODES for line in qdiscs(lab, node).splitlines()
             if "htb" in line or "netem" in line]
    return found + [f"ledger: {e.what} ({e.node})" for e in lab.ledger.outstanding()]


# --- the checks, in order ------------------------------------------------------------------------------------------
def check_self_test(_lab: Lab | None) -> Outcome:
    proc = subprocess.run(["unshare", "--net", sys.executable, "-m", "chaos.net.netem"], capture_output=True,
                          text=True, timeout=SELF_TEST_TIMEOUT_S)
    return Outcome(proc.returncode == 0, "'unshare --net python -m chaos.net.netem' (self_test: the whole tree, "
                   "every netem option) exits 0",
                   {"exit_code": proc.returncode, "output": (proc.stdout + proc.stderr).strip()})


def check_tree(lab: Lab) -> Outcome:
    shape(lab, {"n2": LinkFault(delay_ms=20, jitter_ms=5, distribution="normal", loss_pct=1)})
    shown = qdiscs(lab, "n1")
    filters = lab.ns["n1"].exec(["tc", "filter", "show", "dev", "eth0"]).stdout
    outstanding = [e.what for e in lab.ledger.outstanding()]
    ok = ("qdisc htb 1: dev eth0 root" in shown and "qdisc netem 10: dev eth0 parent 1:10" in shown
          and "delay 20ms  5ms" in shown and "loss 1%" in shown and "flowid 1:10" in filters
          and "match 0a4d0002/ffffffff at 16" in filters and "match 11000000/ff000000 at 9" in filters
          and len(outstanding) == 1)
    return Outcome(ok, "n1's eth0 has htb 1: root, netem 10: under 1:10 with 'delay 20ms  5ms' and 'loss 1%', a u32 "
                   "filter (dst 10.77.0.2, protocol 17) to flowid 1:10, and one outstanding ledger entry",
                   {"qdiscs": shown.strip(), "filters": filters.strip(), "ledger_outstanding": outstanding})


def check_loss(lab: Lab) -> Outcome:
    shape(lab, {"n2": LinkFault(loss_pct=10)})
    shaped, shaped_n = measure(lab, "n1", "n2", 5000, 0.4)
    control, control_n = measure(lab, "n1", "n3", 500, 0.4)
    ok = abs(shaped.loss_pct - 10) <= 2 and control.loss_pct == 0
    return Outcome(ok, "loss 10%: n1->n2 loss within 10 +- 2 % over 5000 probes; n1->n3 (unshaped) loses none",
                   {"n1->n2": shaped_n, "n1->n3": control_n})


def check_delay(lab: Lab) -> Outcome:
    shape(lab, {"n2": LinkFault(delay_ms=20)})
    shaped, shaped_n = measure(lab, "n1", "n2", 2000, 1)
    control, control_n = measure(lab, "n1", "n3", 500, 1)
    ok = abs(shaped.mean_delay_ms - 20) <= 2 and shaped.loss_pct == 0 and control.mean_delay_ms < 2
    return Outcome(ok, "delay 20ms: n1->n2 mean within 20 +- 2 ms, no loss; n1->n3 (unshaped) mean < 2 ms",
                   {"n1->n2": shaped_n, "n1->n3": control_n})


IQR_PER_SIGMA = 1.349  # a normal distribution's interquartile range, in sigmas


def check_jitter_normal(lab: Lab) -> Outcome:
    shape(lab, {"n2": LinkFault(delay_ms=20, jitter_ms=5, distribution="normal")})
    shaped, shaped_n = measure(lab, "n1", "n2", 2000, 1)
    control, control_n = measure(lab, "n1", "n3", 500, 1)
    # the spread as a normal distribution's sigma estimated from the interquartile range (IQR / 1.349): a guest
    # that qemu did not run for a moment (TCG, on a machine busy with the rest of the suite) delays a burst of
    # probes by tens of ms, which moves the standard deviation (9.2 ms in one such run, p99 85 ms) but not the
    # quartiles. The tail check tells normal from uniform (+-5 ms never reaches 28 ms).
    spread_ms = (shaped.percentile_ms(75) - shaped.percentile_ms(25)) / IQR_PER_SIGMA
    shaped_n["sigma_from_iqr_ms"] = round(spread_ms, 3)
    ok = (abs(shaped.mean_delay_ms - 20) <= 2 and 3.5 <= spread_ms <= 7 and shaped.percentile_ms(99) > 28
          and control.mean_delay_ms < 2)
    return Outcome(ok, "delay 20ms 5ms distribution normal: n1->n2 mean within 20 +- 2 ms, sigma (from the "
                   "interquartile range) 3.5..7 ms, p99 > 28 ms (a normal tail; uniform +-5 ms never reaches it); "
                   "n1->n3 mean < 2 ms",
                   {"n1->n2": shaped_n, "n1->n3": control_n})


def check_duplicate_reorder(lab: Lab) -> Outcome:
    shape(lab, {"n2": LinkFault(delay_ms=10, duplicate_pct=20, reorder_pct=25)})
    shaped, shaped_n = measure(lab, "n1", "n2", 2000, 0.5)
    control, control_n = measure(lab, "n1", "n3", 500, 0.5)
    ok = (300 <= shaped.duplicates <= 500 and shaped.reordered > 100 and shaped.loss_pct == 0
          and control.duplicates == 0 and control.reordered == 0)
    return Outcome(ok, "delay 10ms duplicate 20% reorder 25%: n1->n2 300..500 duplicates and > 100 reordered of 2000 "
                   "probes, no loss; n1->n3 neither duplicates nor reorders",
                   {"n1->n2": shaped_n, "n1->n3": control_n})


def check_heal(lab: Lab) -> Outcome:
    shape(lab, {"n2": LinkFault(delay_ms=20), "n3": LinkFault(loss_pct=50)})
    shape(lab, {"n1": LinkFault(delay_ms=20)}, node="n2")
    before = {"outstanding": len(lab.ledger.outstanding()),
              "n1_has_tree": "qdisc netem" in qdiscs(lab, "n1"), "n2_has_tree": "qdisc netem" in qdiscs(lab, "n2")}
    report = lab.ledger.heal()
    left = leftovers(lab)
    _, after_n = measure(lab, "n1", "n2", 300, 1)
    ok = (before == {"outstanding": 2, "n1_has_tree": True, "n2_has_tree": True} and report.count("undone") == 2
          and not left and after_n["loss_pct"] == 0 and after_n["mean_delay_ms"] < 2)
    return Outcome(ok, "with netem trees on n1 (2 leaves) and n2, ledger.heal() undoes both entries; then no htb or "
                   "netem qdisc in any namespace, no outstanding ledger entry, and n1->n2 is plain again (< 2 ms)",
                   {"before": before, "heal_settled": report.settled, "leftovers": left, "n1->n2 after": after_n})


CHECKS: list[tuple[str, Callable[[Lab | None], Outcome]]] = [
    ("netem_tree", check_tree), ("loss", check_loss), ("delay", check_delay), ("jitter_normal", check_jitter_normal),
    ("duplicate_reorder", check_duplicate_reorder), ("heal", check_heal)]


def run_check(name: str, fn: Callable[[Lab | None], Outcome], lab: Lab | None) -> Outcome:
    """One check, never raising: an exception is its failure, with the traceback; every fault is healed after."""
    started_s = time.monotonic()
    try:
        outcome = fn(lab)
    except Exception as exc:  # noqa: BLE001 -- a broken check fails itself, the others still run
        outcome = Outcome(False, "", error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    try:
        if lab is not None:
            lab.ledger.heal()
    except Exception as exc:  # noqa: BLE001 -- a failed heal fails the check it follows
        outcome.passed = False
        outcome.error = (outcome.error or "") + f"\nheal after {name} failed: {type(exc).__name__}: {exc}"
    outcome.duration_s = round(time.monotonic() - started_s, 2)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, required=True, help="directory for result.json and the ledger")
    args = parser.parse_args(argv)
    if os.environ.get(VM_MARKER_ENV) != "1":
        print(f"guest_check.py: error: {VM_MARKER_ENV}=1 is not set: this runs only inside the netem VM "
              "(tests/netem_vm/init.sh), where it may add a bridge and namespaces", file=sys.stderr)
        return 2
    started_s = time.monotonic()
    doc: dict[str, Any] = {"kernel": platform.release(), "python": platform.python_version(), "finished": False,
                           "checks": {}}

    def save() -> None:
        doc["total_s"] = round(time.monotonic() - started_s, 2)
        tmp = args.results / (RESULT_FILE + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(args.results / RESULT_FILE)

    def record(name: str, outcome: Outcome) -> None:
        doc["checks"][name] = vars(outcome)
        verdict = "ok" if outcome.passed else "FAILED"
        print(f"splitlab-guest: {name}: {verdict} in {outcome.duration_s:g} s: "
              f"{json.dumps(outcome.measured)[:600]}{' error: ' + outcome.error if outcome.error else ''}", flush=True)
        save()

    record("self_test", run_check("self_test", check_self_test, None))
    holders: dict[str, subprocess.Popen] = {}
    try:
        try:
            lab = make_lab(args.results, holders)
        except Exception as exc:  # noqa: BLE001 -- without the namespaces no check can run: say why in the results
            record("namespaces", Outcome(False, "three namespaces on a bridge reach each other",
                                         error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
            return 1
        for name, fn in CHECKS:
            record(name, run_check(name, fn, lab))
    finally:
        end_holders(holders)
    doc["finished"] = True
    save()
    return 0 if all(c["passed"] for c in doc["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
