"""The seeded simulator: reproducibility, link faults, one-way partitions, message faults, wire errors,
timers, bundling, and several protocol layers per member."""
from __future__ import annotations

from typing import Any, Hashable

import pytest

from node.core import CancelTimer, Deliver, Emit, Protocol, Send, SetTimer
from node.errors import UsageError
from node.liveness import Liveness
from node.sim import LinkSpec, Simulator
from node.stack import Stack
from node.unicast import UnicastConfig, make_unicast
from node.wire import Heartbeat, Ping, Pong, UnicastData


class Echo(Protocol):
    """A test layer: pings on request, records what it receives, answers pings with pongs, runs timers."""

    MESSAGES = (Ping, Pong)

    def __init__(self) -> None:
        self.got: list[tuple[float, str, str, int]] = []
        self.fired: list[tuple[float, Hashable]] = []

    def on_request(self, now_s: float, op: str, args: dict[str, Any]) -> list:
        if op == "ping":
            return [Send(args["to"], Ping(i)) for i in args["ids"]]
        if op == "timer":
            return [SetTimer(args["key"], args["at_s"])]
        if op == "cancel":
            return [CancelTimer(args["key"])]
        if op == "boom":
            raise RuntimeError("boom")
        raise UsageError(op)

    def on_received(self, now_s: float, src: str, msg: Any) -> list:
        self.got.append((now_s, src, type(msg).__name__, msg.ping_id))
        out: list = [Emit("echo_rx", {"from": src, "id": msg.ping_id})]
        if isinstance(msg, Ping):
            out += [Send(src, Pong(msg.ping_id)), Deliver(src, b"%d" % msg.ping_id)]
        return out

    def on_timer(self, now_s: float, key: Hashable) -> list:
        self.fired.append((now_s, key))
        return [SetTimer(key, now_s + 1.0)] if key == "periodic" else []


def echo_sim(seed: int = 0, members=("a", "b"), **kwargs) -> Simulator:
    sim = Simulator(seed, **kwargs)
    for name in members:
        sim.add_member(name, {"echo": Echo()})
    return sim


def ping(sim: Simulator, src: str, dst: str, ids) -> None:
    sim.request(src, "echo", "ping", {"to": dst, "ids": list(ids)})


def received(sim: Simulator, member: str, kind: str = "Ping") -> list[int]:
    return [i for _t, _s, k, i in sim.layer(member, "echo").got if k == kind]


# --- reproducibility --------------------------------------------------------------------------------------
def _lossy_run(seed: int):
    sim = echo_sim(seed, default_link=LinkSpec(loss_pct=20, delay_ms=5, jitter_ms=4, dup_pct=10, reorder_pct=20))
    for n in range(200):
        sim.at(n * 0.001, lambda n=n: ping(sim, "a", "b", [n]))
    sim.run_until_quiet()
    return sim.layer("b", "echo").got, sim.events


def test_same_seed_same_run_other_seed_other_run() -> None:
    assert _lossy_run(5) == _lossy_run(5)
    assert _lossy_run(5) != _lossy_run(6)


def test_repro_names_the_seed_and_protocol_errors_carry_it() -> None:
    sim = echo_sim(seed=1234)
    assert sim.repro() == "reproduce with seed=1234"
    sim.at(1.0, lambda: sim.request("a", "echo", "boom"))
    with pytest.raises(RuntimeError) as info:
        sim.run_for(2.0)
    assert any("seed=1234" in note for note in info.value.__notes__)


# --- links ---------------------------------------------------------------------------------------------------
def test_loss_rate_follows_the_link_spec() -> None:
    sim = echo_sim(seed=7)
    sim.set_link("a", "b", loss_pct=30)
    for n in range(3000):
        ping(sim, "a", "b", [n])
    sim.run_until_quiet()
    got = len(received(sim, "b"))
    assert 0.66 * 3000 < got < 0.74 * 3000, sim.repro()
    assert len(received(sim, "a", "Pong")) == got        # b -> a is lossless


def test_duplication_and_delay_with_jitter() -> None:
    sim = echo_sim(seed=8)
    sim.set_link("a", "b", dup_pct=50, delay_ms=20, jitter_ms=5)
    for n in range(1000):
        ping(sim, "a", "b", [n])
    sim.run_until_quiet()
    got = sim.layer("b", "echo").got
    assert 1400 < len(got) < 1600, sim.repro()
    assert all(0.015 - 1e-9 <= t <= 0.025 + 1e-9 for t, *_ in got)


def test_reordering_only_when_asked() -> None:
    fifo = echo_sim(seed=9, default_link=LinkSpec(delay_ms=3))
    ping(fifo, "a", "b", range(300))
    fifo.run_until_quiet()
    assert received(fifo, "b") == list(range(300))
    sim = echo_sim(seed=9, bundle_max_bytes=0)
    sim.set_link("a", "b", reorder_pct=30, reorder_ms=20)
    for n in range(300):
        ping(sim, "a", "b", [n])
    sim.run_until_quiet()
    order = received(sim, "b")
    assert sorted(order) == list(range(300)) and order != list(range(300))


def test_link_spec_is_validated() -> None:
    with pytest.raises(UsageError):
        LinkSpec(loss_pct=101)
    with pytest.raises(UsageError):
        LinkSpec(delay_ms=-1)


# --- partitions ---------------------------------------------------------------------------------------------
def test_one_way_partition_and_heal() -> None:
    sim = echo_sim()
    sim.partition("a", "b")
    ping(sim, "a", "b", [1])
    ping(sim, "b", "a", [2])
    sim.run_until_quiet()
    assert received(sim, "b") == [] and received(sim, "a") == [2]
    assert received(sim, "b", "Pong") == []              # a's answer to b's ping is cut too
    sim.heal("a", "b")
    ping(sim, "a", "b", [3])
    sim.run_until_quiet()
    assert received(sim, "b") == [3]


def test_partition_drops_datagrams_in_flight() -> None:
    sim = echo_sim(default_link=LinkSpec(delay_ms=100))
    ping(sim, "a", "b", [1])
    sim.run_for(0.05)
    sim.partition_both("a", "b")
    sim.run_until_quiet()
    assert received(sim, "b") == [] and sim.counters["cut_on_arrival"] == 1
    with pytest.raises(UsageError):
        sim.heal("a")


# --- message faults -------------------------------------------------------------------------------------------
def test_drop_next_matching_message_only() -> None:
    sim = echo_sim()
    fault = sim.drop_next("a", "b", Ping, where=lambda m: m.ping_id % 2 == 0, count=2)
    ping(sim, "a", "b", range(8))
    ping(sim, "b", "a", [100])                      # other direction untouched
    sim.run_until_quiet()
    assert received(sim, "b") == [1, 3, 4, 5, 6, 7]   # only the next two even ones
    assert received(sim, "a") == [100]
    assert sim.counters["fault_dropped"] == 2
    sim.remove_fault(fault)
    with pytest.raises(UsageError):
        sim.remove_fault(fault)


def test_delay_matching_by_type_and_direction() -> None:
    sim = echo_sim(default_link=LinkSpec(delay_ms=1))
    sim.delay_matching("b", "a", "Pong", 5.0)
    ping(sim, "a", "b", [1])
    sim.run_until_quiet()
    [(t_ping, *_)] = sim.layer("b", "echo").got
    [(t_pong, *_)] = sim.layer("a", "echo").got
    assert t_ping == pytest.approx(0.001) and t_pong == pytest.approx(0.001 + 0.001 + 5.0)


def test_hold_and_release() -> None:
    sim = echo_sim()
    hold = sim.hold("a", "b", Ping, where=lambda m: m.ping_id == 2)
    ping(sim, "a", "b", [1, 2, 3])
    sim.run_for(1.0)
    assert received(sim, "b") == [1, 3]
    assert [m.ping_id for m in sim.release(hold)] == [2]
    sim.run_until_quiet()
    assert received(sim, "b") == [1, 3, 2]


def test_unknown_message_type_name() -> None:
    sim = echo_sim()
    with pytest.raises(UsageError) as info:
        sim.drop_next("a", "b", "Pinggg")
    assert "Ping" in str(info.value)


# --- wire -------------------------------------------------------------------------------------------------------
def test_every_message_goes_through_the_codec_and_bundles() -> None:
    sim = echo_sim()
    ping(sim, "a", "b", range(50))                   # one request: bundled
    sim.run_until_quiet()
    assert received(sim, "b") == list(range(50))
    # the pings in one datagram; the pongs to one received datagram in one datagram too (one driver call)
    assert [sim.driver(m).counters["datagrams_sent"] for m in "ab"] == [1, 1]
    assert [sim.driver(m).counters["messages_sent"] for m in "ab"] == [50, 50]
    unbundled = echo_sim(bundle_max_bytes=0)
    ping(unbundled, "a", "b", range(50))
    unbundled.run_until_quiet()
    assert [unbundled.driver(m).counters["datagrams_sent"] for m in "ab"] == [50, 50]


def test_malformed_and_foreign_datagrams_are_counted_and_dropped() -> None:
    from node.wire import encode_datagram
    sim = echo_sim()
    sim.inject_bytes("b", b"garbage that is long enough")
    sim.inject_bytes("b", b"SL")
    sim.inject_bytes("b", encode_datagram(sim.cluster_id + 1, "a", [Ping(1)]))
    sim.run_until_quiet()
    assert sim.driver("b").dropped == {"foreign": 2, "truncated": 1}
    assert [e["reason"] for e in sim.emitted("datagram_dropped", node="b")] == ["foreign", "truncated", "foreign"]
    assert received(sim, "b") == []


def test_messages_no_layer_claims_are_counted() -> None:
    sim = echo_sim()
    sim.inject("a", "b", Heartbeat(1))
    sim.run_until_quiet()
    assert sim.driver("b").dropped == {"unhandled-type": 1}


# --- timers and running ---------------------------------------------------------------------------------------
def test_timers_replace_cancel_and_quiet() -> None:
    sim = echo_sim()
    sim.request("a", "echo", "timer", {"key": "t", "at_s": 5.0})
    sim.request("a", "echo", "timer", {"key": "t", "at_s": 2.0})     # replaces
    sim.request("a", "echo", "timer", {"key": "u", "at_s": 3.0})
    sim.request("a", "echo", "cancel", {"key": "u"})
    assert sim.run_until_quiet()
    assert sim.layer("a", "echo").fired == [(2.0, "t")]
    assert sim.now_s == 2.0                           # replaced and cancelled timers do not move the clock
    sim.request("a", "echo", "timer", {"key": "periodic", "at_s": sim.now_s + 1})
    assert not sim.run_until_quiet(10.0)
    assert sim.now_s == pytest.approx(12.0)
    assert len(sim.layer("a", "echo").fired) == 1 + 10


def test_run_until_true_and_at() -> None:
    sim = echo_sim(default_link=LinkSpec(delay_ms=10))
    sim.at(1.0, lambda: ping(sim, "a", "b", [7]))
    assert sim.run_until_true(lambda: received(sim, "b") == [7], 5.0)
    assert sim.now_s == pytest.approx(1.01)
    assert not sim.run_until_true(lambda: False, 1.0) and sim.now_s == pytest.approx(2.01)


def test_records_deliveries_and_events() -> None:
    sim = echo_sim()
    ping(sim, "a", "b", [1, 2])
    sim.run_until_quiet()
    assert sim.delivered("b", "a") == [b"1", b"2"]
    assert [e["id"] for e in sim.emitted("echo_rx", node="b")] == [1, 2]
    assert sim.emitted("app_deliver", node="b")[0]["from"] == "a"
    assert all({"ts", "node", "type"} <= set(e) for e in sim.events)


# --- several layers per member ------------------------------------------------------------------------------
def test_members_with_several_layers() -> None:
    sim = Simulator(seed=3)
    members = ("a", "b")
    for name in members:
        sim.add_member(name, Stack({
            "liveness": Liveness(name, list(members), heartbeat_ms=250, silence_ms=1000),
            "unicast": make_unicast("unicast3", name, UnicastConfig(), members),
            "echo": Echo(),
        }))
    sim.request("a", "unicast", "send", {"to": "b", "payload": b"hello"})
    ping(sim, "a", "b", [9])
    sim.run_for(1.0)
    assert sim.delivered("b", "a") == [b"hello", b"9"]
    assert sim.layer("b", "liveness").hears() == ["a"]
    assert sim.emitted("peer_heard", node="b")
    sim.partition("a", "b")
    sim.run_for(2.0)
    assert sim.layer("b", "liveness").hears() == []
    assert sim.emitted("data_rx", node="b", proto="unicast3")


def test_duplicate_member_and_unknown_member() -> None:
    sim = echo_sim()
    with pytest.raises(UsageError):
        sim.add_member("a", {"echo": Echo()})
    with pytest.raises(UsageError):
        sim.request("zed", "echo", "ping", {"to": "a", "ids": [1]})
    sim.request("a", "echo", "ping", {"to": "zed", "ids": [1]})
    sim.run_until_quiet()
    assert sim.counters["to_unknown_member"] == 1


def test_unicast_data_faults_see_decoded_fields() -> None:
    sim = Simulator(seed=4)
    for name in ("a", "b"):
        sim.add_member(name, {"unicast": make_unicast("unicast3", name, UnicastConfig(), ("a", "b"))})
    sim.drop_next("a", "b", UnicastData, where=lambda m: m.first)
    sim.request("a", "unicast", "send", {"to": "b", "payload": b"x"})
    sim.run_for(0.05)
    assert sim.delivered("b", "a") == [] and sim.counters["fault_dropped"] == 1
    sim.run_until_quiet()
    assert sim.delivered("b", "a") == [b"x"]


def test_a_cancelled_timer_far_away_does_not_keep_the_simulation_busy() -> None:
    sim = echo_sim()
    sim.request("a", "echo", "timer", {"key": "t", "at_s": 100.0})
    sim.request("a", "echo", "cancel", {"key": "t"})
    assert sim.run_until_quiet(1.0)
    assert sim.now_s == 0.0


def test_the_package_loads_its_modules_on_first_use() -> None:
    """The shaper needs node.sim.jam alone: importing it does not load the simulator (a tenth of a second of
    every shaper's start); the package's names still resolve, and an unknown one is an AttributeError."""
    import subprocess
    import sys

    probe = ("import sys, chaos.net.shaper.__main__; "
             "print(sorted(m for m in sys.modules if m.startswith('node.sim.') and m != 'node.sim.jam'))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"

    import node.sim

    assert node.sim.Simulator is Simulator and node.sim.LinkSpec is LinkSpec
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        node.sim.nope  # noqa: B018
