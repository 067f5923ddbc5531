"""A synthetic run history, written by the node's own history writer: for the benches (`bench/`) and the analysis
service's warm-up (`pipeline.service`).

Four nodes multicasting (NAKACK4, one retransmission per 50 multicasts) and unicasting (UNICAST3), a partition
between 40 % and 60 % of the run with split views and a merge after the heal; every event of the analysed types a
check reads, so that an analysis of it runs every check's plan. Generated streaming to disk (one open file per
writer, nothing held in memory beyond its buffer), the same for the same seed.
"""
from __future__ import annotations

import contextlib
import random
import tempfile
from pathlib import Path
from typing import Any, Iterator

from node.history import HistoryWriter

NODES = ("n1", "n2", "n3", "n4")
RUN_ID = "synthetic"
T0_TS = 1_700_000_000.0
MSG_INTERVAL_S = 0.0001
MULTICAST_SHARE = 0.8
XMIT_EVERY = 50


class _Writer:
    """One node's events file, written by the node's own writer (`node.history.HistoryWriter`: run lines for the
    per-message events), or one plain line per event (`plain`, as a node wrote before run lines); `ts` never goes
    back in a file (a writer stamps events as it writes them)."""

    def __init__(self, path: Path, node: str, plain: bool) -> None:
        self.last_ts = 0.0
        self.writer = HistoryWriter(path, RUN_ID, node, buffer_lines=4096, clock=lambda: self.last_ts,
                                    runs=not plain)

    def emit(self, ts: float, type_: str, fields: dict[str, Any]) -> None:
        self.last_ts = max(round(ts, 6), self.last_ts)
        self.writer.record(type_, fields)

    def close(self) -> None:
        self.writer.close()


def generate_history(run_dir: Path, target_events: int, seed: int = 1, plain: bool = False) -> int:
    """Write a run of about `target_events` events under `run_dir/events/`; return the exact count. `plain`: one
    line per event, no run lines."""
    rng = random.Random(seed)
    events_dir = run_dir / "events"
    events_dir.mkdir(parents=True, exist_ok=True)
    writers = {n: _Writer(events_dir / f"{n}.jsonl", n, plain) for n in NODES}
    ctl = _Writer(events_dir / "controller.jsonl", "controller", plain)
    total = 0

    def view(nodes: tuple[str, ...], ts: float, n: int, members: tuple[str, ...]) -> int:
        for node in nodes:
            writers[node].emit(ts, "view", {"view_id": [members[0], n], "members": list(members)})
        return len(nodes)

    expected_messages = max(1, target_events // 8)
    split_at, heal_at = int(expected_messages * 0.4), int(expected_messages * 0.6)
    groups: dict[str, tuple[str, ...]] = {n: NODES for n in NODES}
    counters = {n: 0 for n in NODES}
    seqnos = {n: 0 for n in NODES}
    total += view(NODES, T0_TS, 1, NODES)
    i = 0
    try:
        while total < target_events:
            ts = T0_TS + 0.01 + i * MSG_INTERVAL_S
            if i == split_at:
                ctl.emit(ts, "fault_start", {"fault_id": "f1", "kind": "partition", "detail": {"bisect": True},
                                             "applied_ts": ts, "effective_ts": ts + 0.001})
                total += 1 + view(("n1", "n2"), ts + 0.002, 2, ("n1", "n2")) + view(("n3", "n4"), ts + 0.002, 2,
                                                                                      ("n3", "n4"))
                groups = {"n1": ("n1", "n2"), "n2": ("n1", "n2"), "n3": ("n3", "n4"), "n4": ("n3", "n4")}
            if i == heal_at:
                ctl.emit(ts, "heal", {"applied_ts": ts, "effective_ts": ts + 0.001})
                total += 1 + view(NODES, ts + 0.01, 3, NODES)
                groups = {n: NODES for n in NODES}
            sender = NODES[i % len(NODES)]
            counters[sender] += 1
            msg_id = f"{sender}.1700000000000.{counters[sender]}"
            w = writers[sender]
            if rng.random() < MULTICAST_SHARE:
                seqnos[sender] += 1
                seqno = seqnos[sender]
                w.emit(ts, "app_send", {"msg_id": msg_id, "kind": "multicast", "to": "*", "size": 100})
                w.emit(ts, "data_tx", {"proto": "nakack4", "to": "*", "seqno": seqno, "conn_id": 0, "first": False,
                                       "resend": False, "size": 100, "msg_id": msg_id})
                total += 2
                for k, receiver in enumerate(r for r in groups[sender] if r != sender):
                    at = ts + 0.0005 + 0.0001 * k
                    rw = writers[receiver]
                    if seqno % XMIT_EVERY == 0 and k == 0:
                        rw.emit(at, "xmit_req_tx", {"proto": "nakack4", "to": sender, "seqnos": [seqno]})
                        w.emit(at + 0.0001, "xmit_req_rx", {"proto": "nakack4", "from": receiver, "seqnos": [seqno],
                                                            "found": [seqno], "missing": []})
                        w.emit(at + 0.0001, "data_tx", {"proto": "nakack4", "to": receiver, "seqno": seqno,
                                                        "conn_id": 0, "first": False, "resend": True, "size": 100})
                        at += 0.0003
                        total += 3
                    rw.emit(at, "data_rx", {"proto": "nakack4", "from": sender, "seqno": seqno, "conn_id": 0,
                                            "first": False, "action": "deliver"})
                    rw.emit(at, "app_deliver", {"msg_id": msg_id, "kind": "multicast", "from": sender})
                    total += 2
            else:
                receiver = rng.choice([r for r in groups[sender] if r != sender])
                at = ts + 0.0004
                w.emit(ts, "app_send", {"msg_id": msg_id, "kind": "unicast", "to": receiver, "size": 50})
                w.emit(ts, "data_tx", {"proto": "unicast3", "to": receiver, "seqno": counters[sender],
                                       "conn_id": 1, "first": False, "resend": False, "size": 50, "msg_id": msg_id})
                rw = writers[receiver]
                rw.emit(at, "data_rx", {"proto": "unicast3", "from": sender, "seqno": counters[sender],
                                        "conn_id": 1, "first": False, "action": "deliver"})
                rw.emit(at, "app_deliver", {"msg_id": msg_id, "kind": "unicast", "from": sender})
                total += 4
            i += 1
    finally:
        for writer in (*writers.values(), ctl):
            writer.close()
    return total


@contextlib.contextmanager
def synthetic_run(target_events: int, prefix: str) -> Iterator[Path]:
    """A run directory of about `target_events` events (`generate_history`, seed 1) in a temporary directory named
    `prefix`..., removed with everything in it when the block ends."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        run_dir = Path(tmp) / "run"
        generate_history(run_dir, target_events)
        yield run_dir
