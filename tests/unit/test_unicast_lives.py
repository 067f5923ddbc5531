"""A restarted node is a new life for its peers whatever its clock and its connection ids do (unicast3).

Each life gets the first connection id a real clock gives it (`conn_id_start_from_boot` of its simulated boot),
so two lives within one 4.096 s stream tick open their connection with the same id, and a clock stepped back or
a wrapped id space makes the new life's ids compare older. The receiver learns of the new life from the datagram
header (node.incarnation) and starts a fresh window for it; datagrams of the old life still in flight are
dropped. Forged lives (an incarnation far in the future, a sender that is no member) cannot silence anyone.
"""
from __future__ import annotations

from node.sim import send_many
from node.sim.simulator import Simulator
from node.unicast import UnicastConfig, make_unicast
from node.unicast.connid import STREAM_MAX, conn_id_start_from_boot, first_conn_id
from node.wire import Heartbeat, encode_datagram
from sim_helpers import settle

LAYER = "unicast"
MEMBERS = ("a", "b")


def layer_for(name: str, boot_ms: int, conn_id_start: int | None = None):
    start = conn_id_start_from_boot(boot_ms) if conn_id_start is None else conn_id_start
    return {LAYER: make_unicast("unicast3", name, UnicastConfig(conn_id_start=start), MEMBERS)}


def new_sim(seed: int, a_conn_id_start: int | None = None) -> Simulator:
    sim = Simulator(seed)
    for name in MEMBERS:
        sim.add_member(name, layer_for(name, sim.wall_ms(), a_conn_id_start if name == "a" else None))
    return sim


def restart_a(sim: Simulator, clock_step_ms: int = 0, conn_id_start: int | None = None) -> int:
    boot = sim.next_boot_ms("a", clock_step_ms)
    sim.restart_member("a", layer_for("a", boot, conn_id_start), boot_ms=boot)
    return boot



def conn_id(sim: Simulator, member: str, peer: str) -> int:
    return sim.layer(member, LAYER).send_entries[peer].conn_id


def test_two_lives_in_one_conn_id_tick_are_told_apart() -> None:
    """The issue's case: restarted 2.5 s after its boot, a's new connection has its old life's very id (seed 16
    boots at the start of a 4.096 s tick)."""
    sim = new_sim(seed=16)
    first = send_many(sim, "a", "b", 20, "life1")
    settle(sim)
    old_id = conn_id(sim, "a", "b")
    sim.run_until(2.5)
    restart_a(sim)
    second = send_many(sim, "a", "b", 20, "life2")
    assert conn_id(sim, "a", "b") == old_id, "the test needs two lives with one conn_id"
    settle(sim)
    assert sim.delivered("b", "a") == first + second, sim.repro()
    assert not sim.emitted("data_rx", node="b", action="below_window"), sim.repro()
    assert sim.emitted("peer_restarted", node="b", peer="a")
    assert sim.emitted("conn_state", node="b", dir="recv", state="removed", reason="peer_restarted")


def test_a_new_life_after_many_syncs_is_not_an_old_connection() -> None:
    """12 syncs moved the stream's generation on; the new life's first id then compares older than the window's
    (and sits in its lineage): without a fresh window its messages were dropped or judged delivered."""
    sim = new_sim(seed=12)
    first = send_many(sim, "a", "b", 5, "life1")
    settle(sim)
    for _ in range(12):
        sim.request("b", LAYER, "sync", {"peer": "a"})
        settle(sim)
    assert conn_id(sim, "a", "b") & 0xFFF == 12
    restart_a(sim)
    second = send_many(sim, "a", "b", 20, "life2")
    settle(sim)
    assert sim.delivered("b", "a") == first + second, sim.repro()
    assert not sim.emitted("data_rx", node="b", action="wrong_conn"), sim.repro()


def test_the_id_space_wrapping_across_a_restart() -> None:
    """The old life's ids sit at the top of the stream space, the new life's at the bottom (older, by serial
    order, than nothing; newer than the top): the new life is heard either way."""
    sim = new_sim(seed=3, a_conn_id_start=first_conn_id(STREAM_MAX))
    first = send_many(sim, "a", "b", 10, "life1")
    settle(sim)
    restart_a(sim, conn_id_start=first_conn_id(STREAM_MAX))
    second = send_many(sim, "a", "b", 10, "life2")
    settle(sim)
    assert sim.delivered("b", "a") == first + second, sim.repro()


def test_a_clock_stepped_back_across_the_restart_is_still_a_new_life() -> None:
    """The new life's incarnation is below the old one: its datagrams read as leftovers while the old life could
    still be talking (the life timeout), then it is taken as the new life and everything it sent arrives."""
    sim = new_sim(seed=5)
    first = send_many(sim, "a", "b", 10, "life1")
    settle(sim)
    old = sim.incarnation["a"]
    boot = restart_a(sim, clock_step_ms=-60_000)
    assert boot < old
    second = send_many(sim, "a", "b", 10, "life2")
    settle(sim)
    assert sim.delivered("b", "a") == first + second, sim.repro()
    assert sim.emitted("datagram_dropped", node="b", reason="old-incarnation")
    assert sim.emitted("peer_restarted", node="b", peer="a", incarnation=boot)


def test_delayed_datagrams_of_the_old_life_are_dropped() -> None:
    sim = new_sim(seed=8)
    sim.delay_matching("a", "b", "UnicastData", 0.5, count=3)
    first = send_many(sim, "a", "b", 3, "life1")
    sim.run_for(0.05)
    restart_a(sim)
    second = send_many(sim, "a", "b", 5, "life2")
    settle(sim)
    assert sim.delivered("b", "a") == second, sim.repro()  # the old life's 3 arrived after its end
    assert len(sim.emitted("datagram_dropped", node="b", reason="old-incarnation")) >= 1
    assert first[0] not in sim.delivered("b", "a")


def test_a_forged_far_future_incarnation_is_a_counted_drop() -> None:
    """A typo or a forged maximum in the incarnation field must not retire the real life."""
    sim = new_sim(seed=9)
    sim.inject_bytes("b", encode_datagram(sim.cluster_id, "a", [Heartbeat(1)], incarnation=2**64 - 1))
    sent = send_many(sim, "a", "b", 10, "m")
    settle(sim)
    assert sim.delivered("b", "a") == sent, sim.repro()
    assert sim.emitted("datagram_dropped", node="b", reason="future-incarnation")
    assert not sim.emitted("peer_restarted", node="b")


def test_a_forged_newer_life_gives_way_once_it_falls_silent() -> None:
    """A forged incarnation a little ahead of the clock is taken as a restart, but once that 'life' is silent
    for the life timeout the real one is heard again, and the messages it kept resending arrive."""
    sim = new_sim(seed=10)
    sim.inject_bytes("b", encode_datagram(sim.cluster_id, "a", [Heartbeat(1)], incarnation=sim.wall_ms() + 30_000))
    sim.run_for(0.01)
    sent = send_many(sim, "a", "b", 10, "m")
    settle(sim)
    assert sim.delivered("b", "a") == sent, sim.repro()
    assert sim.emitted("datagram_dropped", node="b", reason="old-incarnation")


def test_a_sender_that_is_no_member_is_dropped_before_any_layer() -> None:
    sim = new_sim(seed=11)
    sim.inject_bytes("b", encode_datagram(sim.cluster_id, "mallory", [Heartbeat(1)], incarnation=0))
    sim.run_for(0.1)
    assert sim.emitted("datagram_dropped", node="b", reason="unknown-sender")
    assert "mallory" not in sim.layer("b", LAYER).recv_entries


def test_a_forged_neighbouring_incarnation_cannot_reset_a_live_member() -> None:
    """The fuzzer's header mutation: the real incarnation plus one, mid-stream, while the real life talks. It is
    dropped as unconfirmed; nobody is told of a restart, no connection is reset, everything arrives."""
    sim = new_sim(seed=13)
    sent = send_many(sim, "a", "b", 10, "m")
    sim.run_for(0.05)
    forged = encode_datagram(sim.cluster_id, "a", [Heartbeat(1)], incarnation=sim.incarnation["a"] + 1)
    for delay_s in (0.0, 0.2, 0.4):
        sim.inject_bytes("b", forged, delay_s)
    sent += send_many(sim, "a", "b", 10, "n")
    settle(sim)
    assert sim.delivered("b", "a") == sent, sim.repro()
    assert not sim.emitted("peer_restarted", node="b"), sim.repro()
    assert len(sim.emitted("datagram_dropped", node="b", reason="unconfirmed-incarnation")) == 3
