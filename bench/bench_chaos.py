"""The chaos controller: partition apply and heal time for 3, 5 and 10 nodes (target <= 50 ms for 5) and the
skew of the cut and of the heal across the nodes (goal <= 1 ms), read from probe traffic, next to the spine's
original per-node commands; the NFQUEUE shaper's (and, where the kernel has it, netem's) throughput and delay
error at 10 ms next to unshaped traffic; all measured in the same run on the same containers."""
from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from chaos.cluster import lifecycle as cluster
from chaos.faults import grudge
from chaos.net import iptables, partition
from chaos.wire import cutwatch, probe
from chaos.host.ledger import Ledger
from chaos.net.docker import DockerNet
from chaos.net.backends import capabilities
from node.errors import EnvironmentProblem

DELAY_MS = 10.0
THROUGHPUT_SETTLE_MS = 2000.0  # a backlog's late arrivals are waited for


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def _in_parallel(fn, items) -> None:
    with ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
        for fut in [pool.submit(fn, *item) for item in items]:
            fut.result()


def _spine_apply(run_id: str, cut, namespaces, ips) -> None:
    """The baseline: the spine's original per-node commands (a restore, then check and insert the hook), no
    ledger, every node visited."""
    chain = iptables.PARTITION.name(run_id)

    def one(node: str, ns) -> None:
        rules = partition.drop_rules(ips[s] for s in cut.get(node, ()))
        ns.exec(iptables.RESTORE, input_text=iptables.restore_input(chain, rules))
        if ns.exec(["iptables", "-w", "-C", "INPUT", "-j", chain], check=False).returncode != 0:
            ns.exec(["iptables", "-w", "-I", "INPUT", "1", "-j", chain])

    _in_parallel(one, list(namespaces.items()))


def _spine_heal(run_id: str, namespaces) -> None:
    """The baseline's heal: unhook until no hook is left, then flush and delete the chain, per node."""
    chain = iptables.PARTITION.name(run_id)

    def one(ns) -> None:
        while ns.exec(["iptables", "-w", "-D", "INPUT", "-j", chain], check=False).returncode == 0:
            pass
        if ns.exec(["iptables", "-w", "-F", chain], check=False).returncode == 0:
            ns.exec(["iptables", "-w", "-X", chain])

    _in_parallel(one, [(ns,) for ns in namespaces.values()])


def _partition_rows(count: int, rounds: int) -> list[dict]:
    run = cluster.up(count)
    try:
        namespaces = cluster.namespaces(run)
        ips = {n.name: n.data_ip for n in run.nodes}
        cut = grudge.bisect(run.names)
        ledger = Ledger(run.run_dir)
        bridge = partition.data_bridge(cluster.data_bridge_name(run.run_id), ipv6=False)  # as DockerNet takes it
        ours_apply, ours_heal, old_apply, old_heal = [], [], [], []
        for _ in range(rounds):
            ours_apply.append(_timed(lambda: partition.apply(ledger, run.run_id, cut, namespaces, ips,
                                                             bridge=bridge)))
            ours_heal.append(_timed(lambda: partition.heal(ledger, run.run_id)))
            old_apply.append(_timed(lambda: _spine_apply(run.run_id, cut, namespaces, ips)))
            old_heal.append(_timed(lambda: _spine_heal(run.run_id, namespaces)))
        eps = {n.name: probe.Endpoint(n.name, n.pid, n.data_ip) for n in run.nodes}
        streams = [(eps[min(cut[node])], eps[node]) for node in sorted(cut) if cut[node]]
        ours_watch, old_watch, ours_heal_watch, old_heal_watch = [], [], [], []
        for _ in range(rounds):
            ours_watch.append(cutwatch.watch(streams, lambda: partition.apply(ledger, run.run_id, cut, namespaces,
                                                                              ips, bridge=bridge)))
            ours_heal_watch.append(cutwatch.watch(streams, lambda: partition.heal(ledger, run.run_id)))
            old_watch.append(cutwatch.watch(streams, lambda: _spine_apply(run.run_id, cut, namespaces, ips)))
            old_heal_watch.append(cutwatch.watch(streams, lambda: _spine_heal(run.run_id, namespaces)))
    finally:
        Ledger(run.run_dir).heal()
        cluster.down(run.run_id)
    where = f"one commit on the run's bridge {bridge.name}" if bridge else "one iptables-restore per node"
    rows = [_skew_row(count, streams, ours_watch, old_watch, where),
            _skew_row(count, streams, ours_heal_watch, old_heal_watch, where, "healed")]
    for what, ours, old in (("apply", ours_apply, old_apply), ("heal", ours_heal, old_heal)):
        value, base = statistics.median(ours), statistics.median(old)
        target = "; target <= 50 ms" if count == 5 else ""
        rows.append({"name": f"partition {what}, {count} nodes (bisect)", "value": value, "unit": "ms",
                     "baseline": base, "ratio": value / base, "better": "lower",
                     "note": f"ledger + {where}; baseline: the spine's per-node commands, no ledger; median of "
                             f"{rounds}{target}"})
    return rows


def _skew_row(count: int, streams: list, ours: list[cutwatch.Watch], old: list[cutwatch.Watch], where: str,
              kind: str = "cut") -> dict:
    """The spread of the cut (or, `kind` "healed", of the heal) across the nodes, read from probe streams
    (chaos.wire.cutwatch), ours and the baseline's; a round where a stream did not switch is a failed
    measurement, not a fast one."""
    what = "partition skew" if kind == "cut" else "heal skew"
    for w in ours + old:
        if len(w.switches) != len(streams) or any(s.kind != kind for s in w.switches):
            raise EnvironmentProblem(f"{what}, {count} nodes: {len(streams)} streams should each have "
                                     f"{kind} once; the watch saw {w.switches} and unswitched {w.unswitched}")
    lag = statistics.median(w.lag_s for w in ours) * 1000
    resolution = statistics.median(w.resolution_s for w in ours) * 1000
    # below the probes' resolution a skew is noise: it is printed (and compared) as the resolution
    measured = statistics.median(w.skew_s for w in ours) * 1000
    value = max(measured, resolution)
    base = max(statistics.median(w.skew_s for w in old) * 1000, resolution)
    within = f" (measured {measured:.3f} ms: within the resolution)" if measured < resolution else ""
    return {"name": f"{what}, {count} nodes (bisect)", "value": value, "unit": "ms", "baseline": base,
            "ratio": value / base, "better": "lower",
            "note": f"{where}: first to last node's switch{within}, from one probe stream into each cut node "
                    f"(resolution {resolution:.2f} ms); last switch {lag:.1f} ms after the change began; baseline: "
                    f"the spine's per-node commands; median of {len(ours)}"}


def _throughput(src: probe.Endpoint, dst: probe.Endpoint, count: int) -> float:
    """Packets per second delivered when `count` probes are sent back to back: from the first send to the last
    arrival (a shaper slower than the sender delivers its backlog late; it counts, at the rate it came)."""
    return probe.measure(src, dst, count=count, interval_ms=0.0, settle_ms=THROUGHPUT_SETTLE_MS).delivered_pps


def _backend_rows(backend: str, shaped_pps: float, shaped: probe.LinkStats, plain_pps: float,
                  plain: probe.LinkStats, count: int) -> list[dict]:
    errors = [abs(d - DELAY_MS) for d in shaped.delays_ms]
    rows = [{"name": f"{backend} throughput at {DELAY_MS:g} ms delay", "value": shaped_pps, "unit": "pkt/s",
             "baseline": plain_pps, "ratio": shaped_pps / plain_pps, "better": "higher",
             "note": f"{count} probes back to back from one namespace; baseline: the same, unshaped link"}]
    for pct in (50, 99):
        value, base = probe.percentile(errors, pct), plain.percentile_ms(pct)
        rows.append({"name": f"{backend} delay error p{pct} at {DELAY_MS:g} ms", "value": value, "unit": "ms",
                     "baseline": base, "ratio": value / base if base else None, "better": "lower",
                     "note": f"|one-way delay - {DELAY_MS:g} ms| at 1000 pkt/s; baseline: p{pct} one-way "
                             f"latency of the unshaped link (the probe's own error); mean "
                             f"{shaped.mean_delay_ms:.2f} ms"})
    return rows


def _shaper_rows(quick: bool) -> list[dict]:
    """The NFQUEUE shaper and, where the kernel has it, netem, on the same link of the same run."""
    caps = capabilities()
    run = cluster.up(3)
    count = 3000 if quick else 20000
    rows: list[dict] = []
    try:
        eps = {n.name: probe.Endpoint(n.name, n.pid, n.data_ip) for n in run.nodes}
        plain_pps = _throughput(eps["n1"], eps["n3"], count)
        plain = probe.measure(eps["n1"], eps["n3"], count=2000, interval_ms=1)
        for backend in ("nfqueue", "netem"):
            if not caps[backend][0]:
                rows.append({"name": f"{backend} throughput at {DELAY_MS:g} ms delay", "value": None, "unit": "pkt/s",
                             "baseline": plain_pps, "ratio": None, "better": "higher",
                             "note": f"not available here: {caps[backend][1]}"})
                continue
            with DockerNet(run, seed=1, verify=False, backend=backend) as net:
                # a queue deep enough for the unpaced probes (~80k pkt/s x 10 ms): the row measures throughput,
                # not netem's default limit of 1000 packets
                net.slow(DELAY_MS, links=[("n1", "n2")], limit_pkts=10_000)
                shaped_pps = _throughput(eps["n1"], eps["n2"], count)
                shaped = probe.measure(eps["n1"], eps["n2"], count=2000, interval_ms=1)
            rows += _backend_rows(backend, shaped_pps, shaped, plain_pps, plain, count)
    finally:
        Ledger(run.run_dir).heal()
        cluster.down(run.run_id)
    return rows


def run(quick: bool) -> list[dict]:
    rows = []
    for count in ((3, 5) if quick else (3, 5, 10)):
        rows += _partition_rows(count, 3 if quick else 7)
    return rows + _shaper_rows(quick)
