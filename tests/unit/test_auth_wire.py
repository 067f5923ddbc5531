"""The authenticated wire in the node (node.auth, node.wire, node.driver): a signed datagram's round trip, every
way a datagram can lack the run key's tag (no tag, a wrong one, another key's, a cut one, garbage behind a
signed-looking header) dropped and counted as `unauthenticated` before any decode, a node of the open wire still
taking unsigned (and signed) datagrams, the tag kept within the bundling limits, a simulated cluster on the
authenticated wire delivering everything with its injections signed or not, and two runtimes over real UDP."""
from __future__ import annotations

import asyncio
import hmac
import socket

import pytest

from node import driver as driver_module
from node.auth import TAG_BYTES, WireKey
from node.config import from_env
from node.core import make_payload
from node.errors import ConfigError, UsageError
from node.history import HistoryWriter
from node.layers import build_stack
from node.runtime import NodeRuntime
from node.sim import send_many, unicast_sim
from node.wire import (MAX_UDP_BYTES, SIGNED, VERSION, Heartbeat, Ping, UnicastAck, check_tag, cluster_id_of,
                       decode_datagram_from, encode_datagram, encode_message, sign, unsign)
from test_driver import PEER_BOOT, WALL, make  # the driver tests' echo stack and host

KEY = WireKey(bytes(range(32)))
OTHER = WireKey(bytes(range(1, 33)))
CID = 0x00C0FFEE


def signed(msgs: list, key: WireKey = KEY, sender: str = "a") -> bytes:
    return encode_datagram(CID, sender, msgs, PEER_BOOT, key)


def test_a_signed_datagram_round_trips_and_its_open_form_is_the_unsigned_encoding() -> None:
    msgs = [Heartbeat(7), Ping(9)]
    data = signed(msgs)
    open_ = encode_datagram(CID, "a", msgs, PEER_BOOT)
    assert data[2] == VERSION | SIGNED and len(data) == len(open_) + TAG_BYTES
    assert check_tag(KEY, data) is None
    assert decode_datagram_from(data, CID) == ("a", PEER_BOOT, msgs)  # a key-less decoder strips the tag
    assert unsign(data) == open_ and sign(KEY, open_) == data and unsign(open_) == open_
    assert "tag is not" in check_tag(OTHER, data)


@pytest.mark.parametrize("key_bytes", [16, 32, 64, 65, 100])
def test_the_tag_is_hmac_sha256_cut_to_16_bytes(key_bytes: int) -> None:
    raw = bytes(range(key_bytes))
    key = WireKey(raw)
    for data in (b"", b"x", bytes(range(256)) * 40):
        assert key.tag(data) == hmac.digest(raw, data, "sha256")[:TAG_BYTES] == key.tag(memoryview(data))
    assert key.matches(b"abc" + key.tag(b"abc")) and not key.matches(b"abd" + key.tag(b"abc"))


def test_the_key_is_made_from_hex_and_never_shown() -> None:
    key = WireKey.new()
    assert len(key.raw) == 32 and WireKey.from_hex(key.hex()) == key
    assert key.hex() not in repr(key) and key.hex() not in repr(from_env(_env("n1", {"n1": 1}, "/tmp",
                                                                                SPLITLAB_AUTH_KEY=key.hex())))
    with pytest.raises(ConfigError, match="SPLITLAB_AUTH_KEY is not hex"):
        WireKey.from_hex("xyz")
    with pytest.raises(ConfigError, match="SPLITLAB_AUTH_KEY: an authentication key needs at least 16 bytes"):
        from_env(_env("n1", {"n1": 1}, "/tmp", SPLITLAB_AUTH_KEY="00" * 8))
    assert from_env(_env("n1", {"n1": 1}, "/tmp")).auth_key is None


GOOD = signed([Ping(1)])
UNAUTHENTIC = {
    "no tag": encode_datagram(CID, "a", [Ping(1)], PEER_BOOT),
    "a wrong tag": GOOD[:-1] + bytes([GOOD[-1] ^ 1]),
    "another key's tag": signed([Ping(1)], key=OTHER),
    "a cut tag": GOOD[:-5],
    "a changed byte before the tag": GOOD[:-TAG_BYTES - 1] + b"\x02" + GOOD[-TAG_BYTES:],
    "garbage after a signed header": GOOD[:3] + b"\xff" * 40,
    "a lone signed header byte": GOOD[:3],
    "not splitlab's": b"\x13\x02" + b"\0" * 60,
}


@pytest.mark.parametrize("what", sorted(UNAUTHENTIC))
def test_a_datagram_without_the_keys_tag_is_dropped_as_unauthenticated_before_any_decode(what, monkeypatch) -> None:
    def no_decode(*_args):
        raise AssertionError("decoded a datagram that carries no valid tag")

    driver, host, echo = make()
    driver.auth_key = KEY
    monkeypatch.setattr(driver_module, "decode_datagram_from", no_decode)
    driver.receive(1.0, WALL + 1000, UNAUTHENTIC[what], "10.0.0.9")
    assert driver.dropped == {"unauthenticated": 1} and echo.log == [] and driver.outbox == {}
    [event] = host.of("datagram_dropped")
    assert event["reason"] == "unauthenticated" and event["src_ip"] == "10.0.0.9" and event["detail"]


def test_a_node_with_the_key_takes_signed_datagrams_and_signs_its_own_within_the_bundle_limit() -> None:
    driver, host, echo = make(bundle_max_bytes=1000)
    driver.auth_key = KEY
    driver.receive(1.0, WALL + 1000, GOOD, "10.0.0.9")
    assert echo.log == [("rx", "a", 1)] and driver.dropped == {}
    [pong] = driver.datagrams(driver.take_outbox()["a"])
    assert check_tag(KEY, pong) is None
    datagrams = driver.datagrams([encode_message(Heartbeat(n)) for n in range(500)])
    assert len(datagrams) > 1 and all(len(d) <= 1000 and check_tag(KEY, d) is None for d in datagrams)
    assert sum(len(decode_datagram_from(d, CID)[2]) for d in datagrams) == 500
    big = driver.datagrams([encode_message(Ping(1))] * 4096)  # MAX_MESSAGES in one datagram, the tag beyond
    assert all(len(d) <= MAX_UDP_BYTES for d in big)


def test_a_node_of_the_open_wire_takes_unsigned_and_signed_datagrams() -> None:
    driver, host, echo = make()
    driver.receive(1.0, WALL + 1000, UNAUTHENTIC["no tag"], "10.0.0.9")
    driver.receive(1.1, WALL + 1100, signed([Ping(2)], key=OTHER), "10.0.0.9")
    assert echo.log == [("rx", "a", 1), ("rx", "a", 2)] and driver.dropped == {}
    assert check_tag(KEY, driver.datagrams(driver.take_outbox()["a"])[0]) is not None  # it sends unsigned


def test_a_simulated_cluster_on_the_authenticated_wire_delivers_everything_and_refuses_unsigned_injections() -> None:
    sim = unicast_sim("unicast3", ("a", "b"), seed=4, auth_key=KEY)
    sent = send_many(sim, "a", "b", 300)
    sim.run_until_quiet(30)
    assert sim.delivered("b", "a") == sent, sim.repro()
    assert all(not d.dropped for d in sim.drivers.values())
    forged = UnicastAck(5, 3, 0)  # a conn_id no connection has: the layer discards it, counted
    layer = sim.layer("a", "unicast")
    sim.inject("b", "a", forged)
    sim.run_for(0.1)
    assert sim.driver("a").dropped == {"unauthenticated": 1} and layer.counters["acks_discarded"] == 0
    sim.inject("b", "a", forged, sign=True)
    sim.run_for(0.1)
    assert sim.driver("a").dropped == {"unauthenticated": 1} and layer.counters["acks_discarded"] == 1
    assert [e["reason"] for e in sim.emitted("datagram_dropped", node="a")] == ["unauthenticated"]
    open_sim = unicast_sim("unicast3", ("a", "b"), seed=4)
    with pytest.raises(UsageError, match="nothing to sign with"):
        open_sim.inject("b", "a", forged, sign=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(name: str, ports: dict[str, int], run_dir: str, **extra: str) -> dict[str, str]:
    return {"SPLITLAB_NODE": name, "SPLITLAB_RUN": "auth-test", "SPLITLAB_MEMBERS": ",".join(ports),
            "SPLITLAB_TOKEN": "t", "SPLITLAB_RUN_DIR": run_dir, "SPLITLAB_MEMBERSHIP": "none",
            "SPLITLAB_MULTICAST": "none",
            "SPLITLAB_ADDRESSES": ",".join(f"{n}=127.0.0.1:{p}" for n, p in ports.items()), **extra}


@pytest.mark.timeout(60)
async def test_two_runtimes_over_udp_sign_check_and_deliver(tmp_path) -> None:
    ports = {"n1": _free_port(), "n2": _free_port()}
    nodes = {}
    for name in ports:
        config = from_env(_env(name, ports, str(tmp_path), SPLITLAB_AUTH_KEY=KEY.hex()))
        nodes[name] = NodeRuntime(config, build_stack(config), HistoryWriter(config.history_path, "auth-test", name))
        await nodes[name].start()
    n1, n2 = nodes["n1"], nodes["n2"]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(encode_datagram(cluster_id_of("auth-test"), "n1", [Heartbeat(1)]), ("127.0.0.1", ports["n2"]))
        sent = [make_payload(f"n1.t.{n}", 64) for n in range(200)]
        for payload in sent:
            n1.request("unicast", "send", {"to": "n2", "payload": payload})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while n2.counters["delivered"] < len(sent) or not n2.dropped:
            assert loop.time() < deadline, (n2.counters, n2.dropped)
            await asyncio.sleep(0.02)
        assert n2.dropped == {"unauthenticated": 1} and n1.dropped == {}
    finally:
        for runtime in nodes.values():
            await runtime.stop()
            runtime.history.close()
