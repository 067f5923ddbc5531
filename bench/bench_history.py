"""What the node's history costs on its hot path, in one process (no sockets, no Docker, little noise):

- recording a receiver's pair of events per message (`data_rx`, `app_deliver`) as run lines (`node.history`),
  against the same events as plain lines (one line per event: the writer's path for every other type), in us per
  message and in bytes per message;
- a sender and a receiver `node.driver.Driver` (unicast3, the default bundling) passing 100 B unicasts in
  memory: each side's CPU per message with the history written, against the same pair recording nothing (how
  much of the node's time the history still takes);
- the same pair on the node's compiled build (`chaos.cluster.compiled`, in a process of its own) against the pure
  sources.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import node.driver as driver_module
from chaos.cluster import compiled
from node.config import from_env
from node.core import make_payload
from node.driver import Driver
from node.history import HistoryWriter
from node.layers import build_stack
from node.wire import cluster_id_of

PAYLOAD_BYTES = 100
BURST = 64  # messages a workload sends between two flushes of the outbox
RUN = "bench-history"
NAMES = ("n1", "n2")
REPO = Path(__file__).resolve().parents[1]


def _record_pairs(path: Path, count: int, plain: bool) -> float:
    """us per message to record `count` receiver pairs; `plain`: one line per event."""
    writer = HistoryWriter(path, RUN, "n2", runs=not plain)
    fields = [({"proto": "unicast3", "from": "n1", "seqno": n, "conn_id": 3, "first": n == 1, "action": "deliver"},
               {"msg_id": f"n1.1764290000000.{n}", "kind": "unicast", "from": "n1"}) for n in range(1, count + 1)]
    record = writer.record
    started = time.process_time()
    for data, delivered in fields:
        record("data_rx", data)
        record("app_deliver", delivered)
    writer.close()
    return (time.process_time() - started) / count * 1e6


def _drivers(run_dir: str, history: bool, runs: bool) -> tuple[Driver, Driver, list[HistoryWriter]]:
    writers = []
    drivers = []
    for boot, name in enumerate(NAMES, 1):
        config = from_env({"SPLITLAB_NODE": name, "SPLITLAB_RUN": RUN, "SPLITLAB_MEMBERS": ",".join(NAMES),
                           "SPLITLAB_TOKEN": "t", "SPLITLAB_RUN_DIR": run_dir, "SPLITLAB_MEMBERSHIP": "none",
                           "SPLITLAB_MULTICAST": "none",
                           "SPLITLAB_ADDRESSES": ",".join(f"{n}=127.0.0.1:{7100 + i}" for i, n in enumerate(NAMES))})
        writer = HistoryWriter(config.history_path, RUN, name, runs=runs) if history else None
        drivers.append(Driver(name, build_stack(config), cluster_id_of(RUN), boot, config.bundle_max_bytes,
                              frozenset(NAMES), set_timer=lambda key, at_s: None, cancel_timer=lambda key: None,
                              record=writer.record if writer else None))
        writers += [writer] if writer else []
    return drivers[0], drivers[1], writers


def _pair(count: int, history: bool, runs: bool = True) -> tuple[float, float]:
    """(sender, receiver) CPU us per message of `count` unicasts n1 -> n2 through two drivers in memory; `runs`:
    the history's run lines (else one line per event)."""
    with tempfile.TemporaryDirectory(prefix="splitlab-bench-history-") as run_dir:
        sender, receiver, writers = _drivers(run_dir, history, runs)
        app_send = writers[0].record if history else None
        now_s = 1.0
        for driver in (sender, receiver):
            driver.start(now_s)
            driver.take_outbox()
        sent_s = received_s = 0.0
        for first in range(1, count + 1, BURST):
            t0 = time.process_time()
            for n in range(first, min(first + BURST, count + 1)):
                msg_id = f"n1.1.{n}"
                payload = make_payload(msg_id, PAYLOAD_BYTES)
                if app_send is not None:
                    app_send("app_send", {"msg_id": msg_id, "kind": "unicast", "to": "n2", "size": len(payload)})
                sender.send(now_s, "unicast", "n2", payload)  # as the node's workloads send
            datagrams = [d for msgs in sender.take_outbox().values() for d in sender.datagrams(msgs, {})]
            t1 = time.process_time()
            for datagram in datagrams:
                receiver.receive(now_s, int(now_s * 1000), datagram, "127.0.0.1")
            acks = [d for msgs in receiver.take_outbox().values() for d in receiver.datagrams(msgs, {})]
            t2 = time.process_time()
            for datagram in acks:
                sender.receive(now_s, int(now_s * 1000), datagram, "127.0.0.1")
            sender.take_outbox()
            t3 = time.process_time()
            sent_s += (t1 - t0) + (t3 - t2)
            received_s += t2 - t1
            now_s += 0.001
        t4 = time.process_time()
        for writer in writers:
            writer.close()
        closing_s = time.process_time() - t4  # the last flush: half to each side
        if receiver.counters["delivered"] != count:
            raise RuntimeError(f"{receiver.counters['delivered']} of {count} messages delivered")
        return (sent_s + closing_s / 2) / count * 1e6, (received_s + closing_s / 2) / count * 1e6


def run(quick: bool) -> list[dict]:
    count = 20_000 if quick else 100_000
    rows = []
    with tempfile.TemporaryDirectory(prefix="splitlab-bench-history-") as tmp:
        runs_path, plain_path = Path(tmp) / "runs.jsonl", Path(tmp) / "plain.jsonl"
        runs_us = min(_record_pairs(runs_path, count, plain=False) for _ in range(3))
        plain_us = min(_record_pairs(plain_path, count, plain=True) for _ in range(3))
        runs_bytes, plain_bytes = runs_path.stat().st_size / 3 / count, plain_path.stat().st_size / 3 / count
    rows.append(_us_row("history: a receiver's two events per message, run lines", runs_us, plain_us,
                        f"data_rx + app_deliver; baseline: the same as plain lines (one line per event); best of 3, "
                        f"{count} messages"))
    rows.append({"name": "history: bytes per message (receiver), run lines", "value": runs_bytes, "unit": "B",
                 "baseline": plain_bytes, "ratio": runs_bytes / plain_bytes, "better": "lower",
                 "note": "baseline: plain lines"})
    with_history = _best_pair(count)
    plain = min((_pair(count, True, runs=False) for _ in range(3)), key=sum)
    without = min((_pair(count, False) for _ in range(3)), key=sum)
    compiled_pair = _compiled_pair(count)
    for side, index in (("sender", 0), ("receiver", 1)):
        value = with_history[index]
        rows += [_us_row(f"driver pair in memory: {side} CPU per message, history on", value, without[index],
                         "unicast3, 100 B, bundled; baseline: the same pair recording nothing; best of 3 (goal of "
                         "the node: <= 2.5 us a side)"),
                 _us_row(f"driver pair in memory: {side} CPU per message, run lines", value, plain[index],
                         "baseline: the same pair writing one line per event; best of 3")]
    for side, index in (("sender", 0), ("receiver", 1)):
        rows.append(_us_row(f"driver pair in memory: {side} CPU per message, compiled node", compiled_pair[index],
                            with_history[index], "the compiled build (chaos.cluster.compiled) in a process of its "
                            "own; baseline: the pure sources, history on; best of 3 (goal of the node: <= 2.5 us a "
                            "side)"))
    return rows


def _us_row(name: str, value_us: float, baseline_us: float, note: str) -> dict:
    return {"name": name, "value": value_us, "unit": "us", "baseline": baseline_us, "ratio": value_us / baseline_us,
            "better": "lower", "note": note}


def _best_pair(count: int) -> tuple[float, float]:
    return min((_pair(count, True) for _ in range(3)), key=sum)


def _compiled_pair(count: int) -> tuple[float, float]:
    """`_best_pair` in a process whose `node` is the compiled build (it says where its driver came from)."""
    site = compiled.build(lambda line: None)
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO}"}
    done = subprocess.run([sys.executable, "-P", "-m", "bench.bench_history", "pair", str(count)], env=env,
                          capture_output=True, text=True, timeout=600, check=True)
    result = json.loads(done.stdout)
    if not result["driver"].endswith(compiled.extension_suffix()):
        raise RuntimeError(f"the compiled pair ran {result['driver']}, not the compiled build")
    return result["sender_us"], result["receiver_us"]


if __name__ == "__main__":
    if sys.argv[1:2] != ["pair"] or len(sys.argv) != 3:
        sys.exit(f"usage: python -m bench.bench_history pair COUNT (got {sys.argv[1:]})")
    sender_us, receiver_us = _best_pair(int(sys.argv[2]))
    print(json.dumps({"sender_us": sender_us, "receiver_us": receiver_us, "driver": driver_module.__file__}))
