"""The network-fault interface of one run: verbs in pairs, backends chosen by probing the kernel.

    partition(grudge) / heal()          iptables drops on the receivers' INPUT (chaos.partition)
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
Everything applied is recorded in the run's ledger first (chaos.ledger); the link state lives in
`runs/<run>/chaos/state.json` so that separate CLI invocations compose (slow, then flaky, keeps both).
Faults are scoped to data-network addresses: the control network is never shaped or cut.

Every verb appends `fault_start` (and its pair `fault_end`; `heal_all` a `heal`) to
`runs/<run>/events/controller.jsonl` with `applied_ts` and, for partitions and heals, `effective_ts`: when UDP
probes between the namespaces first saw the change in effect. One `seed` drives every random choice (shaper
RNGs, random topologies).

Used as a context manager, `Net` heals everything on exit.
"""
from __future__ import annotations

import json
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from chaos import cluster as clusters
from chaos import grudge as grudges
from chaos import partition, probe
from chaos.grudge import Grudge, LinkFault, LinkMatrix
from chaos.ledger import Entry, Ledger, namespace_gone
from chaos.netns import Netns
from chaos.proc import run
from chaos.shaper import control as shaper_control
from chaos.shaper import netem, statloss
from chaos.shaper.msgrules import MsgRule
from chaos.shaper.spec import ShaperSpec, derive_seed
from node.errors import EnvironmentProblem, UsageError
from node.history import HistoryWriter

BACKENDS = ("netem", "nfqueue", "iptables")
LINK_GROUPS = (shaper_control.GROUP, netem.GROUP, statloss.GROUP)
PROCESS_GROUP = "process"
Log = Callable[[str], None]
_caps: dict[str, tuple[bool, str]] = {}


def capabilities() -> dict[str, tuple[bool, str]]:
    """Which link-fault backends this kernel offers: name -> (available, detail). Probed once per process."""
    if not _caps:
        from chaos import doctor

        netem_check = doctor.check_netem(doctor.system_probe)
        nfq_check = doctor.check_nfqueue(doctor.system_probe, doctor.nfqueue_binding_error())
        nfq_ok, nfq_detail = nfq_check.ok, nfq_check.detail
        _caps.update(netem=(netem_check.ok, netem_check.detail), nfqueue=(nfq_ok, nfq_detail),
                     iptables=(True, "iptables statistic (pure loss only, kernel RNG: not seeded)"))
    return dict(_caps)


def choose_backend(fault: LinkFault, forced: str | None, caps: Mapping[str, tuple[bool, str]]) -> str:
    """The backend for one link fault. Raises `UsageError` / `EnvironmentProblem` when it cannot be served."""
    if forced is not None:
        if forced not in BACKENDS:
            raise UsageError(f"unknown backend {forced!r}; use one of {', '.join(BACKENDS)}")
        if forced == "iptables" and not fault.only_loss:
            raise UsageError(f"backend iptables serves pure loss only, asked {fault.as_dict()}",
                             hint="use --backend nfqueue (or netem where the kernel has it)")
        ok, detail = caps[forced]
        if not ok:
            raise EnvironmentProblem(f"backend {forced} is not available here: {detail}",
                                     hint="'splitlab doctor' lists the fault backends of this machine")
        return forced
    for name in ("netem", "nfqueue"):
        if caps[name][0]:
            return name
    if fault.only_loss:
        return "iptables"
    raise EnvironmentProblem(f"no backend can apply {fault.as_dict()}: no sch_netem ({caps['netem'][1]}) and no "
                             f"NFQUEUE ({caps['nfqueue'][1]})", hint="'splitlab doctor' says what is missing")


class ControllerHistory:
    """Appends controller events to `events/controller.jsonl`, continuing the file's `seq` across processes."""

    def __init__(self, run_dir: Path, run_id: str) -> None:
        self.path = Path(run_dir) / "events" / "controller.jsonl"
        self.run_id = run_id
        self._ledger_lock = Ledger(run_dir)

    def emit(self, type_: str, **fields: Any) -> None:
        with self._ledger_lock._locked():  # one writer at a time, so `seq` stays a gapless counter
            last = 0
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(0, 2)
                    fh.seek(max(0, fh.tell() - 4096))
                    lines = fh.read().splitlines()
                if lines:
                    last = int(json.loads(lines[-1]).get("seq", 0))
            except FileNotFoundError:
                pass
            with HistoryWriter(self.path, self.run_id, "controller", buffer_lines=1) as writer:
                writer._seq = last  # HistoryWriter counts from 1 per writer; this file has many writers
                writer.emit(type_, **fields)


class Net:
    """Network and process faults on one running cluster. See the module docstring."""

    def __init__(self, cluster: clusters.Cluster, *, seed: int = 0, backend: str | None = None,
                 log: Log = lambda _: None, verify: bool = True) -> None:
        if backend is not None and backend not in BACKENDS:
            raise UsageError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
        self.cluster = cluster
        self.run_id = cluster.run_id
        self.seed = seed
        self.rng = random.Random(derive_seed(seed, "topologies"))
        self.backend = backend
        self.log = log
        self.verify = verify
        self.ledger = Ledger(cluster.run_dir)
        self.history = ControllerHistory(cluster.run_dir, self.run_id)
        self.state_path = cluster.run_dir / "chaos" / "state.json"
        self._namespaces: dict[str, Netns] | None = None
        self._load_state()

    # --- state ------------------------------------------------------------------------------------------------
    def _load_state(self) -> None:
        self.grudge: Grudge = {}
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
        self.active = data.get("active", {}) if applied else {}

    def _save_state(self) -> None:
        data = {"grudge": {k: sorted(v) for k, v in self.grudge.items()},
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
            self._namespaces = clusters.namespaces(self.cluster)
        return self._namespaces

    def _endpoints(self) -> dict[str, probe.Endpoint]:
        return {n.name: probe.Endpoint(n.name, n.pid, n.data_ip) for n in self.cluster.nodes}

    def _refresh(self) -> None:
        """Re-read the nodes (a restarted container has a new PID, namespace and maybe address)."""
        self.cluster = clusters.Cluster(self.run_id, self.cluster.run_dir, self.cluster.token,
                                        clusters.load(self.run_id).nodes)
        self._namespaces = None

    # --- events -----------------------------------------------------------------------------------------------
    def _start_fault(self, kind: str, detail: dict[str, Any], applied_ts: float, effective_ts: float | None) -> str:
        fault_id = f"{kind}-{uuid.uuid4().hex[:8]}"
        self.active[fault_id] = {"kind": kind, "detail": detail, "applied_ts": applied_ts}
        self._save_state()
        self.history.emit("fault_start", fault_id=fault_id, kind=kind, detail=detail, applied_ts=applied_ts,
                          effective_ts=effective_ts)
        return fault_id

    def _end_faults(self, kinds: Iterable[str], applied_ts: float, effective_ts: float | None,
                    only: Callable[[dict[str, Any]], bool] = lambda _: True) -> None:
        kinds = set(kinds)
        for fault_id, info in list(self.active.items()):
            if info["kind"] in kinds and only(info):
                del self.active[fault_id]
                self.history.emit("fault_end", fault_id=fault_id, kind=info["kind"], applied_ts=applied_ts,
                                  effective_ts=effective_ts)
        self._save_state()

    # --- partitions -------------------------------------------------------------------------------------------
    def _expected_reach(self, grudge: Mapping[str, Iterable[str]]) -> dict[tuple[str, str], bool]:
        cut = grudges.cut_links(grudge)
        return {(a, b): (a, b) not in cut for a in self.nodes for b in self.nodes if a != b}

    def _effective(self, expected: dict[tuple[str, str], bool]) -> float | None:
        if not self.verify:
            return None
        when = probe.wait_for(self._endpoints(), expected)
        if when is None:
            bad = {p for p, ok in probe.reachability(self._endpoints(), list(expected)).items() if ok != expected[p]}
            raise EnvironmentProblem(f"run {self.run_id}: the network did not reach the intended state within 5 s; "
                                     f"probes disagree on {', '.join(f'{a}->{b}' for a, b in sorted(bad))}",
                                     hint="'splitlab heal' removes every fault")
        return when

    def partition(self, grudge: Mapping[str, Iterable[str]] | str) -> str:
        """Cut the data traffic a grudge names (a string is parsed by `chaos.grudge.parse_grudge`); replaces
        the current partition. Returns the fault id. Raises `UsageError` for a bad grudge."""
        if isinstance(grudge, str):
            grudge = grudges.parse_grudge(grudge, self.nodes, self.rng)
        grudges.check_grudge(grudge, self.nodes)
        grudge = grudges.union(grudge)
        data_ips = {n.name: n.data_ip for n in self.cluster.nodes}
        partition.apply(self.run_id, grudge, self.namespaces, data_ips, ledger=self.ledger)
        applied_ts = time.time()
        self.grudge = grudge
        effective_ts = self._effective(self._expected_reach(grudge))
        self.log(f"partition {grudges.describe(grudge)}: backend iptables")
        self._end_faults(["partition"], applied_ts, effective_ts)
        return self._start_fault("partition", {"grudge": {k: sorted(v) for k, v in grudge.items()}},
                                 applied_ts, effective_ts)

    def heal(self) -> None:
        """End the partition (link faults stay: that is `fast`)."""
        partition.heal(self.run_id, self.namespaces, ledger=self.ledger)
        applied_ts = time.time()
        self.grudge = {}
        effective_ts = self._effective(self._expected_reach({}))
        self.log("heal: partition removed")
        self._end_faults(["partition"], applied_ts, effective_ts)

    # --- link faults ------------------------------------------------------------------------------------------
    def _scope(self, links: Iterable[tuple[str, str]] | None) -> list[tuple[str, str]]:
        pairs = list(links) if links is not None else grudges.all_links(self.nodes)
        grudges.check_matrix({p: LinkFault() for p in pairs}, self.nodes)
        if not pairs:
            raise UsageError("no link selected")
        return pairs

    def _apply_links(self) -> dict[str, str]:
        """Make every node's backends hold exactly `self.links` and `self.rules`; returns node -> backends used."""
        caps = capabilities()
        ips = {n.name: n.data_ip for n in self.cluster.nodes}
        per: dict[str, dict[str, dict[str, LinkFault]]] = {b: {n: {} for n in self.nodes} for b in BACKENDS}
        for (src, dst), (fault, backend) in self.links.items():
            per[backend][src][ips[dst]] = fault
        rules_of = {n: [r for r in self.rules if r.src == n] for n in self.nodes}
        if self.rules and not caps["nfqueue"][0]:
            raise EnvironmentProblem(f"message faults need NFQUEUE: {caps['nfqueue'][1]}")
        outstanding = {e.group + ":" + (e.node or "") for e in self.ledger.outstanding()}

        def one(node: str) -> None:
            ns = self.namespaces[node]
            if per["nfqueue"][node] or rules_of[node]:
                spec = ShaperSpec(self.run_id, node, seed=derive_seed(self.seed, "shaper", node),
                                  links=per["nfqueue"][node], rules=rules_of[node],
                                  names={ip: name for name, ip in ips.items()})
                shaper_control.ensure(self.ledger, ns, spec)
            elif f"{shaper_control.GROUP}:{node}" in outstanding:
                shaper_control.stop(self.ledger, node)
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

    def _set_links(self, kind: str, updates: LinkMatrix, merge: bool, replace_all: bool = False) -> str:
        caps = capabilities()
        grudges.check_matrix(updates, self.nodes)
        new = {} if replace_all else dict(self.links)
        used = set()
        for pair, fault in updates.items():
            if merge and pair in new:
                fault = new[pair][0].merged(fault)
            if fault.empty:
                new.pop(pair, None)
                continue
            backend = choose_backend(fault, self.backend, caps)
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
            reason = "" if self.backend else f" (probed: {caps[backend][1]})"
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
        """Replace every link fault by `matrix` (a string is parsed by `chaos.grudge.parse_matrix`)."""
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

    def fast(self) -> None:
        """End every link fault and message rule (slow, flaky, shape, msg-fault)."""
        self.links, self.rules = {}, []
        self.ledger.heal(lambda e: e.group in LINK_GROUPS)
        applied_ts = time.time()
        self.log("fast: every link fault removed")
        self._end_faults(["slow", "flaky", "shape", "msg_fault"], applied_ts, None)

    # --- injection and capture --------------------------------------------------------------------------------
    def inject(self, src: str, dst: str, messages: list[Any] | bytes, count: int = 1) -> str:
        """Send a forged datagram (scapy bodies, or ready bytes) `count` times from inside `src`'s namespace,
        with `src`'s real data address and port, to `dst`. Returns the fault id (an instant: no fault_end)."""
        from chaos import inject as injection

        grudges.check_matrix({(src, dst): LinkFault()}, self.nodes)
        payload = messages if isinstance(messages, bytes) else injection.forge(self.run_id, src, messages)
        endpoints = self._endpoints()
        sent = injection.inject(endpoints[src], endpoints[dst], payload, count=count)
        applied_ts = time.time()
        described = "raw bytes" if isinstance(messages, bytes) else \
            ", ".join(f"{m.name}({', '.join(f'{k}={v}' for k, v in m.fields.items())})" for m in messages)
        self.log(f"inject {src}->{dst}: {sent} x {described} (raw socket in {src}'s namespace)")
        fault_id = f"inject-{uuid.uuid4().hex[:8]}"
        self.history.emit("fault_start", fault_id=fault_id, kind="inject",
                          detail={"from": src, "to": dst, "count": sent, "messages": described,
                                  "bytes": len(payload)}, applied_ts=applied_ts, effective_ts=None)
        return fault_id

    def replay(self, packets: list[bytes]) -> int:
        """Send captured IPv4 packets again from their original senders' namespaces."""
        from chaos import inject as injection

        sent = injection.replay(self._endpoints(), packets)
        self.history.emit("fault_start", fault_id=f"inject-{uuid.uuid4().hex[:8]}", kind="inject",
                          detail={"replayed": sent}, applied_ts=time.time(), effective_ts=None)
        return sent

    def capture(self, path: Path) -> Any:
        """A `chaos.capture.Capture` of every node's received data traffic into the pcap `path` (not started)."""
        from chaos.capture import Capture

        return Capture(self._endpoints(), path)

    # --- process faults ---------------------------------------------------------------------------------------
    def _container(self, node: str) -> str:
        return self.cluster.node(node).container

    def pause(self, node: str, method: str = "docker") -> str:
        """Freeze `node` (docker pause, or SIGSTOP to its main process with method="sigstop")."""
        info = self.cluster.node(node)
        if method == "docker":
            entry = Entry(group=PROCESS_GROUP, key=f"pause:{info.container}", node=node,
                          what=f"docker pause {info.container}", undo=[["docker", "unpause", info.container]],
                          present={"argv": ["docker", "inspect", "-f", "{{.State.Paused}}", info.container],
                                   "stdout": "true"})
            apply_argv = ["docker", "pause", info.container]
        elif method == "sigstop":
            entry = Entry(group=PROCESS_GROUP, key=f"sigstop:{info.pid}", node=node,
                          what=f"SIGSTOP to pid {info.pid} ({info.container})",
                          undo=[["kill", "-CONT", str(info.pid)]],
                          present={"argv": ["ps", "-o", "stat=", "-p", str(info.pid)], "contains": "T"})
            apply_argv = ["kill", "-STOP", str(info.pid)]
        else:
            raise UsageError(f"unknown pause method {method!r}; use docker or sigstop")
        self.ledger.record(entry)
        run(apply_argv)
        applied_ts = time.time()
        self.log(f"pause {node}: {' '.join(apply_argv)}")
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
        container = self._container(node)
        self.ledger.record(Entry(group=PROCESS_GROUP, key=f"kill:{container}", node=node,
                                 what=f"docker kill {container}", undo=[["docker", "start", container]],
                                 present={"argv": ["docker", "inspect", "-f", "{{.State.Running}}", container],
                                          "stdout": "false"}))
        run(["docker", "kill", container])
        applied_ts = time.time()
        self.log(f"kill {node}: docker kill {container}")
        return self._start_fault("kill", {"node": node}, applied_ts, None)

    def start(self, node: str) -> None:
        """Start a killed `node` again and re-apply the current partition and link faults to its new namespace
        (the old namespace went with the old process; its shaper is ended)."""
        self.ledger.heal(lambda e: e.group == PROCESS_GROUP and e.node == node and e.key.startswith("kill:"))
        self._refresh()
        stale = {e.id for e in self.ledger.outstanding() if e.node == node and namespace_gone(e)}
        if stale:
            self.ledger.heal(lambda e: e.id in stale)
        if self.grudge:
            partition.apply(self.run_id, self.grudge, self.namespaces,
                            {n.name: n.data_ip for n in self.cluster.nodes}, ledger=self.ledger)
        if self.links or self.rules:
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
        count = heal_run(self.cluster.run_dir, self.run_id, log=self.log, verify=self.verify, missing_ok=True)
        self.grudge, self.links, self.rules, self.active = {}, {}, [], {}
        self._namespaces = None
        return count

    def close(self) -> None:
        self.heal_all()

    def __enter__(self) -> "Net":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _running_cluster(run_id: str) -> clusters.Cluster | None:
    try:
        cluster = clusters.load(run_id)
    except UsageError:
        return None  # its containers are gone
    return cluster if all(n.pid for n in cluster.nodes) else None


def heal_run(run_dir: Path, run_id: str, log: Log = lambda _: None, verify: bool = True,
             missing_ok: bool = False) -> int:
    """Undo everything the run's ledger lists, also when its controller died or its containers are gone.

    Restarts killed nodes and unpauses paused ones, removes chains, qdiscs and shapers; then ends the open
    faults in the history (`fault_end`) and records `heal` (nothing, when nothing was outstanding). With
    `verify` and the cluster running, `heal`
    carries `effective_ts`: when probes first passed between all nodes again. Returns the number of entries
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
    cluster = _running_cluster(run_id) if verify else None
    if cluster is not None:
        endpoints = {n.name: probe.Endpoint(n.name, n.pid, n.data_ip) for n in cluster.nodes}
        effective_ts = probe.wait_for(endpoints, {(a, b): True for a in endpoints for b in endpoints if a != b})
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
