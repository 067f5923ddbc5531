"""The network-fault interface of one run: verbs in pairs, backends chosen by probing the kernel.

    partition(grudge) / heal()          iptables drops on the receivers' INPUT (chaos.net.partition); jammed
                                        (jam=Jam(...)): held by the senders' shapers, released at the heal
    slow(delay_ms, jitter_ms) / fast()  link faults on the senders' data traffic toward given peers
    flaky(loss_pct)                     (fast() also ends flaky, shape and message faults)
    shape(link_matrix)                  the whole per-link matrix at once
    msg_fault(rule)                     protocol-aware faults on one message type (NFQUEUE shaper)
    pause(node) / resume(node)          docker pause (cgroup freezer) or SIGSTOP/SIGCONT
    kill(node) / start(node)            docker kill (SIGKILL) / docker start
    restart(node)                       kill, then start at once (faults re-applied to the new namespace)
    heal_all()                          undo everything the ledger lists (also what other processes applied)

Link-fault backends: `netem` (tc, where sch_netem exists), else `nfqueue` (the userspace shaper), else
`iptables` (statistic loss; pure loss only). `backend=` forces one; every verb logs which one served it.
Everything applied is recorded in the run's ledger first (chaos.host.ledger); the link state lives in
`runs/<run>/chaos/state.json` so that separate CLI invocations compose (slow, then flaky, keeps both).
Faults are scoped to data-network addresses: the control network is never shaped or cut.

Every verb appends `fault_start` (and its pair `fault_end`; `heal_all` a `heal`) to
`runs/<run>/events/controller.jsonl` with `applied_ts` and, for partitions and heals, `effective_ts`: when UDP
probes between the namespaces first saw the change in effect. One `seed` drives every random choice (shaper
RNGs, random topologies).

On a multi-host run every verb acts on the node's host, over SSH: rules through iptables there, the shaper as a
container of the agent image in the node's namespace (chaos.net.shaper.remote), docker pause/kill/start by
that host's engine, injection, replay and capture by the wire agent there (chaos.wire.remote); the ledger
entries name the host. Probes need a socket of this process in the namespace: a multi-host fault has no
`effective_ts`.

On the authenticated wire (`splitlab up --auth`) the run's key (chaos.cluster.authkey) goes into every shaper's
spec, so what a message rule rewrites is signed again, and `inject` and `replay` sign with it when asked
(`sign=True`); without it the nodes drop what they send as `unauthenticated`.

Used as a context manager, `Net` heals everything on exit.
"""
from __future__ import annotations

import json
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from chaos.cluster import authkey, lifecycle as clusters
from chaos.faults import grudge as grudges
from chaos.net import partition
from chaos.net.base import WallClock
from chaos.net.backends import BACKENDS, capabilities, choose_backend, remote_capabilities
from chaos.wire import probe
from chaos.faults.grudge import Grudge, Jam, LinkFault, LinkMatrix
from chaos.host.heal import heal_run
from chaos.host.history import ControllerHistory
from chaos.host.ledger import Entry, Ledger, namespace_gone
from chaos.host.netns import Netns
from chaos.host.proc import run
from chaos.hosts.remote import RemoteHost, closing, run_hosts
from chaos.net.shaper import control as shaper_control
from chaos.net import lease, netem, statloss
from chaos.faults.msgrules import MsgRule
from chaos.net.shaper.spec import ShaperSpec, derive_seed
from chaos.cluster.client import NodeClient
from chaos.cluster.model import NodeInfo
from node.errors import EnvironmentProblem, UsageError
from node.wire import cluster_id_of, sign as sign_datagram

LINK_GROUPS = (shaper_control.GROUP, netem.GROUP, statloss.GROUP)
PROCESS_GROUP = "process"
Log = Callable[[str], None]


class DockerNet:
    """Network and process faults on one running cluster (the `chaos.net.base.Net` of containers). See the module
    docstring."""

    backend = "docker"

    def __init__(self, cluster: clusters.Cluster, *, seed: int = 0, backend: str | None = None,
                 log: Log = lambda _: None, verify: bool = True) -> None:
        if backend is not None and backend not in BACKENDS:
            raise UsageError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
        self.cluster = cluster
        self.run_id = cluster.run_id
        self.seed = seed
        self.rng = random.Random(derive_seed(seed, "topologies"))
        self.link_backend = backend  # a forced link-fault backend (None: probed)
        self.log = log
        self.verify = verify
        self.ledger = Ledger(cluster.run_dir)
        self.history = ControllerHistory(cluster.run_dir, self.run_id)
        self.run_dir = cluster.run_dir
        self.cluster_id = cluster_id_of(self.run_id)
        self.auth_key = authkey.read(cluster.run_dir)  # None: the open wire
        self.state_path = cluster.run_dir / "chaos" / "state.json"
        self.leases = lease.Renewer(cluster.run_dir)
        self.end_reason: str | None = None  # said in the `fault_end` of faults ended for a reason (a lease)
        self._namespaces: dict[str, Netns] | None = None
        self._hosts: dict[str, RemoteHost] | None = None
        self._load_state()

    # --- state ------------------------------------------------------------------------------------------------
    def _load_state(self) -> None:
        self.grudge: Grudge = {}
        self.jam: Jam | None = None  # set while the partition `grudge` is jammed rather than dropped
        self.links: dict[tuple[str, str], tuple[LinkFault, str]] = {}
        self.rules: list[MsgRule] = []
        self.active: dict[str, dict[str, Any]] = {}  # fault_id -> {kind, detail}
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return
        except (OSError, json.JSONDecodeError) as exc:
            raise EnvironmentProblem(f"cannot read the chaos state {self.state_path}: {exc}",
                                     hint="'splitlab heal' removes every fault and the state") from None
        applied = {e.group for e in self.ledger.outstanding()}
        if partition.GROUP in applied:
            self.grudge = {k: frozenset(v) for k, v in data.get("grudge", {}).items()}
        if applied & set(LINK_GROUPS):
            self.links = {(s, d): (LinkFault(**f), b) for s, d, f, b in data.get("links", [])}
            self.rules = [MsgRule(**r) for r in data.get("rules", [])]
        if shaper_control.GROUP in applied and data.get("jam"):
            self.jam = Jam(**data["jam"])
            self.grudge = {k: frozenset(v) for k, v in data.get("grudge", {}).items()}
        self.active = data.get("active", {}) if applied else {}

    def _save_state(self) -> None:
        data = {"grudge": {k: sorted(v) for k, v in self.grudge.items()},
                "jam": self.jam.as_dict() if self.jam else None,
                "links": [[s, d, f.as_dict(), b] for (s, d), (f, b) in sorted(self.links.items())],
                "rules": [asdict(r) for r in self.rules], "active": self.active}
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.state_path)

    @property
    def nodes(self) -> list[str]:
        return self.cluster.names

    @property
    def namespaces(self) -> dict[str, Netns]:
        if self._namespaces is None:
            self._namespaces = clusters.namespaces(self.cluster, self.hosts)
        return self._namespaces

    @property
    def hosts(self) -> dict[str, RemoteHost]:
        """The hosts of a multi-host run (connected on first use, closed by `close`); {} on one machine."""
        if self._hosts is None:
            self._hosts = run_hosts(self.run_dir)
        return self._hosts

    def _runner(self, node: str) -> Callable[..., Any]:
        """What runs a command on `node`'s host: `proc.run` here, over SSH for a node on another host."""
        host = self.cluster.node(node).host
        return self.hosts[host].run if host else run

    def client(self, node: str) -> NodeClient:
        """The control-API client of `node` (its current container, also after a restart)."""
        return self.cluster.client(node)

    def node_state(self, node: str) -> dict[str, Any] | None:
        """`node`'s /state, None when it does not answer (down, paused or restarting)."""
        try:
            return self.cluster.client(node).state()
        except EnvironmentProblem:
            return None

    def record(self, type_: str, **fields: Any) -> None:
        """Append an event to the run's controller history."""
        self.history.emit(type_, **fields)

    def is_active(self, fault_id: str) -> bool:
        return fault_id in self.active

    def clock(self, wait: Callable[[float, str], None]) -> WallClock:
        return WallClock(wait, self.log)

    def _partition_apply(self, grudge: Grudge) -> None:
        """`partition.apply` on both families of a dual-stack run, on IPv4 alone otherwise; on the run's bridge
        when it can carry the cuts (`partition.data_bridge`: one commit for every node), else in the nodes'
        namespaces."""
        partition.apply(self.ledger, self.run_id, grudge, self.namespaces,
                        {n.name: n.data_ip for n in self.cluster.nodes},
                        {n.name: n.data_ip6 for n in self.cluster.nodes} if self.cluster.ipv6 else None,
                        bridge=self._bridge)

    @cached_property
    def _bridge(self) -> partition.DataBridge | None:
        if self.multi_host:
            return None
        return partition.data_bridge(clusters.data_bridge_name(self.run_id), self.cluster.ipv6)

    def _refresh(self) -> None:
        """Re-read the nodes (a restarted container has a new PID, namespace and maybe address)."""
        self.cluster = clusters.Cluster(self.run_id, self.cluster.run_dir, self.cluster.token,
                                        clusters.load(self.run_id).nodes)
        self._namespaces = None

    @property
    def multi_host(self) -> bool:
        return any(n.host for n in self.cluster.nodes)

    def _caps(self) -> dict[str, tuple[bool, str]]:
        """The link-fault backends of where the nodes run; on an IPv6 run the NFQUEUE shaper alone (netem's u32
        filters and the statistic-loss chain match IPv4 addresses)."""
        caps = dict(remote_capabilities() if self.multi_host else capabilities())
        if self.cluster.ipv6:
            caps.update({b: (False, "not on IPv6 runs yet (splitlab up --ipv6): the NFQUEUE shaper serves them")
                         for b in ("netem", "iptables")})
        return caps

    # --- events -----------------------------------------------------------------------------------------------
    def _start_fault(self, kind: str, detail: dict[str, Any], applied_ts: float, effective_ts: float | None) -> str:
        fault_id = f"{kind}-{uuid.uuid4().hex[:8]}"
        self.active[fault_id] = {"kind": kind, "detail": detail, "applied_ts": applied_ts}
        self._save_state()
        self.history.emit("fault_start", fault_id=fault_id, kind=kind, detail=detail, applied_ts=applied_ts,
                          effective_ts=effective_ts)
        return fault_id

    def _end_faults(self, kinds: Iterable[str], applied_ts: float, effective_ts: float | None,
                    only: Callable[[dict[str, Any]], bool] = lambda _: True,
                    detail: Mapping[str, Any] | None = None) -> None:
        """Record the end of every open fault of `kinds` that `only` picks, with `detail` when given."""
        kinds = set(kinds)
        extra = {"detail": dict(detail)} if detail else {}
        for fault_id, info in list(self.active.items()):
            if info["kind"] in kinds and only(info):
                del self.active[fault_id]
                self.leases.end(fault_id)
                reason = {"reason": self.end_reason} if self.end_reason else {}
                self.history.emit("fault_end", fault_id=fault_id, kind=info["kind"], applied_ts=applied_ts,
                                  effective_ts=effective_ts, **reason, **extra)
        self._save_state()

    # --- leases -----------------------------------------------------------------------------------------------
    def lease(self, fault_id: str, ttl_s: float) -> None:
        """Give the open fault `fault_id` a lease of `ttl_s`: this process renews it while it lives; a watchdog in
        the namespace of the fault's first node ends the fault when nobody renewed it for `ttl_s`
        (chaos.net.lease). Raises `UsageError` for a bad TTL or a fault that is not open."""
        ttl_s = lease.check_ttl(ttl_s)
        info = self.active.get(fault_id)
        if info is None:
            raise UsageError(f"no open fault {fault_id!r} to lease")
        named = {n for link in grudges.fault_links(info["kind"], info["detail"]) for n in link if n in self.nodes}
        node = min(named, key=self.nodes.index) if named else self.nodes[0]
        self.leases.add(fault_id, ttl_s)
        lease.start_watchdog(self.ledger, self.run_id, fault_id, self.namespaces[node])
        self.log(f"{fault_id}: lease of {ttl_s:g} s, renewed while this controller runs (watchdog in {node}'s "
                 f"namespace)")

    def end_fault(self, fault_id: str, reason: str | None = None) -> bool:
        """End the open fault `fault_id` as its pair verb does (a partition healed, the links and the rule it set
        removed, a paused node resumed, a killed one started), its `fault_end` saying `reason`. Returns False when
        it is not open."""
        info = self.active.get(fault_id)
        if info is None:
            return False
        kind, detail = info["kind"], info["detail"]
        self.end_reason = reason
        try:
            if kind == "partition":
                self.heal()
            elif kind in ("slow", "flaky", "shape"):
                gone = set(grudges.fault_links(kind, detail))
                self.end_links(fault_id, {pair: f for pair, (f, _) in self.links.items() if pair not in gone})
            elif kind == "msg_fault":
                self.end_rule(fault_id, MsgRule(**detail))
            elif kind == "pause":
                self.resume(detail["node"])
            elif kind == "kill":
                self.start(detail["node"])
            else:
                self._end_one(fault_id)
        finally:
            self.end_reason = None
        return True

    # --- partitions -------------------------------------------------------------------------------------------
    def _expected_reach(self, grudge: Mapping[str, Iterable[str]]) -> dict[tuple[str, str], bool]:
        cut = grudges.cut_links(grudge)
        return {(a, b): (a, b) not in cut for a in self.nodes for b in self.nodes if a != b}

    def _effective(self, expected: dict[tuple[str, str], bool]) -> float | None:
        if not self.verify or any(n.host for n in self.cluster.nodes):
            return None  # probes reach only nodes on this machine: a multi-host fault is not verified by them
        when = None
        for family in ([False, True] if self.cluster.ipv6 else [False]):  # a dual-stack run: both families
            endpoints = probe_endpoints(self.cluster, ipv6=family)
            when = probe.wait_for(endpoints, expected)
            if when is None:
                bad = {p for p, ok in probe.reachability(endpoints, list(expected)).items() if ok != expected[p]}
                raise EnvironmentProblem(f"run {self.run_id}: the network did not reach the intended state within "
                                         f"5 s; {'IPv6' if family else 'IPv4'} probes disagree on "
                                         f"{', '.join(f'{a}->{b}' for a, b in sorted(bad))}",
                                         hint="'splitlab heal' removes every fault")
        return when

    def partition(self, grudge: Mapping[str, Iterable[str]] | str, jam: Jam | None = None) -> str:
        """Cut the data traffic a grudge names (a string is parsed by `chaos.faults.grudge.parse_grudge`); replaces
        the current partition. With `jam`, what crosses the cut is held by the senders' shapers instead of
        dropped, and released at the heal (a jam replaced by another partition is released when it is replaced).
        Returns the fault id. Raises `UsageError` for a bad grudge, `EnvironmentProblem` for a jam without
        NFQUEUE."""
        if isinstance(grudge, str):
            grudge = grudges.parse_grudge(grudge, self.nodes, self.rng)
        grudges.check_grudge(grudge, self.nodes)
        grudge = grudges.union(grudge)
        if jam is not None and not (caps := self._caps())["nfqueue"][0]:
            raise EnvironmentProblem(f"a jammed partition needs NFQUEUE: {caps['nfqueue'][1]}")
        old_grudge, old_jam = self.grudge, self.jam
        if jam is None:  # the drops first, so that nothing slips through before an old jam lets go
            self._partition_apply(grudge)
        if jam is not None or self.jam is not None:
            self.grudge, self.jam = grudge, jam
            try:
                self._apply_links()
            except BaseException:
                self.grudge, self.jam = old_grudge, old_jam
                raise
        lifted = self._jam_lifted(old_grudge) if old_jam is not None else None
        if jam is not None:  # the jam holds before old drops go
            self._partition_apply({})
        applied_ts = time.time()
        self.grudge = grudge
        effective_ts = self._effective(self._expected_reach(grudge))
        self.log(f"partition {grudges.describe(grudge)}: "
                 + (f"{jam.describe()} (NFQUEUE shapers of the senders)" if jam else "backend iptables"))
        self._end_faults(["partition"], applied_ts, effective_ts, detail=grudges.jam_end_detail(lifted))
        return self._start_fault("partition", grudges.partition_detail(grudge, jam), applied_ts, effective_ts)

    def heal(self) -> None:
        """End the partition (link faults stay: that is `fast`); what a jammed one held goes on now."""
        partition.heal(self.ledger, self.run_id)
        old_grudge, lifted = self.grudge, None
        if self.jam is not None:
            self.grudge, self.jam = {}, None
            self._apply_links()
            lifted = self._jam_lifted(old_grudge)
        applied_ts = time.time()
        self.grudge = {}
        effective_ts = self._effective(self._expected_reach({}))
        self.log("heal: partition removed" + (f"; the jam held {lifted['held']} packet(s): {lifted['released']} "
                                              f"released, {lifted['dropped']} dropped by its cap" if lifted else ""))
        self._end_faults(["partition"], applied_ts, effective_ts, detail=grudges.jam_end_detail(lifted))

    def _jam_lifted(self, grudge: Grudge) -> dict[str, int]:
        """What the jam of `grudge` did (`node.sim.jam.outcome`, summed), from the counters its senders' shapers
        wrote as they lifted it just now: a shaper's `jam_lift` counts when it is of its current generation."""
        total = {"held": 0, "released": 0, "dropped": 0}
        for node in sorted({src for src, _ in grudges.cut_links(grudge)}):
            host = self.hosts[self.cluster.node(node).host] if self.multi_host else None
            stats = shaper_control.read_stats(self.cluster.run_dir, node, host)
            lift = stats.get("jam_lift") or {}
            if lift.get("generation") == stats.get("generation"):
                for key in total:
                    total[key] += int(lift.get(key, 0))
        return total

    # --- link faults ------------------------------------------------------------------------------------------
    def _scope(self, links: Iterable[tuple[str, str]] | None) -> list[tuple[str, str]]:
        pairs = list(links) if links is not None else grudges.all_links(self.nodes)
        grudges.check_matrix({p: LinkFault() for p in pairs}, self.nodes)
        if not pairs:
            raise UsageError("no link selected")
        return pairs

    def _apply_links(self) -> dict[str, str]:
        """Make every node's backends hold exactly `self.links` and `self.rules`; returns node -> backends used.
        On an IPv6 run the faults match the peers' IPv6 addresses, and only the NFQUEUE shaper serves them
        (`_caps`)."""
        caps = self._caps()
        ips = {n.name: n.wire_ip for n in self.cluster.nodes}
        per: dict[str, dict[str, dict[str, LinkFault]]] = {b: {n: {} for n in self.nodes} for b in BACKENDS}
        for (src, dst), (fault, backend) in self.links.items():
            per[backend][src][ips[dst]] = fault
        rules_of = {n: [r for r in self.rules if r.src == n] for n in self.nodes}
        if self.rules and not caps["nfqueue"][0]:
            raise EnvironmentProblem(f"message faults need NFQUEUE: {caps['nfqueue'][1]}")
        jams_of: dict[str, dict[str, Jam]] = {n: {} for n in self.nodes}
        if self.jam is not None:  # a dual-stack run's jam holds both families, as its drops would
            for src, dst in grudges.cut_links(self.grudge):
                for ip in {ips[dst], self.cluster.node(dst).data_ip}:
                    jams_of[src][ip] = self.jam
        outstanding = {e.group + ":" + (e.node or "") for e in self.ledger.outstanding()}

        def one(node: str) -> None:
            ns = self.namespaces[node]
            if per["nfqueue"][node] or rules_of[node] or jams_of[node]:
                spec = ShaperSpec(self.run_id, node, seed=derive_seed(self.seed, "shaper", node),
                                  links=per["nfqueue"][node], rules=rules_of[node], jams=jams_of[node],
                                  names={ip: name for name, ip in ips.items()},
                                  auth_key=self.auth_key.hex() if self.auth_key else "")
                shaper_control.ensure(self.ledger, ns, spec)
            elif f"{shaper_control.GROUP}:{node}" in outstanding:
                shaper_control.stop(self.ledger, node)
                self._report_shapers({node})
            if per["netem"][node] or f"{netem.GROUP}:{node}" in outstanding:
                netem.apply(self.ledger, ns, ips[node], per["netem"][node])
            if per["iptables"][node] or f"{statloss.GROUP}:{node}" in outstanding:
                statloss.apply(self.ledger, self.run_id, ns,
                               {ip: f.loss_pct for ip, f in per["iptables"][node].items()})

        with ThreadPoolExecutor(max_workers=max(1, len(self.nodes))) as pool:
            for fut in [pool.submit(one, n) for n in self.nodes]:
                fut.result()
        self._save_state()
        return {n: ",".join(b for b in BACKENDS if per[b][n]) + (" +rules" if rules_of[n] else "")
                for n in self.nodes if any(per[b][n] for b in BACKENDS) or rules_of[n]}

    def _report_shapers(self, nodes: Iterable[str]) -> None:
        """Say what the ended shapers of `nodes` could not send (their last counters), so that a duplicate or a
        held message that never went out is reported, not silently lost."""
        for node in sorted(nodes):
            host = self.hosts[self.cluster.node(node).host] if self.multi_host else None
            failures = shaper_control.send_failures(shaper_control.read_stats(self.cluster.run_dir, node, host))
            if failures:
                self.log(f"shaper {node}: {failures}")

    def _set_links(self, kind: str, updates: LinkMatrix, merge: bool, replace_all: bool = False) -> str:
        caps = self._caps()
        grudges.check_matrix(updates, self.nodes)
        new = {} if replace_all else dict(self.links)
        used = set()
        for pair, fault in updates.items():
            if merge and pair in new:
                fault = new[pair][0].merged(fault)
            if fault.empty:
                new.pop(pair, None)
                continue
            backend = choose_backend(fault, self.link_backend, caps)
            used.add(backend)
            new[pair] = (fault, backend)
        old = self.links
        self.links = new
        try:
            self._apply_links()
        except BaseException:
            self.links = old
            raise
        applied_ts = time.time()
        for backend in sorted(used):
            reason = "" if self.link_backend else f" (probed: {caps[backend][1]})"
            self.log(f"{kind}: {len(updates)} link(s), backend {backend}{reason}")
        detail = {"links": {f"{s}->{d}": f.as_dict() for (s, d), f in sorted(updates.items())},
                  "backends": sorted(used)}
        return self._start_fault(kind, detail, applied_ts, None)

    def slow(self, delay_ms: float, jitter_ms: float = 0.0, links: Iterable[tuple[str, str]] | None = None,
             **more: float | str) -> str:
        """Delay (and jitter) the data traffic of `links` (default: every link); `more` may add other
        LinkFault fields (distribution, delay_corr_pct, duplicate_pct, reorder_pct, corrupt_pct, rate_kbit).
        Keeps other faults on those links. Returns the fault id."""
        fault = grudges.link_fault({"delay_ms": delay_ms, "jitter_ms": jitter_ms, **more})
        return self._set_links("slow", grudges.matrix(self._scope(links), fault), merge=True)

    def flaky(self, loss_pct: float, links: Iterable[tuple[str, str]] | None = None) -> str:
        """Lose `loss_pct` of the data traffic of `links` (default: every link). Returns the fault id."""
        fault = grudges.link_fault({"loss_pct": loss_pct})
        return self._set_links("flaky", grudges.matrix(self._scope(links), fault), merge=True)

    def shape(self, matrix: Mapping[tuple[str, str], LinkFault] | str) -> str:
        """Replace every link fault by `matrix` (a string is parsed by `chaos.faults.grudge.parse_matrix`)."""
        if isinstance(matrix, str):
            matrix = grudges.parse_matrix(matrix, self.nodes)
        return self._set_links("shape", dict(matrix), merge=False, replace_all=True)

    def msg_fault(self, rule: MsgRule) -> str:
        """Add a protocol-aware rule (executed by the NFQUEUE shaper in the sender's namespace)."""
        grudges.check_matrix({(rule.src, rule.dst): LinkFault()}, self.nodes)
        self.rules = [*self.rules, rule]
        try:
            self._apply_links()
        except BaseException:
            self.rules = self.rules[:-1]
            raise
        applied_ts = time.time()
        self.log(f"msg-fault {rule.describe()}: backend nfqueue (scapy dissector)")
        return self._start_fault("msg_fault", asdict(rule), applied_ts, None)

    def end_rule(self, fault_id: str, rule: MsgRule) -> None:
        """Remove exactly `rule` (the message fault `fault_id` added) and record the end of `fault_id`."""
        rules = list(self.rules)
        if rule in rules:
            rules.remove(rule)
        self.rules = rules
        self._apply_links()
        self._end_one(fault_id)

    def end_links(self, fault_id: str, matrix: LinkMatrix) -> None:
        """Make the link faults exactly `matrix` (what the faults still open set) and record the end of
        `fault_id` (the slow, flaky or shape fault that ends)."""
        caps = self._caps()
        grudges.check_matrix(matrix, self.nodes)
        self.links = {pair: (fault, choose_backend(fault, self.link_backend, caps)) for pair, fault in matrix.items()
                      if not fault.empty}
        self._apply_links()
        self._end_one(fault_id)

    def _end_one(self, fault_id: str) -> None:
        info = self.active.get(fault_id)
        if info is not None:
            self._end_faults([info["kind"]], time.time(), None, only=lambda other: other is info)

    def fast(self) -> None:
        """End every link fault and message rule (slow, flaky, shape, msg-fault); a jammed partition stays."""
        self.links, self.rules = {}, []
        if self.jam is not None:  # the shapers keep holding the jam
            self._apply_links()
        else:
            shaped = shaper_control.shaped_nodes(self.ledger)
            self.ledger.heal(lambda e: e.group in LINK_GROUPS)
            self._report_shapers(shaped)
        applied_ts = time.time()
        self.log("fast: every link fault removed")
        self._end_faults(["slow", "flaky", "shape", "msg_fault"], applied_ts, None)

    # --- injection and capture --------------------------------------------------------------------------------
    def inject(self, src: str, dst: str, messages: list[Any] | bytes, count: int = 1, sign: bool = False) -> str:
        """Send a forged datagram (scapy bodies, or ready bytes) `count` times from inside `src`'s namespace,
        with `src`'s real data address and port, to `dst` (over IPv6 on an IPv6 run); `sign`: signed with the
        run's key (`UsageError` on the open wire). Returns the fault id (an instant: no fault_end)."""
        from chaos.wire import inject as injection

        grudges.check_matrix({(src, dst): LinkFault()}, self.nodes)
        payload = messages if isinstance(messages, bytes) else injection.forge(self.run_id, src, messages)
        if sign:
            payload = sign_datagram(authkey.required(self.run_dir, self.run_id), payload)
        sender, receiver = self.cluster.node(src), self.cluster.node(dst)
        sent = self._send(sender, sender.wire_ip,
                          injection.copies(injection.packet(sender.wire_ip, receiver.wire_ip, payload), count))
        applied_ts = time.time()
        described = "raw bytes" if isinstance(messages, bytes) else \
            ", ".join(f"{m.name}({', '.join(f'{k}={v}' for k, v in m.fields.items())})" for m in messages)
        where = f"the agent in {src}'s namespace on {sender.host}" if sender.host else \
            f"raw socket in {src}'s namespace"
        self.log(f"inject {src}->{dst}: {sent} x {described}{', signed' if sign else ''} ({where})")
        fault_id = f"inject-{uuid.uuid4().hex[:8]}"
        self.history.emit("fault_start", fault_id=fault_id, kind="inject",
                          detail={"from": src, "to": dst, "count": sent, "messages": described,
                                  "bytes": len(payload), "signed": sign}, applied_ts=applied_ts, effective_ts=None)
        return fault_id

    def replay(self, packets: list[bytes], sign: bool = False) -> int:
        """Send captured packets (IPv4 or IPv6) again from their original senders' namespaces; `sign`: each
        splitlab datagram signed again with this run's key (whatever key, if any, signed it when captured)."""
        from chaos.wire import inject as injection

        if sign:
            key = authkey.required(self.run_dir, self.run_id)
            packets = [injection.signed_packet(key, pkt) for pkt in packets]
        by_ip = {ip: n for n in self.cluster.nodes for ip in (n.data_ip, n.data_ip6) if ip}
        sent = sum(self._send(by_ip[ip], ip, group) for ip, group in injection.by_sender(by_ip, packets).items())
        self.history.emit("fault_start", fault_id=f"inject-{uuid.uuid4().hex[:8]}", kind="inject",
                          detail={"replayed": sent, "signed": sign}, applied_ts=time.time(), effective_ts=None)
        return sent

    def _send(self, node: NodeInfo, ip: str, packets: list[bytes]) -> int:
        """Send whole packets from `node`'s address `ip` in its namespace: a raw socket of this process, or on
        another host the wire agent there (chaos.wire.remote)."""
        from chaos.wire import inject as injection, remote as remote_wire

        if node.host:
            return remote_wire.send(self.hosts[node.host], self.run_dir, self.run_id, node, ip, packets)
        return injection.send(probe.Endpoint(node.name, node.pid, ip), packets)

    def capture(self, path: Path) -> Any:
        """A capture (not started) of every node's received data traffic (on the addresses the nodes talk over)
        into the pcap `path`: a `chaos.wire.capture.Capture` through sockets of this process, or on a multi-host
        run a `chaos.wire.remote.RemoteCapture` of the wire agents on the nodes' hosts."""
        if self.multi_host:
            from chaos.wire.remote import RemoteCapture

            return RemoteCapture(self.ledger, self.hosts, self.run_id, self.cluster.nodes, path)
        from chaos.wire.capture import Capture

        return Capture(probe_endpoints(self.cluster), path)

    # --- process faults ---------------------------------------------------------------------------------------
    def pause(self, node: str, method: str = "docker") -> str:
        """Freeze `node` (docker pause, or SIGSTOP to its main process with method="sigstop")."""
        info = self.cluster.node(node)
        on = f"{info.host}:" if info.host else ""
        if method == "docker":
            entry = Entry(group=PROCESS_GROUP, key=f"pause:{on}{info.container}", node=node, host=info.host,
                          what=f"docker pause {info.container}", undo=[["docker", "unpause", info.container]],
                          present={"argv": ["docker", "inspect", "-f", "{{.State.Paused}}", info.container],
                                   "stdout": "true"})
            apply_argv = ["docker", "pause", info.container]
        elif method == "sigstop":
            entry = Entry(group=PROCESS_GROUP, key=f"sigstop:{on}{info.pid}", node=node, host=info.host,
                          what=f"SIGSTOP to pid {info.pid} ({info.container})",
                          undo=[["kill", "-CONT", str(info.pid)]],
                          present={"argv": ["ps", "-o", "stat=", "-p", str(info.pid)], "contains": "T"})
            apply_argv = ["kill", "-STOP", str(info.pid)]
        else:
            raise UsageError(f"unknown pause method {method!r}; use docker or sigstop")
        self.ledger.record(entry)
        self._runner(node)(apply_argv)
        applied_ts = time.time()
        self.log(f"pause {node}: {' '.join(apply_argv)}{f' on {info.host}' if info.host else ''}")
        return self._start_fault("pause", {"node": node, "method": method}, applied_ts, None)

    def resume(self, node: str) -> None:
        """Undo `pause` of `node`."""
        info = self.cluster.node(node)
        self.ledger.heal(lambda e: e.group == PROCESS_GROUP and e.node == node and
                         (e.key.startswith("pause:") or e.key.startswith("sigstop:")))
        self.log(f"resume {node}")
        self._end_faults(["pause"], time.time(), None, only=lambda i: i["detail"]["node"] == info.name)

    def kill(self, node: str) -> str:
        """SIGKILL `node`'s container (docker kill); `start` (or heal_all) starts it again."""
        info = self.cluster.node(node)
        container, on = info.container, f"{info.host}:" if info.host else ""
        self.ledger.record(Entry(group=PROCESS_GROUP, key=f"kill:{on}{container}", node=node, host=info.host,
                                 what=f"docker kill {container}", undo=[["docker", "start", container]],
                                 present={"argv": ["docker", "inspect", "-f", "{{.State.Running}}", container],
                                          "stdout": "false"}))
        self._runner(node)(["docker", "kill", container])
        applied_ts = time.time()
        self.log(f"kill {node}: docker kill {container}{f' on {info.host}' if info.host else ''}")
        return self._start_fault("kill", {"node": node}, applied_ts, None)

    def start(self, node: str) -> None:
        """Start a killed `node` again and re-apply the current partition and link faults to its new namespace
        (the old namespace went with the old process; its shaper is ended, also a shaper container on its host)."""
        self.ledger.heal(lambda e: e.group == PROCESS_GROUP and e.node == node and e.key.startswith("kill:"))
        self._refresh()
        runner = self._runner(node)
        stale = {e.id for e in self.ledger.outstanding() if e.node == node and
                 (namespace_gone(e, runner) or e.group == shaper_control.GROUP)}
        if stale:
            self.ledger.heal(lambda e: e.id in stale)
        if self.grudge and self.jam is None:
            self._partition_apply(self.grudge)
        if self.links or self.rules or self.jam:
            self._apply_links()
        self.log(f"start {node}: docker start, faults re-applied to its new namespace")
        self._end_faults(["kill"], time.time(), None, only=lambda i: i["detail"]["node"] == node)

    def restart(self, node: str) -> str:
        """Kill `node` (SIGKILL) and start it again at once: a crash and reboot with the run's faults re-applied
        to its new namespace. Returns the fault id (an instant: no fault_end)."""
        kill_id = self.kill(node)
        self.start(node)
        fault_id = f"restart-{uuid.uuid4().hex[:8]}"
        self.history.emit("fault_start", fault_id=fault_id, kind="restart", detail={"node": node, "kill": kill_id},
                          applied_ts=time.time(), effective_ts=None)
        return fault_id

    # --- everything -------------------------------------------------------------------------------------------
    def heal_all(self) -> int:
        """Undo everything the ledger lists for this run (see `heal_run`); returns how many entries were settled."""
        shaped = shaper_control.shaped_nodes(self.ledger)
        count = heal_run(self.cluster.run_dir, self.run_id, log=self.log, missing_ok=True,
                         endpoints=(lambda: running_endpoints(self.run_id)) if self.verify else None)
        self._report_shapers(shaped)
        self.leases.end_all()
        self.grudge, self.jam, self.links, self.rules, self.active = {}, None, {}, [], {}
        self._namespaces = None
        return count

    def close(self) -> None:
        with closing(self._hosts or {}):
            self.heal_all()

    def __enter__(self) -> "DockerNet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def running_endpoints(run_id: str) -> dict[str, probe.Endpoint] | None:
    """The probe endpoints of `run_id`'s nodes, None when its containers are gone or not all running."""
    try:
        cluster = clusters.load(run_id)
    except UsageError:
        return None  # its containers are gone
    if not all(n.pid for n in cluster.nodes) or any(n.host for n in cluster.nodes):
        return None  # a node is down, or on another host where probes do not reach
    return probe_endpoints(cluster)


def probe_endpoints(cluster: clusters.Cluster, ipv6: bool | None = None) -> dict[str, probe.Endpoint]:
    """The nodes' probe endpoints on their IPv6 data addresses (`ipv6`) or IPv4 ones; None: the family the
    nodes talk over (IPv6 on a `splitlab up --ipv6` run)."""
    ipv6 = cluster.ipv6 if ipv6 is None else ipv6
    return {n.name: probe.Endpoint(n.name, n.pid, n.data_ip6 if ipv6 else n.data_ip) for n in cluster.nodes}
