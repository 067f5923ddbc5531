"""The controller side of the shaper: run one shaper process per node namespace and send that node's data
traffic toward the shaped peers to it, with everything recorded in the ledger before it happens.

Per node there are two ledger entries: the process (`shaper-proc`, ended by SIGTERM, which releases what it
holds) and the queue chain `SLQ-<run>` hooked into OUTPUT (`chaos.net.iptables.QUEUE`). The chain first lets
the shaper's own packets (bypass mark) through, then sends UDP toward each shaped peer's data address to the
queue with `--queue-bypass`, so traffic flows unshaped rather than stopping if the shaper is not there. Control
traffic goes to other addresses and is never queued.

On an IPv6 run (`splitlab up --ipv6`) the destinations are IPv6 addresses: the same chain is built with
ip6tables (`iptables.QUEUE6`, one more ledger entry of the group) and the IPv4 chain holds the bypass rule
alone; both are filled in one armed release.

A node on another host (a multi-host run) gets the same process in a container there (`chaos.net.shaper.remote`);
its queue chain is set over SSH like any chain of that host.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from chaos.host.ledger import Entry, Ledger, process_start_ticks
from chaos.host.netns import Netns, address_family, host_rule, in_netns
from chaos.hosts.remote import RemoteHost
from chaos.net import iptables
from chaos.net.shaper import remote
from chaos.net.shaper.spec import ShaperSpec
from node.errors import EnvironmentProblem

GROUP = iptables.QUEUE.group
START_TIMEOUT_S = 10.0
RELOAD_TIMEOUT_S = 5.0


def queue_rules(spec: ShaperSpec, family: int = 4) -> list[str]:
    """The queue chain's rules for `family`'s destinations: the shaper's own packets (bypass mark) pass, UDP
    toward each of the spec's destinations goes to the queue (`--queue-bypass`: unshaped rather than stopped
    when no shaper listens). IPv6: none at all when the spec has no IPv6 destination (no ip6tables chain)."""
    wanted = socket.AF_INET6 if family == 6 else socket.AF_INET
    ips = [ip for ip in spec.destinations if address_family(ip) == wanted]
    if family == 6 and not ips:
        return []
    return [f"-m mark --mark {spec.mark:#x} -j RETURN",
            *(f"-d {host_rule(ip)} -p udp -j NFQUEUE --queue-num {spec.queue_num} --queue-bypass" for ip in ips)]


def spec_path(run_dir: Path, node: str) -> Path:
    return Path(run_dir) / "chaos" / f"shaper-{node}.json"


def stats_path(run_dir: Path, node: str) -> Path:
    """Where the node's shaper writes its counters (JSON, at most once a second and when it ends)."""
    path = spec_path(run_dir, node)
    return path.with_name(path.name + ".stats")


def read_stats(run_dir: Path, node: str, host: RemoteHost | None = None) -> dict[str, Any]:
    """The counters the node's shaper wrote last ({} when it wrote none); fetched first from the node's `host`
    when it runs on another host. Raises `EnvironmentProblem`."""
    path = stats_path(run_dir, node)
    if host is not None:
        remote.fetch_stats(host, run_dir, spec_path(run_dir, node))
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as exc:  # written atomically, so a bad file is not a torn write
        raise EnvironmentProblem(f"cannot read the shaper's counters {path}: {exc}") from None


def send_failures(stats: dict[str, Any]) -> str | None:
    """What the shaper could not send (delayed packets' copies, duplicates, split or held messages), in one line
    with the reasons, or None when every packet of its own went."""
    failed = stats.get("extra_send_failed") or {}
    if not failed:
        return None
    total = sum(failed.values())
    reasons = ", ".join(f"{reason} x{count}" for reason, count in sorted(failed.items()))
    return (f"{total} of {total + stats.get('extra_sent', 0)} packets the shaper sends itself (delayed, duplicated, "
            f"split or held) were not sent: {reasons}")


def shaped_nodes(ledger: Ledger) -> set[str]:
    """The nodes whose shaper process the ledger holds."""
    return {e.node for e in ledger.outstanding(lambda e: e.key.startswith("shaper-proc:")) if e.node}


def _process_entry(ns: Netns, marker: str) -> Entry:
    return Entry(group=GROUP, key=f"shaper-proc:{ns.inode}", node=ns.node, pid=ns.pid, netns_ino=ns.inode,
                 what=f"NFQUEUE shaper process for {ns.node} (marker {marker}); undone by SIGTERM",
                 process={"marker": marker})


def running(ledger: Ledger, ns: Netns) -> Entry | None:
    """The outstanding shaper-process entry of `ns` whose process still runs, or None."""
    for entry in ledger.outstanding(lambda e: e.key == f"shaper-proc:{ns.inode}"):
        proc = entry.process or {}
        if proc.get("pid") and process_start_ticks(proc["pid"]) == proc.get("start_ticks"):
            return entry
    return None


def _start(ledger: Ledger, ns: Netns, path: Path) -> Entry:
    marker = uuid.uuid4().hex[:16]
    entry = ledger.record(_process_entry(ns, marker))
    if entry.process and entry.process.get("marker") != marker:  # a dead one's entry: settle it, record anew
        ledger.heal(lambda e: e.id == entry.id)
        entry = ledger.record(_process_entry(ns, marker))
    log_path = path.with_suffix(".log")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(in_netns(ns.pid, [sys.executable, "-m", "chaos.net.shaper", "--spec", str(path),
                                                  "--marker", marker]),
                                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    ledger.started(entry, proc.pid)
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
    line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
    proc.stdout.close()
    if not line.startswith("ready"):
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        tail = log_path.read_text(errors="replace")[-1500:] if log_path.exists() else ""
        raise EnvironmentProblem(f"the shaper for {ns.node} did not start within {START_TIMEOUT_S:g} s:\n{tail}",
                                 hint="'splitlab doctor' checks the kernel's NFQUEUE")
    return entry


def _reload(entry: Entry, path: Path, generation: int) -> None:
    gen_path = path.with_name(path.name + ".gen")
    os.kill(entry.process["pid"], signal.SIGHUP)
    deadline = time.monotonic() + RELOAD_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if int(gen_path.read_text() or 0) >= generation:
                return
        except (FileNotFoundError, ValueError):
            pass  # written atomically; a missing or empty file means "not yet"
        time.sleep(0.005)
    raise EnvironmentProblem(f"the shaper for {entry.node} did not load generation {generation} within "
                             f"{RELOAD_TIMEOUT_S:g} s", hint=f"see {path.with_suffix('.log')}")


def ensure(ledger: Ledger, ns: Netns, spec: ShaperSpec) -> None:
    """Make `ns`'s node shaped exactly as `spec` says: start or reload its shaper, then set its queue chain.

    Raises `EnvironmentProblem` when the shaper does not start or reload, `CommandFailed` when iptables refuses.
    """
    path = spec_path(ledger.run_dir, ns.node)
    if ns.remote is not None:
        remote.ensure(ledger, ns, spec, path)
    elif (entry := running(ledger, ns)) is None:
        spec.write(path)
        _start(ledger, ns, path)
    else:
        spec.generation = ShaperSpec.from_json(path.read_text()).generation + 1
        spec.write(path)
        _reload(entry, path, spec.generation)
    iptables.apply_kinds(ledger, spec.run_id, [(iptables.QUEUE, [(ns, queue_rules(spec))]),
                                               (iptables.QUEUE6, [(ns, queue_rules(spec, 6))])])


def stop(ledger: Ledger, node: str | None = None) -> int:
    """End the shaping of `node` (every node when None): chain first, then the process. Returns entries undone."""
    report = ledger.heal(lambda e: e.group == GROUP and (node is None or e.node == node))
    return len(report.settled)
