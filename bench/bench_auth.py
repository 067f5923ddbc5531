"""What the authenticated wire (`splitlab up --auth`) costs, against the open wire in the same run: reliable
unicast (100 B payloads) between two `python -m node` processes on loopback, each pair once with a key and once
without, alternating, the best of `ROUNDS` of each: bundled (one tag per ~60 messages) and unbundled (one tag
per message, the worst case); the receiving node's CPU per delivered message (bundled); and the tag alone per
datagram (`node.wire.check_tag` and the signing in `encode_datagram`, timeit), next to decoding and encoding the
same datagram. No Docker, no root.

Goal (printed, not asserted): the authenticated wire at least 0.9x the open wire's messages/s.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Iterator

from bench import cpu_s, wait_until
from chaos.cluster.client import NodeClient
from node.auth import AUTH_KEY_ENV, WireKey
from node.wire import UnicastData, check_tag, decode_datagram_from, encode_datagram, encode_message

PAYLOAD_BYTES = 100
ROUNDS = 3
TOKEN = "bench"
REPO = Path(__file__).resolve().parents[1]


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _pair(key: WireKey | None, bundle_max_bytes: int) -> Iterator[tuple[dict[str, NodeClient], dict[str, int]]]:
    """Two nodes n1, n2 on loopback (unicast3, no membership, no multicast), hearing each other: their control
    clients and pids; both stopped (SIGTERM) at the end."""
    names = ("n1", "n2")
    data = {n: _free_port(socket.SOCK_DGRAM) for n in names}
    control = {n: _free_port(socket.SOCK_STREAM) for n in names}
    procs: dict[str, subprocess.Popen] = {}
    with tempfile.TemporaryDirectory(prefix="splitlab-bench-auth-") as run_dir:
        try:
            for name in names:
                env = {**os.environ, "PYTHONPATH": str(REPO), "SPLITLAB_NODE": name, "SPLITLAB_RUN": "bench-auth",
                       "SPLITLAB_MEMBERS": ",".join(names), "SPLITLAB_TOKEN": TOKEN, "SPLITLAB_RUN_DIR": run_dir,
                       "SPLITLAB_ADDRESSES": ",".join(f"{n}=127.0.0.1:{p}" for n, p in data.items()),
                       "SPLITLAB_CONTROL_BIND": f"127.0.0.1:{control[name]}", "SPLITLAB_MEMBERSHIP": "none",
                       "SPLITLAB_MULTICAST": "none", "SPLITLAB_BUNDLE_MAX_BYTES": str(bundle_max_bytes),
                       **({AUTH_KEY_ENV: key.hex()} if key else {})}
                procs[name] = subprocess.Popen([sys.executable, "-m", "node"], env=env, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.PIPE, text=True)
            clients = {n: NodeClient(n, f"http://127.0.0.1:{control[n]}", TOKEN) for n in names}

            def hear() -> bool:
                with contextlib.suppress(Exception):  # not listening yet
                    return all(clients[n].hears() == set(names) - {n} for n in names)
                return False
            wait_until(hear, 30, "the two nodes did not hear each other")
            yield clients, {n: p.pid for n, p in procs.items()}
        finally:
            for proc in procs.values():
                proc.send_signal(signal.SIGTERM)
            for name, proc in procs.items():
                _, err = proc.communicate(timeout=30)
                if proc.returncode != 0:
                    raise RuntimeError(f"node {name} ended with {proc.returncode}: {err[-500:]}")


def _rate(key: WireKey | None, count: int, bundle_max_bytes: int = 8192) -> tuple[float, float, int]:
    """(messages/s n1 -> n2, n2's CPU us per delivered message, datagrams n2 dropped) of `count` unicasts."""
    with _pair(key, bundle_max_bytes) as (clients, pids):
        receiver = clients["n2"]
        cpu_before_s = cpu_s(pids["n2"])
        started = time.monotonic()
        clients["n1"].unicast("n2", count=count, size=PAYLOAD_BYTES, rate=0)
        wait_until(lambda: receiver.state()["counters"].get("delivered", 0) >= count, 300,
                   f"{count} messages not delivered")
        elapsed_s = time.monotonic() - started
        cpu_us = (cpu_s(pids["n2"]) - cpu_before_s) / count * 1e6
        return count / elapsed_s, cpu_us, sum(receiver.state()["dropped"].values())


def _per_datagram_us(messages: int) -> tuple[float, float, float, float]:
    """(check_tag, decode, sign, encode) in us for one datagram of `messages` unicast messages (100 B each)."""
    key = WireKey.new()
    encoded = [encode_message(UnicastData(n, 7, False, b"x" * PAYLOAD_BYTES)) for n in range(messages)]
    signed = encode_datagram(1, "n1", encoded, 5, key)
    number = 20_000 // messages + 200

    def best(stmt) -> float:
        return min(timeit.repeat(stmt, number=number, repeat=5)) / number * 1e6
    return (best(lambda: check_tag(key, signed)), best(lambda: decode_datagram_from(signed, 1)),
            best(lambda: encode_datagram(1, "n1", encoded, 5, key)), best(lambda: encode_datagram(1, "n1", encoded, 5)))


def _best(count: int, bundle_max_bytes: int) -> dict[bool, tuple[float, float, int]]:
    """Per wire (auth or not): (best messages/s, lowest CPU us per message, datagrams refused) over ROUNDS
    alternating pairs."""
    results: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
    for _ in range(ROUNDS):
        for auth in (False, True):
            results[auth].append(_rate(WireKey.new() if auth else None, count, bundle_max_bytes))
    return {auth: (max(r[0] for r in rs), min(r[1] for r in rs), sum(r[2] for r in rs)) for auth, rs in results.items()}


def run(quick: bool) -> list[dict]:
    count = 20_000 if quick else 100_000
    bundled, unbundled = _best(count, 8192), _best(count // 4, 0)
    rows = []
    for name, measured, n in (("bundled", bundled, count), ("unbundled", unbundled, count // 4)):
        (rate_open, _, _), (rate_auth, _, refused) = measured[False], measured[True]
        rows.append({"name": f"reliable unicast, authenticated wire, {name}", "value": rate_auth, "unit": "msg/s",
                     "baseline": rate_open, "ratio": rate_auth / rate_open, "better": "higher",
                     "note": f"goal >= 0.9x the open wire; {n} x {PAYLOAD_BYTES} B n1 -> n2 on loopback, unicast3; "
                             f"best of {ROUNDS}; {refused} datagram(s) refused"})
    rows.append({"name": "CPU per delivered message, receiver, authenticated", "value": bundled[True][1],
                 "unit": "us", "baseline": bundled[False][1], "ratio": bundled[True][1] / bundled[False][1],
                 "better": "lower", "note": "bundled; baseline: the open wire's receiver; user and system time of "
                                            "the node process, the lowest of the rounds"})
    for messages, what in ((1, "one message"), (60, "a bundle of 60 (~7.4 KB)")):
        check_us, decode_us, sign_us, encode_us = _per_datagram_us(messages)
        rows.append({"name": f"tag check per datagram, {what}", "value": check_us, "unit": "us",
                     "baseline": decode_us, "ratio": check_us / decode_us, "better": "lower",
                     "note": "baseline: decoding the same datagram (node.wire.decode_datagram_from)"})
        rows.append({"name": f"signing per datagram, {what}", "value": sign_us - encode_us, "unit": "us",
                     "baseline": encode_us, "ratio": (sign_us - encode_us) / encode_us, "better": "lower",
                     "note": "encode_datagram with a key less without; baseline: encoding it without"})
    return rows
