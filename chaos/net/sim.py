"""The simulator as a network backend (`chaos.net.base.Net`): the nodes' real protocol stacks (built from the
environment a container gets, by `node.__main__.build_stack`) in the seeded simulator (`node.sim`), virtual time,
and the verbs below. The history is written like a container run's (events/<node>.jsonl,
events/controller.jsonl), so the same analysis and expectations judge it.

    workloads           application sends at the given rate (waits while the send window is full)
    partition / heal    one-way cuts (or jams: held, released at the heal) of the simulated network / all removed
    slow, flaky, shape  per-link delay, jitter, loss, duplication, reordering; fast: links back to default
    msg_fault           drop, drop-first:N, drop-nth:N, drop-every:N, drop-range:A-B, delay:MS, hold:MS, matched
                        by conn_id, seqno and first through node.sim.faults `where` predicates
    inject              the datagram delivered to the target (signed with the run's key when asked: a run
                        with `auth` runs the authenticated wire, its key made for the run)
    admin               the unicast layer's request

pause, resume, kill, start, restart, corruption, rate limits, delay distributions and correlation, and the
`duplicate` message fault have no equivalent: `refusals(scenario)` names every such step, and the verbs raise
`UsageError`. One seed drives the simulator; topologies, first conn_ids and fault ids draw from generators
derived from it (`chaos.net.shaper.spec.derive_seed`), never from a second generator with the same seed.
"""
from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from chaos.faults import grudge as grudges
from chaos.faults.grudge import Jam, LinkFault
from chaos.faults.msgrules import MsgRule
from chaos.net.shaper.spec import derive_seed
from node.core import make_payload
from node.errors import UsageError, WindowFull
from node.wire import cluster_id_of

POLL_S = 0.005
ALL_HEAR_MAX_S = 5.0  # simulated seconds to wait for every member to hear every other before the first step
BURST = 64
SIMULATED_LINK_FIELDS = ("delay_ms", "jitter_ms", "loss_pct", "duplicate_pct", "reorder_pct")
PROCESS_ACTIONS = ("pause", "resume", "kill", "start", "restart")
REFUSED_HINT = ("pause, resume, kill, start, restart, corruption, rate limits, correlations, delay distributions "
                "and message duplication run only on containers ('splitlab run')")


def refusal(action: str, args: Any, nodes: list[str]) -> str | None:
    """Why the simulator cannot run a step (`action` with its scenario arguments), or None when it can."""
    if action in PROCESS_ACTIONS:
        return f"{action} has no simulator equivalent (processes exist only on containers); run it with 'splitlab run'"
    if action == "msg_fault" and args.action.startswith("duplicate"):
        return "the duplicate message fault has no simulator equivalent"
    if action in ("slow", "flaky", "shape"):
        if action == "shape":
            faults = list(grudges.parse_matrix(args, nodes).values())
        else:
            faults = [grudges.link_fault(args.model_dump(exclude={"links"}))]
        unsimulable = sorted({k for f in faults for k in f.as_dict()} - set(SIMULATED_LINK_FIELDS))
        if unsimulable:
            return f"{', '.join(unsimulable)} have no simulator equivalent"
    return None


class SimHistory:
    """Writes the simulator's records as history files (schema v1), with unix times base + virtual time.

    Records come from two places (the simulator's own, drained after the fact, and the workloads' `app_send`,
    recorded as they happen), so each file is ordered by virtual time before `seq` is numbered.
    """

    def __init__(self, run_dir: Path, run_id: str, base_ts: float) -> None:
        self.events_dir = run_dir / "events"
        self.events_dir.mkdir(parents=True, exist_ok=False)
        self.run_id = run_id
        self.base_ts = base_ts
        self.records: dict[str, list[tuple[float, int, str, dict[str, Any]]]] = {}
        self._order = 0

    def add(self, node: str, at_s: float, type_: str, fields: dict[str, Any]) -> None:
        self._order += 1
        body = {k: v for k, v in fields.items() if k not in ("ts", "node", "type")}
        self.records.setdefault(node, []).append((at_s, self._order, type_, body))

    def write(self) -> None:
        for node, records in self.records.items():
            lines = []
            for seq, (at_s, _, type_, body) in enumerate(sorted(records, key=lambda r: (r[0], r[1])), start=1):
                event = {"v": 1, "ts": round(self.base_ts + at_s, 6), "seq": seq, "run": self.run_id, "node": node,
                         "type": type_, **body}
                lines.append(json.dumps(event, default=str))
            (self.events_dir / f"{node}.jsonl").write_text("\n".join(lines) + "\n")


@dataclass
class SimWorkload:
    """One workload's progress (the shape of a node's /state workload entry)."""

    id: int
    node: str
    kind: str
    to: str
    count: int
    size: int
    rate: float
    sent: int = 0
    blocked_since_s: float | None = None
    blocked_s: float = 0.0
    error: str | None = None

    def state(self, now_s: float) -> dict[str, Any]:
        blocked = self.blocked_s + (now_s - self.blocked_since_s if self.blocked_since_s is not None else 0.0)
        return {"id": self.id, "kind": self.kind, "to": self.to, "count": self.count, "sent": self.sent,
                "done": self.sent >= self.count or self.error is not None, "error": self.error,
                "blocked": self.blocked_since_s is not None, "blocked_ms": round(blocked * 1000, 3)}


class SimClient:
    """One simulated node's control API (the calls chaos.cluster.client.NodeClient makes on containers)."""

    def __init__(self, net: "SimNet", node: str) -> None:
        self.net = net
        self.node = node

    def health(self) -> dict[str, Any]:
        return {"node": self.node, "boot": self.net.boot}

    def state(self) -> dict[str, Any]:
        """As a container's /state: boot, view, workloads and every layer's state."""
        sim = self.net.sim
        return {**self.net.node_state(self.node), "layers": sim.driver(self.node).state(sim.now_s)["layers"]}

    def unicast(self, to: str, count: int, size: int = 100, rate: float = 0) -> int:
        return self.net.start_workload(self.node, "unicast", to, count, size, rate).id

    def multicast(self, count: int, size: int = 100, rate: float = 0) -> int:
        return self.net.start_workload(self.node, "multicast", None, count, size, rate).id

    def admin(self, op: str, peer: str, **extra: Any) -> dict[str, Any]:
        self.net.sim.request(self.node, "unicast", op, {"peer": peer, **extra})
        return {"op": op, "peer": peer}


class VirtualClock:
    """The simulator's time: passing time runs the simulated events; a wait checks after every event."""

    def __init__(self, net: "SimNet") -> None:
        self.net = net

    def now_s(self) -> float:
        return self.net.sim.now_s - self.net.started_s

    def now_ts(self) -> float:
        return self.net.history.base_ts + self.net.sim.now_s

    def pass_time(self, until_s: float, label: str) -> None:
        self.net.sim.run_until(until_s + self.net.started_s)

    def wait_until(self, ready: Callable[[], bool], until_s: float, label: str) -> bool:
        return ready() or self.net.sim.run_until_true(ready, max(0.0, until_s - self.now_s()))


class SimNet:
    """A simulated cluster behind the `Net` interface; see the module docstring."""

    backend = "sim"

    def __init__(self, nodes: list[str], node_env: Mapping[str, Mapping[str, str]], run_id: str, run_dir: Path,
                 seed: int, base_ts: float, auth: bool = False) -> None:
        from node.auth import WireKey
        from node.layers import build_stack
        from node.config import from_env
        from node.sim import Simulator

        self.run_id = run_id
        self.run_dir = run_dir
        self.cluster_id = cluster_id_of(run_id)
        self._nodes = list(nodes)
        self.seed = seed
        self.sim = Simulator(seed, cluster_id=self.cluster_id, auth_key=WireKey.new() if auth else None)
        self.topologies = random.Random(derive_seed(seed, "topologies"))
        self._fault_ids = random.Random(derive_seed(seed, "fault-ids"))
        conn_ids = random.Random(derive_seed(seed, "conn-ids"))
        self.history = SimHistory(run_dir, run_id, base_ts)
        self.boot = 1 + seed % 1_000_000  # virtual: the same seed writes the same message ids
        self.msg_counter = {n: 0 for n in self._nodes}
        self.workloads: list[SimWorkload] = []
        self.links: dict[tuple[str, str], dict[str, float]] = {}
        self.active: dict[str, str] = {}  # fault_id -> kind
        self.msg_faults: dict[str, tuple[int, Any, dict[str, Any]]] = {}  # fault_id -> (sim id, switch, hold)
        self.recorded = 0  # simulator records moved into the history so far
        self._views: dict[str, dict[str, Any]] = {}  # node -> its last installed view
        self._views_scanned = 0
        for name, env in node_env.items():
            full = {"SPLITLAB_NODE": name, "SPLITLAB_RUN": run_id, "SPLITLAB_MEMBERS": ",".join(self._nodes),
                    "SPLITLAB_TOKEN": "sim",  # a container takes its first conn_id from its boot time; here the seed
                    "SPLITLAB_UNICAST_CONN_ID_START": str(conn_ids.randrange(1, 0x7FFFFFFF)), **env}
            config = from_env(full)
            self.history.add(name, 0.0, "node_start", {"boot": self.boot, "data_ip": "sim", "control_ip": "sim",
                                                       "members": self._nodes,
                                                       "config": {"unicast": config.unicast, "backend": "sim",
                                                                  "auth": auth}})
            self.sim.add_member(name, build_stack(config))
        self.started_s = self._all_hear()

    def _all_hear(self) -> float:
        """Run until every member hears every other one, as `splitlab up` waits before a scenario's first step
        (a member never heard has not joined: suspected only after the join timeout); the simulated time this
        took, from which the timeline counts. Members without a liveness layer are not waited for."""
        sim = self.sim
        layers = [sim.driver(n).stack.layers.get("liveness") for n in self._nodes]
        others = [set(self._nodes) - {n} for n in self._nodes]
        sim.run_until_true(lambda: all(layer is None or set(layer.hears()) >= want
                                       for layer, want in zip(layers, others)), ALL_HEAR_MAX_S)
        return sim.now_s

    @property
    def nodes(self) -> list[str]:
        return self._nodes

    # --- the nodes ------------------------------------------------------------------------------------------
    def client(self, node: str) -> SimClient:
        if node not in self._nodes:
            raise UsageError(f"no node {node!r}; nodes: {', '.join(self._nodes)}")
        return SimClient(self, node)

    def node_state(self, node: str) -> dict[str, Any]:
        """The cheap part of `node`'s state (boot, view, workloads): checked after every simulated event."""
        events = self.sim.events
        for event in events[self._views_scanned:]:  # incremental: each event is looked at once
            if event["type"] == "view":
                self._views[event["node"]] = {"view_id": list(event["view_id"]), "members": list(event["members"])}
        self._views_scanned = len(events)
        now = self.sim.now_s
        return {"node": node, "boot": self.boot, "view": self._views.get(node),
                "workloads": [w.state(now) for w in self.workloads if w.node == node]}

    def clock(self, wait: Callable[[float, str], None] | None = None) -> VirtualClock:
        return VirtualClock(self)

    def record(self, type_: str, **fields: Any) -> None:
        self.history.add("controller", self.sim.now_s, type_, fields)

    def drain(self) -> None:
        """Move the simulator's new records into the history."""
        events = self.sim.events
        for event in events[self.recorded:]:
            self.history.add(event["node"], event["ts"], event["type"],
                             {k: v for k, v in event.items() if k not in ("ts", "node", "type")})
        self.recorded = len(events)

    def close(self) -> None:
        """Write the history files (a simulated run is written once, at its end)."""
        self.drain()
        for node in self._nodes:
            self.history.add(node, self.sim.now_s, "node_stop", {"reason": "exit", "counters": {}})
        self.history.write()

    # --- workloads ------------------------------------------------------------------------------------------
    def _new_msg_id(self, node: str) -> str:
        self.msg_counter[node] += 1
        return f"{node}.{self.boot}.{self.msg_counter[node]}"

    def start_workload(self, node: str, kind: str, to: str | None, count: int, size: int, rate: float) -> SimWorkload:
        if kind == "unicast" and to not in self._nodes:
            raise UsageError(f"unicast workload: 'to' must be one of {', '.join(self._nodes)}, got {to!r}")
        w = SimWorkload(len(self.workloads) + 1, node, kind, to or "*", count, size, rate)
        self.workloads.append(w)
        self._pump(w, self.sim.now_s)
        return w

    def _pump(self, w: SimWorkload, started_s: float) -> None:
        """Send what is due now; schedule the next send (rate), or a retry while the window is full."""
        sim = self.sim
        sent_now = 0
        while w.sent < w.count and w.error is None:
            msg_id = self._new_msg_id(w.node)
            payload = make_payload(msg_id, w.size)
            try:
                if w.kind == "multicast":
                    sim.request(w.node, "multicast", "send", {"payload": payload})
                    self.history.add(w.node, sim.now_s, "app_send", {"msg_id": msg_id, "kind": w.kind, "to": "*",
                                                                      "size": len(payload)})
                else:
                    self.history.add(w.node, sim.now_s, "app_send", {"msg_id": msg_id, "kind": w.kind, "to": w.to,
                                                                      "size": len(payload)})
                    sim.request(w.node, "unicast", "send", {"to": w.to, "payload": payload})
            except WindowFull:
                self.msg_counter[w.node] -= 1  # not taken: the same id goes again
                if w.blocked_since_s is None:
                    w.blocked_since_s = sim.now_s
                sim.at(sim.now_s + POLL_S, lambda: self._pump(w, started_s))
                return
            except UsageError as exc:
                w.error = str(exc)
                return
            if w.blocked_since_s is not None:
                w.blocked_s += sim.now_s - w.blocked_since_s
                w.blocked_since_s = None
            w.sent += 1
            sent_now += 1
            if w.rate > 0 and w.sent < w.count:
                sim.at(max(sim.now_s, started_s + w.sent / w.rate), lambda: self._pump(w, started_s))
                return
            if w.rate == 0 and sent_now >= BURST and w.sent < w.count:
                sim.at(sim.now_s, lambda: self._pump(w, started_s))  # let arrivals in between, as the node does
                return

    # --- the controller history ---------------------------------------------------------------------------
    def _start_fault(self, kind: str, detail: dict[str, Any]) -> str:
        fault_id = f"{kind}-{self._fault_ids.getrandbits(32):08x}"
        self.active[fault_id] = kind
        now = self.history.base_ts + self.sim.now_s
        self.record("fault_start", fault_id=fault_id, kind=kind, detail=detail, applied_ts=now, effective_ts=now)
        return fault_id

    def _end_faults(self, kinds: Iterable[str], only: str | None = None,
                    detail: Mapping[str, Any] | None = None) -> None:
        """Record the end of every open fault of `kinds` (or of the one fault `only`), with `detail` when given."""
        now = self.history.base_ts + self.sim.now_s
        extra = {"detail": dict(detail)} if detail else {}
        for fault_id, kind in list(self.active.items()):
            if kind in kinds and only in (None, fault_id):
                del self.active[fault_id]
                self.record("fault_end", fault_id=fault_id, kind=kind, applied_ts=now, effective_ts=now, **extra)

    def is_active(self, fault_id: str) -> bool:
        return fault_id in self.active

    def lease(self, fault_id: str, ttl_s: float) -> None:
        """A lease guards against a controller that dies; the simulator is its own controller and cannot die
        apart from its faults, so a lease is checked and kept, never expires."""
        from chaos.net.lease import check_ttl

        check_ttl(ttl_s)

    # --- partitions -----------------------------------------------------------------------------------------
    def partition(self, grudge: Mapping[str, Iterable[str]] | str, jam: Jam | None = None) -> str:
        if isinstance(grudge, str):
            grudge = grudges.parse_grudge(grudge, self._nodes, self.topologies)
        grudges.check_grudge(grudge, self._nodes)
        grudge = grudges.union(grudge)
        lifted = self.sim.heal()
        for src, dst in sorted(grudges.cut_links(grudge)):
            if jam is None:
                self.sim.partition(src, dst)
            else:
                self.sim.jam(src, dst, jam.release, jam.cap)
        self._end_faults(("partition",), detail=grudges.jam_end_detail(lifted))
        return self._start_fault("partition", grudges.partition_detail(grudge, jam))

    def heal(self) -> None:
        self._end_faults(("partition",), detail=grudges.jam_end_detail(self.sim.heal()))

    # --- link faults ----------------------------------------------------------------------------------------
    def _set_links(self, updates: Mapping[tuple[str, str], LinkFault], merge: bool) -> None:
        for fault in updates.values():
            extra = set(fault.as_dict()) - set(SIMULATED_LINK_FIELDS)
            if extra:
                raise UsageError(f"{', '.join(sorted(extra))} have no simulator equivalent", hint=REFUSED_HINT)
        if not merge:
            self.links = {}
            self.sim.reset_links()
        for pair, fault in updates.items():
            values = fault.as_dict()
            merged = {**self.links.get(pair, {}), **{k: v for k, v in values.items() if v}}
            self.links[pair] = merged
            self.sim.set_link(pair[0], pair[1], loss_pct=merged.get("loss_pct", 0.0),
                              delay_ms=max(1.0, merged.get("delay_ms", 1.0)), jitter_ms=merged.get("jitter_ms", 0.0),
                              dup_pct=merged.get("duplicate_pct", 0.0), reorder_pct=merged.get("reorder_pct", 0.0))

    def _scope(self, links: Iterable[tuple[str, str]] | None) -> list[tuple[str, str]]:
        pairs = list(links) if links is not None else grudges.all_links(self._nodes)
        grudges.check_matrix({p: LinkFault() for p in pairs}, self._nodes)
        return pairs

    def slow(self, delay_ms: float, jitter_ms: float = 0.0, links: Iterable[tuple[str, str]] | None = None,
             **more: float | str) -> str:
        fault = grudges.link_fault({"delay_ms": delay_ms, "jitter_ms": jitter_ms, **more})
        pairs = self._scope(links)
        self._set_links(grudges.matrix(pairs, fault), merge=True)
        return self._start_fault("slow", {"links": {f"{s}->{d}": fault.as_dict() for s, d in pairs}})

    def flaky(self, loss_pct: float, links: Iterable[tuple[str, str]] | None = None) -> str:
        fault = grudges.link_fault({"loss_pct": loss_pct})
        pairs = self._scope(links)
        self._set_links(grudges.matrix(pairs, fault), merge=True)
        return self._start_fault("flaky", {"links": {f"{s}->{d}": fault.as_dict() for s, d in pairs}})

    def shape(self, matrix: Mapping[tuple[str, str], LinkFault] | str) -> str:
        if isinstance(matrix, str):
            matrix = grudges.parse_matrix(matrix, self._nodes)
        self._set_links(dict(matrix), merge=False)
        return self._start_fault("shape", {"links": {f"{s}->{d}": f.as_dict() for (s, d), f in matrix.items()}})

    def end_links(self, fault_id: str, matrix: Mapping[tuple[str, str], LinkFault]) -> None:
        self._set_links(dict(matrix), merge=False)
        if fault_id in self.active:
            self._end_faults((self.active[fault_id],), only=fault_id)

    def fast(self) -> None:
        self.links = {}
        self.sim.reset_links()
        self.sim.clear_faults()
        self.msg_faults.clear()
        self._end_faults(("slow", "flaky", "shape", "msg_fault"))

    # --- message faults -------------------------------------------------------------------------------------
    def msg_fault(self, rule: MsgRule) -> str:
        from node.sim import faults
        from node.wire import message_types

        grudges.check_matrix({(rule.src, rule.dst): LinkFault()}, self._nodes)
        if rule.action.startswith("duplicate"):
            raise UsageError("the duplicate message fault has no simulator equivalent", hint=REFUSED_HINT)
        cls = message_types()[rule.type]
        sim = self.sim
        base = faults.fields_equal(conn_id=rule.conn_id, seqno=rule.seqno, first=rule.first)
        holder: dict[str, Any] = {}
        if rule.action == "drop-range":
            base = faults.all_of(base, faults.seqno_within(rule.seqno_lo, rule.seqno_hi))
        switch = faults.Switch()
        if rule.action in ("drop", "drop-range"):
            switch.where = base
            sim_id = sim.drop_matching(rule.src, rule.dst, cls, where=switch)
        elif rule.action == "drop-first":
            switch.where = base
            sim_id = sim.drop_matching(rule.src, rule.dst, cls, where=switch, count=rule.n)
        elif rule.action == "drop-nth":
            switch.where = faults.nth_only(rule.n, base)
            sim_id = sim.drop_matching(rule.src, rule.dst, cls, where=switch)
        elif rule.action == "drop-every":
            switch.where = faults.every_nth(rule.n, base)
            sim_id = sim.drop_matching(rule.src, rule.dst, cls, where=switch)
        elif rule.action == "delay":
            switch.where = base
            sim_id = sim.delay_matching(rule.src, rule.dst, cls, rule.ms / 1000, where=switch)
        else:  # hold: from the first match on for `ms`, then released together; later matches pass
            def first_then_window(msg: Any) -> bool:
                if not base(msg):
                    return False
                if "release_at" not in holder:
                    holder["release_at"] = sim.now_s + rule.ms / 1000
                    sim.at(holder["release_at"], lambda: sim.release(holder["id"]))
                return True
            switch.where = first_then_window
            sim_id = holder["id"] = sim.hold(rule.src, rule.dst, cls, where=switch)
        fault_id = self._start_fault("msg_fault", asdict(rule))
        self.msg_faults[fault_id] = (sim_id, switch, holder)
        return fault_id

    def end_rule(self, fault_id: str, rule: MsgRule) -> None:
        """End the message fault `fault_id` (a hold that holds messages keeps them until its release time)."""
        found = self.msg_faults.pop(fault_id, None)
        if found is not None:
            sim_id, switch, holder = found
            switch.off()
            if sim_id in self.sim.faults.faults and "release_at" not in holder:
                self.sim.remove_fault(sim_id)
        self._end_faults(("msg_fault",), only=fault_id)

    # --- injection ------------------------------------------------------------------------------------------
    def inject(self, src: str, dst: str, data: bytes, count: int = 1, sign: bool = False) -> str:
        grudges.check_matrix({(src, dst): LinkFault()}, self._nodes)
        for _ in range(count):
            self.sim.inject_bytes(dst, data, sign=sign)
        fault_id = f"inject-{self._fault_ids.getrandbits(32):08x}"
        now = self.history.base_ts + self.sim.now_s
        self.record("fault_start", fault_id=fault_id, kind="inject",
                    detail={"from": src, "to": dst, "count": count, "bytes": len(data), "signed": sign},
                    applied_ts=now, effective_ts=now)
        return fault_id

    # --- processes: not simulated ---------------------------------------------------------------------------
    def _refuse(self, action: str) -> Any:
        raise UsageError(refusal(action, None, self._nodes) or action, hint=REFUSED_HINT)

    def pause(self, node: str, method: str = "docker") -> str:
        return self._refuse("pause")

    def resume(self, node: str) -> None:
        self._refuse("resume")

    def kill(self, node: str) -> str:
        return self._refuse("kill")

    def start(self, node: str) -> None:
        self._refuse("start")

    def restart(self, node: str) -> str:
        return self._refuse("restart")

    # --- everything -----------------------------------------------------------------------------------------
    def heal_all(self) -> int:
        settled = len(self.active)
        self.sim.heal()
        self.links = {}
        self.sim.reset_links()
        self.sim.clear_faults()
        self.msg_faults.clear()
        self._end_faults(set(self.active.values()))
        now = self.history.base_ts + self.sim.now_s
        self.record("heal", applied_ts=now, effective_ts=now)
        return settled


__all__ = ["SimNet", "SimHistory", "refusal"]
