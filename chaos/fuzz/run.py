"""The driver of `splitlab fuzz`: sends generated (chaos.fuzz.gen) or recorded datagrams at a running cluster,
watches the targets while it does, and judges them afterwards.

- Context: every member's /state (windows, conn_ids, view, boot) for the generator; drop counters and every
  layer's counters before and after; `/health` for liveness and the process RSS (`rss_bytes`).
- Sending: `chaos.wire.inject.Injector`, raw sockets in member namespaces, only between the run's data addresses,
  paced at `rate_per_s` (0: as fast as possible); with the run's key (`Settings.auth_key`, `splitlab fuzz
  --sign`) each datagram is signed after its mutation, so it reaches the protocols behind the authenticated wire.
  Every `check_every_s` each target's `/health` must answer within `hang_timeout_s`; a target that does not is
  hung: sending stops, and the datagrams sent to it in the last two check intervals are its suspects (a node may
  still be reading an interval's backlog when it answers).
- Recording (chaos.fuzz.record): every datagram sent goes to the run's fuzz directory, for replays.
- Settling: after `settle_s`, until every member takes in fewer than `QUIET_DATAGRAMS_PER_S` datagrams a second
  (`wait_until_quiet`, at most `settle_timeout_s`): a node still working off the backlog its socket buffered, and
  the resyncs the forgeries set off, would otherwise meet the checks' workload with forged datagrams not yet read
  (seen on a slow machine: a forged SYNC-OK read after the delivery check had measured the windows moved one past
  the workload's messages).
- Checks afterwards: every target answers `/health` within `health_timeout_s`; each target's RSS grew less than
  `max_rss_growth_bytes`; after the cluster recovered (all hear all, one view of all), a workload (unicast to
  the next member and multicast from each) is delivered in full.
- Culprits: a hung target's suspects (above); for a stuck stream, the well-formed datagrams of its layer that
  reached its receiver in its sender's name; for a node that died, every well-formed datagram in a member's name
  (chaos.fuzz.shrink delta-debugs them on request).
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from chaos.fuzz import gen as fuzzgen
from chaos.cluster.lifecycle import Cluster
from chaos.fuzz.record import Recorder, load_replay, retarget
from chaos.cluster.client import NodeClient
from node import wire
from node.auth import WireKey
from node.errors import EnvironmentProblem, UsageError, WireError
from node.unicast.connid import same_stream

Log = Callable[[str], None]
MIB = 1 << 20


@dataclass
class Settings:
    """How to fuzz and how to judge; the defaults are the command line's."""

    targets: list[str]
    rate_per_s: float = 1000.0
    check_every_s: float = 0.5
    hang_timeout_s: float = 5.0
    health_timeout_s: float = 1.0
    settle_s: float = 1.0
    settle_timeout_s: float = 30.0  # the longest wait for quiet members after sending (`wait_until_quiet`)
    max_rss_growth_bytes: int = 64 * MIB
    workload_count: int = 100
    recover_timeout_s: float = 30.0
    deliver_timeout_s: float = 30.0
    check_delivery: bool = True
    forged: bool = True  # well-formed forgeries were sent: a forged message may have taken a real one's place
    shrink_watch_s: float = 8.0  # how long a shrinking trial watches the target after its small workload
    auth_key: WireKey | None = None  # signs every datagram after its mutation (`--sign`; None: sent as made)


@dataclass
class Culprits:
    """What a failed check blames: a symptom and the datagrams suspected of it (in the order sent)."""

    target: str
    check: str
    symptom: str
    cases: list[fuzzgen.Case]
    confirmed: bool = False  # shrink saw these alone break the target from a fresh start
    stream: dict[str, str] | None = None  # a stuck stream's sender, receiver and layer (None: the target died)


@dataclass
class Outcome:
    """Everything a fuzz run measured and concluded."""

    sent: int = 0
    elapsed_s: float = 0.0
    mutations: Counter = field(default_factory=Counter)
    spoofed: int = 0
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)  # health, memory, delivery: ok, detail, nodes
    drops: dict[str, dict[str, int]] = field(default_factory=dict)   # target -> reason -> delta
    layer_counters: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    culprits: list[Culprits] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c["ok"] is not False for c in self.checks.values()) and not self.culprits


QUIET_DATAGRAMS_PER_S = 100.0  # a member of an idle cluster takes in a few a second: heartbeats, acks, views
SETTLE_POLL_S = 0.5


def wait_until_quiet(read_received: Callable[[], dict[str, int] | None], timeout_s: float,
                     poll_s: float = SETTLE_POLL_S, quiet_per_s: float = QUIET_DATAGRAMS_PER_S,
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep) -> tuple[bool, float, dict[str, float]]:
    """Poll `read_received` (member -> datagrams it has received so far; None when one does not answer) every
    `poll_s` until, over one interval, every member took in fewer than `quiet_per_s` a second, or `timeout_s`
    passed, or a member stopped answering (the health check judges that). Returns (quiet, waited_s, the last
    interval's rates per member)."""
    started = clock()
    last = read_received()
    rates: dict[str, float] = {}
    while last is not None and clock() - started < timeout_s:
        before_s = clock()
        sleep(poll_s)
        now = read_received()
        if now is None:
            break
        elapsed_s = max(clock() - before_s, 1e-9)
        rates = {n: (now[n] - last.get(n, 0)) / elapsed_s for n in now}
        if all(rate < quiet_per_s for rate in rates.values()):
            return True, clock() - started, rates
        last = now
    return False, clock() - started, rates


# --- the cluster's side ----------------------------------------------------------------------------------------
def _client(cluster: Cluster, node: str, timeout_s: float) -> NodeClient:
    info = cluster.node(node)
    return NodeClient(info.name, info.control_url, cluster.token, timeout_s=timeout_s)


def health(cluster: Cluster, node: str, timeout_s: float) -> dict[str, Any]:
    """`{"ok", "latency_ms", "rss_bytes", "error"}` of one /health request that must answer within `timeout_s`."""
    started = time.monotonic()
    try:
        data = _client(cluster, node, timeout_s).health()
    except EnvironmentProblem as exc:
        return {"ok": False, "latency_ms": round((time.monotonic() - started) * 1000, 1), "rss_bytes": None,
                "error": exc.message}
    return {"ok": bool(data.get("ok")), "latency_ms": round((time.monotonic() - started) * 1000, 1),
            "rss_bytes": data.get("rss_bytes"), "error": None}


def states(cluster: Cluster, nodes: Iterable[str], timeout_s: float = 5.0) -> dict[str, dict[str, Any]]:
    """The /state of each of `nodes`. Raises `EnvironmentProblem` when one does not answer."""
    return {n: _client(cluster, n, timeout_s).state() for n in nodes}


def context(cluster: Cluster, targets: list[str], member_states: dict[str, dict[str, Any]]) -> fuzzgen.Context:
    """The generator's view of the cluster from every member's /state."""
    return fuzzgen.Context(cluster.run_id, tuple(cluster.names),
                           tuple(fuzzgen.target_view(member_states[t]) for t in targets),
                           {n: int(s.get("boot") or 0) for n, s in member_states.items()})


def check_targets(cluster: Cluster, settings: Settings) -> None:
    """Raises `UsageError` for a target that is not a node of the run, a run on other hosts (the fuzzer sends
    through raw sockets of this process, in the namespaces of this machine)."""
    unknown = [t for t in settings.targets if t not in cluster.names]
    if unknown or not settings.targets:
        raise UsageError(f"unknown target(s) {', '.join(unknown) or '(none)'}; run {cluster.run_id} has "
                         f"{', '.join(cluster.names)}")
    remote = sorted({n.host for n in cluster.nodes if n.host})
    if remote:
        raise UsageError(f"run {cluster.run_id} has nodes on {', '.join(remote)}: the fuzzer sends from sockets of "
                         f"this process, which reach only namespaces on this machine",
                         hint="fuzz a cluster started without --inventory")


EXIT_WAIT_S = 3.0  # a node that stops on an error shuts down (flushing its history) before its process ends


def why_silent(cluster: Cluster, node: str, error: str) -> str:
    """Why `node` does not answer: how its process ended, if it ends within `EXIT_WAIT_S`, else `error`."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while True:
        status = process_status(cluster, node)
        if status is not None or time.monotonic() > deadline:
            return status or error
        time.sleep(0.2)


def process_status(cluster: Cluster, node: str) -> str | None:
    """None while `node`'s container runs; else how its process ended, with the last lines of its log."""
    import docker.errors

    from chaos.cluster.lifecycle import docker_client

    try:
        ctr = docker_client().containers.get(cluster.node(node).container)
    except docker.errors.DockerException as exc:
        return f"its container cannot be inspected: {exc}"
    if ctr.status == "running":
        return None
    tail = ctr.logs(tail=3).decode(errors="replace").strip().replace("\n", " | ")
    return f"its process exited (code {ctr.attrs['State'].get('ExitCode')}); last log lines: {tail}"


# --- sending ---------------------------------------------------------------------------------------------------
class _Watch:
    """Per target: the datagrams sent to it in the current and the previous check interval, and its RSS at the
    last check with the interval that grew it most."""

    def __init__(self, targets: list[str]) -> None:
        self.current: dict[str, list[fuzzgen.Case]] = {t: [] for t in targets}
        self.previous: dict[str, list[fuzzgen.Case]] = {t: [] for t in targets}
        self.rss: dict[str, int | None] = {t: None for t in targets}
        self.worst_growth: dict[str, tuple[int, list[fuzzgen.Case]]] = {}

    def sent(self, case: fuzzgen.Case) -> None:
        self.current[case.target].append(case)

    def suspects(self, target: str) -> list[fuzzgen.Case]:
        return self.previous[target] + self.current[target]

    def passed(self, target: str, rss: int | None) -> None:
        last = self.rss[target]
        if rss is not None and last is not None and rss - last > self.worst_growth.get(target, (0, []))[0]:
            self.worst_growth[target] = (rss - last, list(self.current[target]))
        self.rss[target] = rss if rss is not None else last
        self.previous[target], self.current[target] = self.current[target], []


def _endpoints(cluster: Cluster) -> dict[str, Any]:
    from chaos.wire.probe import Endpoint

    return {n.name: Endpoint(n.name, n.pid, n.wire_ip) for n in cluster.nodes}


def send_cases(cluster: Cluster, cases: Iterable[fuzzgen.Case], settings: Settings, outcome: Outcome,
               recorder: Recorder | None, log: Log, watch: _Watch | None = None) -> dict[str, str]:
    """Send `cases`, checking the targets every `check_every_s`; returns the hung targets with their symptom
    (sending stops at the first hang)."""
    from chaos.wire.inject import Injector

    watch = watch or _Watch(settings.targets)
    hung: dict[str, str] = {}
    rate = settings.rate_per_s
    started = time.monotonic()
    paced_from = started
    next_check = started + settings.check_every_s
    report_at = started + 5.0
    with Injector(_endpoints(cluster)) as injector:
        for case in cases:
            if case.target not in watch.current:
                raise UsageError(f"datagram {case.index} is aimed at {case.target}, not a target of this run "
                                 f"({', '.join(settings.targets)})")
            if rate > 0:
                ahead_s = paced_from + outcome.sent / rate - time.monotonic()
                if ahead_s > 0.001:
                    time.sleep(ahead_s)
            data = case.data if settings.auth_key is None else wire.sign(settings.auth_key, case.data)
            packet = injector.packet(case.src, case.target, data)
            try:
                injector.send_packet(case.via, packet)
            except EnvironmentProblem as exc:
                status = process_status(cluster, case.via)
                if status is None:
                    raise
                hung[case.via] = f"its namespace went away while fuzzing ({exc.message}): {status}"
                break
            if recorder is not None:
                recorder.write(case, packet)
            watch.sent(case)
            outcome.sent += 1
            outcome.mutations[case.mutation] += 1
            outcome.spoofed += case.via != case.src
            now = time.monotonic()
            if now >= next_check:
                for target in settings.targets:
                    result = health(cluster, target, settings.hang_timeout_s)
                    if result["ok"]:
                        watch.passed(target, result["rss_bytes"])
                    else:
                        hung[target] = (f"/health did not answer within {settings.hang_timeout_s:g} s while fuzzing: "
                                        f"{why_silent(cluster, target, result['error'])}")
                if hung:
                    break
                paced_from += time.monotonic() - now  # the pause for the checks is not owed to the rate
                next_check = time.monotonic() + settings.check_every_s
            if now >= report_at:
                log(f"  {outcome.sent} datagrams sent ({outcome.sent / (now - started):.0f}/s)")
                report_at = now + 5.0
    outcome.elapsed_s += time.monotonic() - started
    for target, symptom in hung.items():
        outcome.culprits.append(Culprits(target, "health", symptom, watch.suspects(target)
                                         if target in watch.current else []))
    return hung


# --- checks ----------------------------------------------------------------------------------------------------
def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v - before.get(k, 0)}


def counter_deltas(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """(runtime drops by reason, every layer's counters) as after minus before, zero deltas left out."""
    drops = _delta(after.get("dropped", {}), before.get("dropped", {}))
    layers = {"runtime": _delta(after.get("counters", {}), before.get("counters", {}))}
    for name, layer in after.get("layers", {}).items():
        if isinstance(layer, dict) and isinstance(layer.get("counters"), dict):
            old = before.get("layers", {}).get(name, {}).get("counters", {})
            layers[name] = _delta(layer["counters"], old)
    return drops, {k: v for k, v in layers.items() if v}


def _views_agree(member_states: dict[str, dict[str, Any]], names: list[str]) -> str | None:
    """None when every member hears every other one and all share one view of all; else what is wrong."""
    for node, state in member_states.items():
        heard = {p for p, rec in state.get("layers", {}).get("liveness", {}).items() if rec.get("heard")}
        if heard != set(names) - {node}:
            return f"{node} hears {sorted(heard)}"
    views = {json.dumps(s.get("view"), sort_keys=True) for s in member_states.values()}
    if len(views) > 1:
        return "views differ: " + ", ".join(f"{n}: {s.get('view')}" for n, s in member_states.items())
    view = next(iter(member_states.values())).get("view")
    if view is not None and sorted(view["members"]) != sorted(names):
        return f"the view is {view}"
    return None


class _Gone(Exception):
    """A node stopped answering its control API during the delivery check."""

    def __init__(self, node: str, detail: str) -> None:
        super().__init__(detail)
        self.node = node
        self.detail = detail


def _received(cluster: Cluster) -> dict[str, int] | None:
    """Every member's count of datagrams received (its /state); None when one does not answer."""
    try:
        return {n: s["counters"].get("datagrams_received", 0) for n, s in _states_of(cluster, cluster.names).items()}
    except _Gone:
        return None


def _states_of(cluster: Cluster, names: list[str]) -> dict[str, dict[str, Any]]:
    """Every member's /state; raises `_Gone` naming the first that does not answer (and how its process is)."""
    out = {}
    for node in names:
        try:
            out[node] = _client(cluster, node, 5.0).state()
        except EnvironmentProblem as exc:
            raise _Gone(node, why_silent(cluster, node, exc.message)) from None
    return out


def check_delivery(cluster: Cluster, settings: Settings, log: Log) -> dict[str, Any]:
    """After recovery, every member unicasts `workload_count` messages to the next member and multicasts as
    many; every receiver must deliver all of them within `deliver_timeout_s`. After well-formed forgeries
    (`settings.forged`), once the workloads are sent and every stream has caught up (every receiver is where its
    sender is), the messages still short are counted as taken by forged messages delivered in their place
    (`taken_by_forgeries`): a forged message inside a window is delivered as its claimed sender's, and the real
    one with its seqno is then a duplicate. That is allowed only as far as the receivers held seqnos above their
    senders' streams when the workload began (`forged_ahead`: forged messages delivered or buffered there, or
    seqnos a forged skip passed, which no sender's word has undone yet); more short fails the check. A node that
    stops answering fails the check (`gone`: the node)."""
    names = cluster.names
    if len(names) < 2:
        return {"ok": None, "detail": "a single node: nothing to deliver"}
    try:
        return _deliver(cluster, names, settings, log)
    except _Gone as gone:
        return {"ok": False, "gone": gone.node, "detail": f"{gone.node} stopped answering during the delivery "
                                                          f"check: {gone.detail}"}


def _deliver(cluster: Cluster, names: list[str], settings: Settings, log: Log) -> dict[str, Any]:
    deadline = time.monotonic() + settings.recover_timeout_s
    while True:
        member_states = _states_of(cluster, names)
        wrong = _views_agree(member_states, names)
        if wrong is None:
            break
        if time.monotonic() > deadline:
            return {"ok": False, "detail": f"the cluster did not recover within {settings.recover_timeout_s:g} s: "
                                           f"{wrong}"}
        time.sleep(0.25)
    count = settings.workload_count
    forged_ahead = sum(s["ahead"] for s in _streams(member_states))
    multicast = all(s.get("layers", {}).get("multicast") for s in member_states.values())
    before = {n: member_states[n]["counters"].get("delivered", 0) for n in names}
    expected = {n: count + (count * (len(names) - 1) if multicast else 0) for n in names}
    log(f"delivery: {count} unicasts to the next member{' and ' + str(count) + ' multicasts' if multicast else ''} "
        f"from each of {len(names)} members")
    for i, node in enumerate(names):
        try:
            client = cluster.client(node)
            client.unicast(names[(i + 1) % len(names)], count=count, size=100, rate=0)
            if multicast:
                client.multicast(count=count, size=100, rate=0)
        except EnvironmentProblem as exc:
            raise _Gone(node, why_silent(cluster, node, exc.message)) from None
    deadline = time.monotonic() + settings.deliver_timeout_s
    while True:
        now_states = _states_of(cluster, names)
        got = {n: now_states[n]["counters"].get("delivered", 0) - before[n] for n in names}
        if all(got[n] >= expected[n] for n in names):
            return {"ok": True, "detail": f"{sum(got.values())} of {sum(expected.values())} delivered",
                    "nodes": {n: {"delivered": got[n], "expected": expected[n]} for n in names}}
        streams = stuck_streams(now_states)
        sent = all(w.get("done") for st in now_states.values() for w in st.get("workloads", []))
        if settings.forged and sent and not streams:
            # every receiver is where its senders are, some messages short: forged messages delivered in their
            # place (a forged message inside a window is taken as its claimed sender's: DESIGN.md)
            short = sum(expected[n] - got[n] for n in names)
            allowed = short <= forged_ahead
            return {"ok": allowed,
                    "detail": f"{sum(got.values())} of {sum(expected.values())} delivered, every stream caught up; "
                              f"{short} seqno(s) taken by forged messages delivered in their place "
                              + ("(allowed: DESIGN.md, 'What is not defended': " if allowed else "(more than ")
                              + f"the {forged_ahead} seqno(s) the receivers held above their senders' streams "
                                f"when the workload began)",
                    "nodes": {n: {"delivered": got[n], "expected": expected[n]} for n in names},
                    "taken_by_forgeries": short, "forged_ahead": forged_ahead}
        if time.monotonic() > deadline:
            short = ", ".join(f"{n} {got[n]}/{expected[n]}" for n in names if got[n] < expected[n])
            return {"ok": False, "detail": f"not delivered within {settings.deliver_timeout_s:g} s: {short}; "
                                           + ("; ".join(s["detail"] for s in streams) or "no stream stuck"),
                    "nodes": {n: {"delivered": got[n], "expected": expected[n]} for n in names},
                    "streams": streams}
        time.sleep(0.2)


def _streams(member_states: dict[str, dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every sender->receiver stream both ends report: its layer, where its receiver and its sender stand (the
    `detail`), whether it is `stuck` (the receiver not where the sender is: a multicast window whose delivered
    seqno differs from the sender's highest sent, a unicast receive entry behind or ahead of the send entry or on
    another conn_id) and how many seqnos above the sender's highest sent the receiver holds, delivered or
    buffered, on any generation of the sender's stream (`ahead`: only forged messages, or a forged SYNC-OK's or
    BcastState's skip, can put a window there, and each seqno takes the place of the real one)."""
    for sender, s_state in member_states.items():
        s_layers = s_state.get("layers", {})
        m_send = (s_layers.get("multicast") or {}).get("send") or {}
        u_peers = (s_layers.get("unicast") or {}).get("peers") or {}
        for receiver, r_state in member_states.items():
            if receiver == sender:
                continue
            r_layers = r_state.get("layers", {})
            window = ((r_layers.get("multicast") or {}).get("windows") or {}).get(sender)
            pair = {"sender": sender, "receiver": receiver}
            if m_send and window:
                yield {**pair, "layer": "multicast", "stuck": window["low"] != m_send["highest_sent"],
                       "ahead": _held_above(window["low"], window["highest_received"], window["buffered"],
                                            m_send["highest_sent"]),
                       "detail": f"{sender}->{receiver} multicast: {receiver} delivered up to {window['low']} "
                                 f"(skipped {window['counters'].get('skipped', 0)}), {sender} sent up to "
                                 f"{m_send['highest_sent']}"}
            send = (u_peers.get(receiver) or {}).get("send")
            recv = (((r_layers.get("unicast") or {}).get("peers") or {}).get(sender) or {}).get("recv")
            if send:
                same = recv is not None and recv["conn_id"] == send["conn_id"]
                # a window of another generation of the sender's stream counts its seqnos as the sender does (a
                # forged SYNC-OK answering a SYNC of the receiver's can move it there, above what the sender sent)
                stream = recv is not None and same_stream(recv["conn_id"], send["conn_id"])
                where = "no receive entry" if not recv else \
                    f"conn_id {recv['conn_id']} delivered up to {recv['highest_delivered']}"
                yield {**pair, "layer": "unicast",
                       "stuck": bool(send["unacked"]) and (not same
                                                           or recv["highest_delivered"] != send["highest_sent"]),
                       "ahead": _held_above(recv["highest_delivered"], recv["highest_received"], recv["buffered"],
                                            send["highest_sent"]) if stream else 0,
                       "detail": f"{sender}->{receiver} unicast: {receiver} has {where}, {sender} sent up to "
                                 f"{send['highest_sent']} on conn_id {send['conn_id']} ({send['unacked']} unacked)"}


def _held_above(delivered: int, received: int, buffered: int, sent: int) -> int:
    """How many seqnos above `sent` a window holds: those delivered, and at most `buffered` of those received."""
    return max(0, delivered - sent) + min(buffered, max(0, received - max(delivered, sent)))


def stuck_streams(member_states: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every sender->receiver stream whose receiver is not where its sender is (`_streams`)."""
    return [{k: s[k] for k in ("sender", "receiver", "layer", "detail")} for s in _streams(member_states)
            if s["stuck"]]


LAYER_TYPES = {"unicast": range(16, 48), "multicast": range(48, 80)}


def delivery_culprits(record: Path, delivery: dict[str, Any], members: list[str], run_id: str) -> list[Culprits]:
    """The recorded datagrams a failed delivery check blames (made for run `run_id`): for each stuck stream, the
    well-formed ones that reached the stream's receiver in the sender's name with a message of the stream's
    layer; for a node that stopped answering, every well-formed one in a member's name, whichever member it
    reached (the protocols saw only those, and a peer they broke can break the node in turn)."""
    streams = delivery.get("streams") or []
    gone = delivery.get("gone")
    if not streams and not gone:
        return []
    header, cases, _ = load_replay(record)
    cluster_id = wire.cluster_id_of(run_id)
    found: dict[int, list[fuzzgen.Case]] = {i: [] for i in range(len(streams) + 1)}
    for case in retarget(cases, header["run_id"], run_id):
        try:
            sender, _, messages = wire.decode_datagram_from(case.data, cluster_id)
        except WireError:
            continue
        for i, stream in enumerate(streams):
            if (case.target == stream["receiver"] and sender == stream["sender"]
                    and any(m.TYPE in LAYER_TYPES[stream["layer"]] for m in messages)):
                found[i].append(case)
        if gone and sender in members:
            found[len(streams)].append(case)
    out = [Culprits(s["receiver"], "delivery", s["detail"], found[i],
                    stream={k: s[k] for k in ("sender", "receiver", "layer")}) for i, s in enumerate(streams)]
    if gone:
        out.append(Culprits(gone, "delivery", delivery["detail"], found[len(streams)]))
    return out


def judge(cluster: Cluster, settings: Settings, outcome: Outcome, before: dict[str, dict[str, Any]],
          rss_before: dict[str, int | None], hung: dict[str, str], watch: _Watch, log: Log,
          record: Path | None = None) -> None:
    """The checks after sending: health, memory, drop counters, delivery (into `outcome`), once the members are
    quiet (see the module docstring)."""
    time.sleep(settings.settle_s)
    quiet, waited_s, rates = wait_until_quiet(lambda: _received(cluster), settings.settle_timeout_s)
    rates_text = ", ".join(f"{n} {rate:.0f}/s" for n, rate in rates.items()) or "a member did not answer"
    log(f"settled: every member quiet after {waited_s:.1f} s" if quiet else
        f"not quiet after {waited_s:.1f} s (datagrams received: {rates_text}): judging anyway")
    nodes_health = {t: health(cluster, t, settings.health_timeout_s) for t in settings.targets}
    bad = [t for t, h in nodes_health.items() if not h["ok"]]
    outcome.checks["health"] = {
        "ok": not bad, "nodes": nodes_health,
        "detail": (f"every target answered /health within {settings.health_timeout_s:g} s" if not bad else
                   "no answer within {:g} s from {}".format(settings.health_timeout_s, ", ".join(bad)))}
    for target in bad:
        if target not in hung:
            symptom = (f"/health did not answer within {settings.health_timeout_s:g} s after fuzzing: "
                       f"{why_silent(cluster, target, nodes_health[target]['error'])}")
            outcome.culprits.append(Culprits(target, "health", symptom, watch.suspects(target)))
    memory, over = {}, []
    for t in settings.targets:
        after, first = nodes_health[t]["rss_bytes"], rss_before.get(t)
        growth = None if after is None or first is None else after - first
        memory[t] = {"before": first, "after": after, "growth": growth}
        if growth is not None and growth >= settings.max_rss_growth_bytes:
            over.append(t)
            worst = watch.worst_growth.get(t)
            outcome.culprits.append(Culprits(
                t, "memory", f"RSS grew {growth / MIB:.1f} MiB (bound {settings.max_rss_growth_bytes / MIB:g} MiB); "
                             f"the check interval that grew it most ({(worst[0] if worst else 0) / MIB:.1f} MiB) "
                             "sent these", worst[1] if worst else []))
    unknown = [t for t in settings.targets if memory[t]["growth"] is None and t not in bad]
    outcome.checks["memory"] = {
        "ok": False if over else (None if unknown else True), "nodes": memory,
        "detail": (f"RSS growth of {', '.join(over)} at or above {settings.max_rss_growth_bytes / MIB:g} MiB" if over
                   else f"no rss_bytes from {', '.join(unknown)} (a node image older than this controller?)"
                   if unknown else f"every target's RSS grew less than {settings.max_rss_growth_bytes / MIB:g} MiB")}
    alive = [t for t in settings.targets if t not in bad]
    try:
        after_states = _states_of(cluster, alive)
    except _Gone as gone:  # it answered /health a moment ago
        bad.append(gone.node)
        outcome.checks["health"].update(ok=False, detail=f"{gone.node} stopped answering: {gone.detail}")
        outcome.culprits.append(Culprits(gone.node, "health", gone.detail, watch.suspects(gone.node)))
        alive.remove(gone.node)
        after_states = _states_of(cluster, alive)
    for t in alive:
        outcome.drops[t], outcome.layer_counters[t] = counter_deltas(before[t], after_states[t])
    if not settings.check_delivery:
        outcome.checks["delivery"] = {"ok": None, "detail": "not checked (--no-delivery)"}
    elif bad:
        outcome.checks["delivery"] = {"ok": False, "detail": f"not checked: {', '.join(bad)} does not answer"}
    else:
        outcome.checks["delivery"] = check_delivery(cluster, settings, log)
        if record is not None and outcome.checks["delivery"]["ok"] is False:
            outcome.culprits += delivery_culprits(record, outcome.checks["delivery"], cluster.names, cluster.run_id)


def run(cluster: Cluster, cases: Iterable[fuzzgen.Case], settings: Settings, recorder: Recorder | None,
        log: Log, member_states: dict[str, dict[str, Any]] | None = None, record: Path | None = None) -> Outcome:
    """Send `cases` at the targets of `cluster`, then judge (see the module docstring). `record`: the file that
    holds every datagram sent (the recorder's, or a replayed one), read to name the culprits of a failed
    delivery check."""
    check_targets(cluster, settings)
    outcome = Outcome()
    before = member_states or states(cluster, cluster.names)
    rss_before = {t: health(cluster, t, settings.hang_timeout_s)["rss_bytes"] for t in settings.targets}
    watch = _Watch(settings.targets)
    for t in settings.targets:
        watch.rss[t] = rss_before[t]
    try:
        hung = send_cases(cluster, cases, settings, outcome, recorder, log, watch)
    finally:
        if recorder is not None:
            recorder.close()
    if record is None and recorder is not None and recorder.lines:
        record = recorder.jsonl_path
    judge(cluster, settings, outcome, before, rss_before, hung, watch, log, record)
    return outcome
