"""Hand-made run histories for the pipeline tests, and the one Spark session the pipeline tests share.

`clean_scenario()` builds a small three-node run that passes every check: multicasts with one NAKACK4
retransmission, a unicast3 SYNC handshake, a partition with split views, a unicast stranded by it and delivered
after the heal, a merge back to one view. The `with_*` functions each add one anomaly. `Scenario.write()` writes
the events through the node's own `HistoryWriter`, one file per node plus controller.jsonl.
"""
from __future__ import annotations

import atexit
import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from node.history import HistoryWriter

T0_TS = 1_700_000_000.0
BOOT = 1_700_000_000_000
NODES = ("n1", "n2", "n3")
HEAL_S = 3.0
HEAL_EFFECTIVE_S = 3.05


@functools.cache
def shared_spark():
    """One local[2] session for every pipeline test module in this process; stopped at interpreter exit. A
    short-lived JVM, as the pytest plugin's (`splitlab_spark`): C1 only and the serial collector."""
    from pipeline.session import spark_session

    spark = spark_session("local[2]", shuffle_partitions=2, short_lived=True)
    atexit.register(spark.stop)
    return spark


@dataclass
class Ev:
    node: str
    t_s: float  # seconds after T0_TS
    type: str
    fields: dict[str, Any]


@dataclass
class Scenario:
    """A run as a list of events; helpers add application traffic with its protocol steps."""

    run_id: str = "fixture-run"
    events: list[Ev] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    victim: str | None = None  # the message an anomaly is about

    def add(self, node: str, t_s: float, type_: str, **fields: Any) -> None:
        self.events.append(Ev(node, t_s, type_, fields))

    def new_id(self, sender: str) -> str:
        self.counters[sender] = self.counters.get(sender, 0) + 1
        return f"{sender}.{BOOT}.{self.counters[sender]}"

    def multicast(self, sender: str, t_s: float, delivered_at: dict[str, float], seqno: int) -> str:
        """`sender` multicasts at `t_s`; each receiver in `delivered_at` gets it (data_rx + app_deliver) then."""
        msg_id = self.new_id(sender)
        self.add(sender, t_s, "app_send", msg_id=msg_id, kind="multicast", to="*", size=100)
        self.add(sender, t_s, "data_tx", proto="nakack4", to="*", seqno=seqno, conn_id=0, first=False,
                 resend=False, size=100, msg_id=msg_id)
        for receiver, at in delivered_at.items():
            self.add(receiver, at, "data_rx", proto="nakack4", **{"from": sender}, seqno=seqno, conn_id=0,
                     first=False, action="deliver")
            self.add(receiver, at, "app_deliver", msg_id=msg_id, kind="multicast", **{"from": sender})
        return msg_id

    def unicast(self, sender: str, receiver: str, t_s: float, delivered_s: float | None, seqno: int) -> str:
        """`sender` sends to `receiver` over unicast3 at `t_s`; delivered at `delivered_s` (None: never)."""
        msg_id = self.new_id(sender)
        self.add(sender, t_s, "app_send", msg_id=msg_id, kind="unicast", to=receiver, size=50)
        self.add(sender, t_s, "data_tx", proto="unicast3", to=receiver, seqno=seqno, conn_id=7, first=seqno == 1,
                 resend=False, size=50, msg_id=msg_id)
        if delivered_s is not None:
            self.add(receiver, delivered_s, "data_rx", proto="unicast3", **{"from": sender}, seqno=seqno, conn_id=7,
                     first=seqno == 1, action="deliver")
            self.add(receiver, delivered_s, "app_deliver", msg_id=msg_id, kind="unicast", **{"from": sender})
            self.add(receiver, delivered_s, "ack_tx", proto="unicast3", to=sender, seqno=seqno, conn_id=7)
        return msg_id

    def view(self, nodes: tuple[str, ...], t_s: float, coord: str, n: int, members: tuple[str, ...]) -> None:
        for node in nodes:
            self.add(node, t_s, "view", view_id=[coord, n], members=list(members))

    def copy(self) -> "Scenario":
        return copy.deepcopy(self)

    def find(self, type_: str, **match: Any) -> list[Ev]:
        return [e for e in self.events if e.type == type_ and all(
            (e.node if k == "node" else e.fields.get(k)) == v for k, v in match.items())]

    def write(self, run_dir: Path) -> Path:
        """Write events/<node>.jsonl for each writer, in time order, through `HistoryWriter`."""
        by_node: dict[str, list[Ev]] = {}
        for ev in self.events:
            by_node.setdefault(ev.node, []).append(ev)
        for node, evs in by_node.items():
            clock = _Clock()
            with HistoryWriter(run_dir / "events" / f"{node}.jsonl", self.run_id, node, clock=clock) as writer:
                for ev in sorted(evs, key=lambda e: e.t_s):
                    clock.now_s = T0_TS + ev.t_s
                    writer.emit(ev.type, **ev.fields)
        return run_dir


class _Clock:
    def __init__(self) -> None:
        self.now_s = T0_TS

    def __call__(self) -> float:
        return self.now_s


def clean_scenario() -> Scenario:
    """A three-node run with a partition and a heal in which every check passes."""
    s = Scenario()
    for node in NODES:
        s.add(node, 0.0, "node_start", boot=BOOT, data_ip="10.0.0.1", control_ip="10.1.0.1", members=list(NODES),
              config={"unicast": "unicast3", "multicast": "nakack4"})
    s.view(NODES, 0.1, "n1", 1, NODES)
    # phase A: everybody multicasts; n1's second message is lost at n3 and retransmitted
    seq = {n: 0 for n in NODES}
    for i, t in enumerate((0.2, 0.3, 0.4)):
        for k, sender in enumerate(NODES):
            seq[sender] += 1
            at = t + 0.01 * k
            receivers = {r: at + 0.002 + 0.001 * j for j, r in enumerate(NODES) if r != sender}
            if sender == "n1" and i == 1:
                receivers["n3"] = 0.452
            if sender == "n1" and i == 2:
                receivers["n3"] = 0.4525
            s.multicast(sender, at, receivers, seq[sender])
    s.add("n3", 0.45, "xmit_req_tx", proto="nakack4", to="n1", seqnos=[2])
    s.add("n1", 0.451, "xmit_req_rx", proto="nakack4", **{"from": "n3"}, seqnos=[2], found=[2], missing=[])
    s.add("n1", 0.451, "data_tx", proto="nakack4", to="n3", seqno=2, conn_id=0, first=False, resend=True, size=100)
    # unicast3 n2 -> n3 with its SYNC handshake
    for kind, node, peer, t in (("sync", "n2", "n3", 0.5), ("sync_ok", "n3", "n2", 0.501),
                                ("sync_ack", "n2", "n3", 0.502)):
        s.add(node, t, "resync_tx", proto="unicast3", peer=peer, kind=kind, bytes=24, conn_id=7)
    s.unicast("n2", "n3", 0.51, 0.512, seqno=1)
    s.unicast("n2", "n3", 0.61, 0.612, seqno=2)
    # partition n3 away from n1 and n2
    s.add("controller", 1.0, "fault_start", fault_id="f1", kind="partition",
          detail={"grudge": {"n1": ["n3"], "n2": ["n3"], "n3": ["n1", "n2"]}}, applied_ts=T0_TS + 1.0,
          effective_ts=T0_TS + 1.02)
    s.add("n1", 1.15, "suspect", peer="n3")
    s.view(("n1", "n2"), 1.2, "n1", 2, ("n1", "n2"))
    s.view(("n3",), 1.2, "n3", 2, ("n3",))
    seq["n1"] += 1
    s.multicast("n1", 1.5, {"n2": 1.502}, seq["n1"])
    s.unicast("n2", "n3", 1.6, 3.101, seqno=3)  # stranded by the partition, delivered after the heal
    s.add("n2", 3.1, "data_tx", proto="unicast3", to="n3", seqno=3, conn_id=7, first=False, resend=True, size=50)
    s.add("controller", HEAL_S, "fault_end", fault_id="f1", kind="partition", applied_ts=T0_TS + HEAL_S,
          effective_ts=T0_TS + HEAL_EFFECTIVE_S)
    s.add("controller", HEAL_S, "heal", applied_ts=T0_TS + HEAL_S, effective_ts=T0_TS + HEAL_EFFECTIVE_S)
    s.add("n1", 3.5, "merge", view_id=["n1", 3], subgroups=[["n1", "n2"], ["n3"]])
    s.view(NODES, 3.5, "n1", 3, NODES)
    # phase C: everybody multicasts again in the merged view
    for k, sender in enumerate(NODES):
        seq[sender] += 1
        at = 4.0 + 0.01 * k
        s.multicast(sender, at, {r: at + 0.003 for r in NODES if r != sender}, seq[sender])
    for node in NODES:
        s.add(node, 5.0, "node_stop", reason="signal")
    return s


# --- anomalies: each returns a new scenario -----------------------------------------------------------------
def with_lost_message() -> Scenario:
    """n3 never delivers n1's phase-C multicast: it never arrives there."""
    s = clean_scenario()
    victim = s.find("app_send", node="n1")[-1].fields["msg_id"]
    seqno = s.find("data_tx", node="n1", msg_id=victim)[0].fields["seqno"]
    s.events = [e for e in s.events if not (
        (e.type == "app_deliver" and e.node == "n3" and e.fields["msg_id"] == victim)
        or (e.type == "data_rx" and e.node == "n3" and e.fields["from"] == "n1" and e.fields["seqno"] == seqno))]
    return s


def with_missing_at_the_receiver(action: str) -> Scenario:
    """n3 never delivers n2's last unicast: it arrived and the receiver recorded `action` for it (below_window,
    wrong_conn, ...: discarded; buffer: held behind a gap)."""
    s = clean_scenario()
    victim = s.unicast("n2", "n3", 4.2, None, seqno=4)
    s.add("n3", 4.21, "data_rx", proto="unicast3", **{"from": "n2"}, seqno=4, conn_id=7, first=False, action=action)
    s.add("n2", 4.3, "data_tx", proto="unicast3", to="n3", seqno=4, conn_id=7, first=False, resend=True, size=50)
    s.victim = victim
    return s


def with_duplicate() -> Scenario:
    """n2 delivers one of n1's multicasts a second time, right after the first."""
    s = clean_scenario()
    first = s.find("app_deliver", node="n2", **{"from": "n1"})[0]
    s.add("n2", first.t_s + 0.0005, "app_deliver", **first.fields)
    return s


def with_reordering() -> Scenario:
    """n2 delivers n1's second multicast before its first."""
    s = clean_scenario()
    one, two = s.find("app_deliver", node="n2", **{"from": "n1"})[:2]
    one.t_s, two.t_s = two.t_s, one.t_s
    return s


def with_endless_retransmission(requests: int = 25) -> Scenario:
    """n3 asks n2 again and again for unicast3 seqno 9; every resend arrives on the wrong connection."""
    s = clean_scenario()
    for i in range(requests):
        t = 1.0 + 0.1 * i
        s.add("n3", t, "xmit_req_tx", proto="unicast3", to="n2", seqnos=[9])
        s.add("n2", t + 0.001, "xmit_req_rx", proto="unicast3", **{"from": "n3"}, seqnos=[9], found=[9], missing=[])
        s.add("n2", t + 0.001, "data_tx", proto="unicast3", to="n3", seqno=9, conn_id=6, first=False, resend=True,
              size=50)
        s.add("n3", t + 0.002, "data_rx", proto="unicast3", **{"from": "n2"}, seqno=9, conn_id=6, first=False,
              action="wrong_conn")
    return s


def with_stale_link() -> Scenario:
    """After the merge n3 asks n1 for NAKACK4 seqnos n1 had already purged."""
    s = clean_scenario()
    s.add("n3", 3.6, "xmit_req_tx", proto="nakack4", to="n1", seqnos=[1, 2])
    s.add("n1", 3.601, "xmit_req_rx", proto="nakack4", **{"from": "n3"}, seqnos=[1, 2], found=[], missing=[1, 2])
    return s


def with_late_convergence(delay_s: float = 40.0) -> Scenario:
    """The merge after the heal comes `delay_s` late."""
    s = clean_scenario()
    for ev in s.events:
        if ev.type in ("view", "merge") and ev.t_s == 3.5:
            ev.t_s = HEAL_EFFECTIVE_S + delay_s
        if ev.type == "node_stop":
            ev.t_s = HEAL_EFFECTIVE_S + delay_s + 1.0
    return s


def with_split_views() -> Scenario:
    """n3 never merges back: it ends in its own view."""
    s = clean_scenario()
    s.events = [e for e in s.events if not (e.type == "view" and e.node == "n3" and e.t_s == 3.5)]
    return s


def with_slow_recovery(delay_s: float = 40.0) -> Scenario:
    """The unicast stranded by the partition arrives `delay_s` after the heal."""
    s = clean_scenario()
    for ev in s.events:
        if ev.node == "n3" and ev.t_s == 3.101:
            ev.t_s = HEAL_EFFECTIVE_S + delay_s
    return s


def with_declared_records() -> Scenario:
    """The clean run, with n2 a node that declares what it records (NODE_CONTRACT.md) as the JGroups node does:
    the contract's minimum and data and xmit events, no window or sync handshake events."""
    s = clean_scenario()
    start = next(e for e in s.events if e.node == "n2" and e.type == "node_start")
    start.fields["config"] = {"kind": "jgroups", "records": ["node_start", "node_stop", "peer_heard", "peer_silent",
                                                              "app_send", "app_deliver", "view", "data_tx",
                                                              "data_rx", "xmit_req_tx", "xmit_req_rx", "resync_tx",
                                                              "resync_rx"]}
    return s


def with_verb_anomalies() -> Scenario:
    """One anomaly for each of the checks spurious_xmit, sync_handshakes, blocked and resends_without_request
    (each check sees only its own; with default limits only sync_handshakes fails):
    - n2 asks n1 for NAKACK4 seqnos 7 and 8; 7's original arrives later anyway (spurious), 8 comes resent;
    - SYNC handshakes: n1 -> n3 never answered (unfinished), n2 -> n1 abandoned by a resync_timeout; BcastState
      episodes: n1 -> n2 gen 3 received (finished), n1 -> n3 gen 2 never received (unfinished);
    - blocked senders: n1 nakack4 250 ms, n2 unicast3 toward n3 50 ms, n3 nakack4 from 4.9 to the end (100 ms);
    - n2 resends unicast3 seqno 5 to n3 four times, nobody asked for it."""
    s = clean_scenario()
    s.add("n2", 4.5, "xmit_req_tx", proto="nakack4", to="n1", seqnos=[7, 8])
    s.add("n2", 4.6, "data_rx", proto="nakack4", **{"from": "n1"}, seqno=7, conn_id=0, first=False, resend=False,
          action="deliver")
    s.add("n2", 4.61, "data_rx", proto="nakack4", **{"from": "n1"}, seqno=8, conn_id=0, first=False, resend=True,
          action="deliver")
    s.add("n1", 4.7, "resync_tx", proto="unicast3", peer="n3", kind="sync", bytes=8)
    s.add("n1", 4.75, "resync_tx", proto="unicast3", peer="n3", kind="sync", bytes=8)
    s.add("n2", 4.71, "resync_tx", proto="unicast3", peer="n1", kind="sync", bytes=8)
    s.add("n2", 4.8, "resync_timeout", proto="unicast3", peer="n1", side="recv")
    s.add("n1", 4.72, "bcast_state_tx", peer="n2", next_seqno=5, low=5, sync="tipc", gen=3)
    s.add("n2", 4.73, "bcast_state_rx", peer="n1", next_seqno=5, low=5, sync="tipc", gen=3)
    s.add("n1", 4.74, "bcast_state_tx", peer="n3", next_seqno=5, low=5, sync="tipc", gen=2)
    s.add("n1", 4.1, "window_full", proto="nakack4", seqno=40, low=8, capacity=32)
    s.add("n1", 4.35, "window_unblocked", proto="nakack4", blocked_ms=250.0, low=9)
    s.add("n2", 4.2, "window_full", proto="unicast3", peer="n3", seqno=9, low=1, capacity=8)
    s.add("n2", 4.25, "window_unblocked", proto="unicast3", peer="n3", blocked_ms=50.0, low=2)
    s.add("n3", 4.9, "window_full", proto="nakack4", seqno=40, low=8, capacity=32)
    for i in range(4):
        s.add("n2", 4.3 + 0.01 * i, "data_tx", proto="unicast3", to="n3", seqno=5, conn_id=7, first=False,
              resend=True, size=50)
    return s


@pytest.fixture(scope="session")
def spark():
    """The shared local[2] SparkSession (see `shared_spark`)."""
    return shared_spark()


@pytest.fixture(scope="session")
def analyzed(spark, tmp_path_factory):
    """`analyzed(build)`: the summary of the scenario `build()` written to a fresh run directory, analysed once
    per test session (without the HTML report) and shared by every test that asks for it."""
    from pipeline import api

    cache: dict[str, Any] = {}

    def get(build):
        if build.__name__ not in cache:
            run_dir = build().write(tmp_path_factory.mktemp(build.__name__) / "r1")
            cache[build.__name__] = api.analyze(run_dir, spark=spark, report=False)
        return cache[build.__name__]

    return get


def only_checks(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """This test's analyses run only the checks `names`: a test that reads one check pays for that one (a warm
    analysis of `clean_scenario` took 6.4 s with every check, 2.6 s with one). A test that asserts what the other
    checks say does not use it."""
    from pipeline import api
    from pipeline.checks import CHECKS

    chosen = tuple(c for c in CHECKS if c.name in names)
    assert sorted(c.name for c in chosen) == sorted(names), f"no such check among {names}"
    monkeypatch.setattr(api, "CHECKS", chosen)


def statuses(summary) -> dict[str, str]:
    return {name: result.status for name, result in summary.checks.items()}


def not_ok(summary) -> set[str]:
    return {name for name, status in statuses(summary).items() if status != "ok"}
