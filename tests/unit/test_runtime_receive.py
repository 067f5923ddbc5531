"""The asyncio runtime's receive and bundle path over real UDP on loopback: hostile datagrams are counted drops
by reason (never an exception out of the receive loop), big bursts are bundled within the codec's limits, and the
nodes keep delivering afterwards."""
from __future__ import annotations

import asyncio
import socket
import time

import pytest

from node.__main__ import build_stack
from node.config import from_env
from node.core import make_payload
from node import history
from node.history import HistoryWriter
from node.runtime import NodeRuntime, loop_clock
from node.workload import WorkloadSpec
from node.wire import (MAX_MESSAGES, Heartbeat, UnicastData, cluster_id_of, decode_datagram, encode_datagram,
                       encode_message)

RUN = "runtime-test"


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_env(name: str, ports: dict[str, int], run_dir: str, **extra: str) -> dict[str, str]:
    return {"SPLITLAB_NODE": name, "SPLITLAB_RUN": RUN, "SPLITLAB_MEMBERS": ",".join(ports),
            "SPLITLAB_TOKEN": "t", "SPLITLAB_RUN_DIR": run_dir, "SPLITLAB_MEMBERSHIP": "none",
            "SPLITLAB_MULTICAST": "none",
            "SPLITLAB_ADDRESSES": ",".join(f"{n}=127.0.0.1:{p}" for n, p in ports.items()), **extra}


async def start_nodes(tmp_path, **extra: str) -> dict[str, NodeRuntime]:
    ports = {"n1": free_udp_port(), "n2": free_udp_port()}
    nodes = {}
    for name in ports:
        config = from_env(node_env(name, ports, str(tmp_path), **extra))
        runtime = NodeRuntime(config, build_stack(config), HistoryWriter(config.history_path, RUN, name))
        await runtime.start()
        nodes[name] = runtime
    return nodes


async def stop_nodes(nodes: dict[str, NodeRuntime]) -> None:
    for runtime in nodes.values():
        await runtime.stop()
        runtime.history.close()


async def until(predicate, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def test_a_burst_beyond_max_messages_is_bundled_within_the_codec_limits(tmp_path) -> None:
    """bundle_max_bytes near the datagram limit and more queued messages than a datagram may carry."""
    config = from_env(node_env("n1", {"n1": 1, "n2": 2}, str(tmp_path), SPLITLAB_BUNDLE_MAX_BYTES="65000"))
    runtime = NodeRuntime(config, build_stack(config), HistoryWriter(config.history_path, RUN, "n1"))
    encoded = [encode_message(Heartbeat(n)) for n in range(3 * MAX_MESSAGES)]
    datagrams = runtime.driver.datagrams(encoded)  # the runtime bundles through its driver (node/driver.py)
    counts = [len(decode_datagram(d, runtime.cluster_id)[1]) for d in datagrams]
    assert sum(counts) == len(encoded) and max(counts) <= MAX_MESSAGES
    runtime.history.close()


@pytest.mark.timeout(60)
async def test_hostile_datagrams_are_counted_drops_and_the_node_keeps_delivering(tmp_path) -> None:
    nodes = await start_nodes(tmp_path)
    n1, n2 = nodes["n1"], nodes["n2"]
    try:
        cid = cluster_id_of(RUN)
        hostile = {
            "truncated": b"SL\x02",
            "foreign": encode_datagram(cid ^ 1, "n1", [Heartbeat(1)]),
            "unknown-type": encode_datagram(cid, "n1", [Heartbeat(1)])[:-11] + b"\xff\x00\x08" + b"\0" * 8,
            "unknown-sender": encode_datagram(cid, "mallory", [Heartbeat(1)], incarnation=n1.boot),
            "future-incarnation": encode_datagram(cid, "n1", [Heartbeat(1)], incarnation=2**64 - 1),
        }
        outside = encode_datagram(cid, "n1", [UnicastData(2**64 - 1, 4096, False, b"x")], incarnation=n1.boot)
        addr = ("127.0.0.1", n2.config.data_address("n2")[1])
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for data in [*hostile.values(), outside] * 3:
                sock.sendto(data, addr)
        await until(lambda: sum(n2.dropped.values()) >= 3 * len(hostile))
        assert {reason: n2.dropped[reason] for reason in hostile} == {reason: 3 for reason in hostile}
        sent = [make_payload(f"n1.t.{n}", 64) for n in range(200)]
        for payload in sent:
            n1.request("unicast", "send", {"to": "n2", "payload": payload})
        await until(lambda: n2.counters["delivered"] >= len(sent))
        layer = n2.stack.layers["unicast"]
        assert not layer.recv_entries["n1"].window.buffered  # the absurd seqno was never buffered
        assert "mallory" not in layer.recv_entries
    finally:
        await stop_nodes(nodes)


@pytest.mark.timeout(60)
async def test_a_burst_is_read_in_few_batches(tmp_path) -> None:
    nodes = await start_nodes(tmp_path)
    n2 = nodes["n2"]
    try:
        burst = 200
        foreign = encode_datagram(cluster_id_of(RUN) ^ 1, "n1", [Heartbeat(1)])
        addr = ("127.0.0.1", n2.config.data_address("n2")[1])
        wakeups, received = n2.counters["recv_batches"], n2.counters["datagrams_received"]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for _ in range(burst):  # the loop does not run meanwhile: all of them wait in n2's socket
                sock.sendto(foreign, addr)
        await until(lambda: n2.counters["datagrams_received"] - received >= burst)
        assert n2.counters["recv_batches"] - wakeups <= burst // 20  # one per batch of up to RECV_BATCH
        assert n2.dropped["foreign"] >= burst
    finally:
        await stop_nodes(nodes)


@pytest.mark.timeout(60)
async def test_workloads_beside_single_sends_give_every_message_its_own_id_and_deliver_each(tmp_path) -> None:
    """Two unicast workloads at once and a control-API send beside them: every `app_send` has a run-unique id of
    the node's prefix (workloads reserve their ids at once, a single send takes the next), and n2 delivers every
    one of them. The node reads the loop's clock as `time.monotonic` itself (asyncio's loop)."""
    nodes = await start_nodes(tmp_path)
    n1, n2 = nodes["n1"], nodes["n2"]
    try:
        assert loop_clock(asyncio.get_running_loop()) is time.monotonic
        spec = WorkloadSpec.parse("unicast", "unicast", {"to": "n2", "count": 300, "size": 50}, n1.members, "n1",
                                  1000)
        first, second = n1.start_workload(spec), n1.start_workload(spec)
        single_id = n1.msg_ids.prefix + str(n1.msg_ids.reserve(1))
        n1.request("unicast", "send", {"to": "n2", "payload": make_payload(single_id, 20)})
        await until(lambda: n2.counters["delivered"] >= 601)
        assert first.done and second.done and first.error is None and second.error is None
        n1.history.flush()
        sent = [e["msg_id"] for e in history.read(n1.config.history_path) if e["type"] == "app_send"]
        assert len(sent) == 600 and len(set(sent)) == 600
        assert all(m.startswith(f"n1.{n1.boot}.") for m in sent)
        n2.history.flush()
        delivered = {e["msg_id"] for e in history.read(n2.config.history_path) if e["type"] == "app_deliver"}
        assert set(sent) < delivered and len(delivered) == 601
    finally:
        await stop_nodes(nodes)


def test_a_loop_with_its_own_clock_is_read_through_its_time() -> None:
    """The node reads `time.monotonic` directly only where the loop's `time()` is asyncio's own; a loop with its
    own clock is read through it."""

    class ShiftedLoop(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return 42.0

    loop = ShiftedLoop()
    try:
        assert loop_clock(loop)() == 42.0
    finally:
        loop.close()
