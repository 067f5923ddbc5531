"""Jammed partitions without containers: the holding queue (cap, fifo, shuffle), the simulator's jammed links,
the shaper engine's jams across reloads, the spec's JSON, the scenario field and the CLI's checks."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from chaos.faults.grudge import Jam, partition_detail
from chaos.harness import actions, runner
from chaos.harness.errors import ScenarioError
from chaos.harness.load import load_text
from chaos.harness.progress import Progress
from chaos.net.shaper import ipudp
from chaos.net.shaper.engine import Engine
from chaos.net.shaper.spec import ShaperSpec
from node.errors import UsageError
from node.sim import jam as jams
from node.sim.jam import JamQueue
from node.unicast import UnicastConfig, make_unicast
from node.sim.harness import send_many
from sim_helpers import settle
from node.sim.simulator import Simulator

A, B, C = "10.9.0.2", "10.9.0.3", "10.9.0.4"


# --- the queue ----------------------------------------------------------------------------------------------------
def test_queue_keeps_order_and_drops_the_oldest_beyond_the_cap() -> None:
    queue: JamQueue[int] = JamQueue("fifo", cap=3)
    pushed_out = [queue.hold(i) for i in range(5)]
    assert pushed_out == [None, None, None, 0, 1]
    assert (queue.held, queue.dropped, len(queue)) == (5, 2, 3)
    assert queue.release(random.Random(0)) == [2, 3, 4]
    assert len(queue) == 0 and queue.release(random.Random(0)) == []


def test_shuffle_is_a_seeded_permutation() -> None:
    def released(seed: int) -> list[int]:
        queue: JamQueue[int] = JamQueue("shuffle")
        for i in range(50):
            queue.hold(i)
        return queue.release(random.Random(seed))

    assert sorted(released(1)) == list(range(50))
    assert released(1) != list(range(50))
    assert released(1) == released(1) and released(1) != released(2)


@pytest.mark.parametrize("release,cap,fragment", [("lifo", None, "release must be one of fifo, shuffle"),
                                                  ("fifo", 0, "cap must be"), ("fifo", jams.MAX_HELD + 1, "cap must"),
                                                  ("fifo", True, "cap must"), ("fifo", 2.5, "cap must")])
def test_bad_release_or_cap_is_refused(release, cap, fragment) -> None:
    with pytest.raises(UsageError, match=fragment):
        Jam(release, cap)


def test_a_jammed_partition_says_so_in_its_fault_detail() -> None:
    assert partition_detail({"n2": {"n1"}}) == {"grudge": {"n2": ["n1"]}}
    assert partition_detail({"n2": {"n1"}}, Jam("shuffle", 9)) == {"grudge": {"n2": ["n1"]}, "mode": "jam",
                                                                  "release": "shuffle", "cap": 9}


# --- the simulator ------------------------------------------------------------------------------------------------
def _unicast_pair(seed: int) -> Simulator:
    sim = Simulator(seed)
    for name in ("a", "b"):
        sim.add_member(name, {"unicast": make_unicast("unicast3", UnicastConfig())})
    return sim


def test_a_jammed_link_holds_until_the_heal_then_delivers_everything() -> None:
    sim = _unicast_pair(seed=4)
    sim.jam("a", "b", "fifo")
    sent = send_many(sim, "a", "b", 20)
    sim.run_for(5.0)
    assert sim.delivered("b", "a") == [], sim.repro()
    assert sim.counters["jam_held"] >= 20 and sim.counters["cut"] == 0
    sim.heal()
    settle(sim)
    assert sim.delivered("b", "a") == sent, sim.repro()
    assert sim.counters["jam_released"] == sim.counters["jam_held"]


def test_datagrams_in_flight_are_held_on_arrival_and_one_link_heals_alone() -> None:
    sim = _unicast_pair(seed=5)
    sim.set_link("a", "b", delay_ms=100)
    send_many(sim, "a", "b", 3)
    sim.run_for(0.01)  # on their way
    sim.jam("a", "b")
    sim.jam("b", "a")
    sim.run_for(1.0)
    assert sim.delivered("b", "a") == [] and sim.counters["jam_held"] >= 3
    sim.heal("b", "a")
    assert set(sim.network.jams) == {("a", "b")}
    with pytest.raises(UsageError):
        sim.heal("a", None)


def test_the_cap_drops_the_oldest_and_shuffle_reorders_the_release() -> None:
    sim = Simulator(6)
    for name in ("a", "b"):
        sim.add_member(name, {"unicast": make_unicast("unicast3", UnicastConfig())})
    sim.jam("a", "b", "shuffle", cap=5)
    send_many(sim, "a", "b", 30)
    sim.run_for(0.5)
    held = sim.counters["jam_held"]
    assert sim.heal() == {"held": held, "released": 5, "dropped": held - 5}  # what a jam's fault_end records
    assert sim.counters["jam_dropped"] == held - 5 and sim.counters["jam_released"] == 5
    assert sim.heal() is None  # no jam left to heal


# --- the shaper's engine -------------------------------------------------------------------------------------------
def _spec(generation: int, jammed: dict[str, Jam]) -> ShaperSpec:
    return ShaperSpec("r", "n1", seed=3, generation=generation, jams=jammed, names={A: "n1", B: "n2", C: "n3"})


def test_the_engine_holds_jammed_packets_and_lets_them_go_when_a_reload_lifts_the_jam() -> None:
    engine = Engine(_spec(1, {B: Jam("fifo", cap=4), C: Jam("shuffle")}))
    to_b = [ipudp.build(A, B, 7100, 7100, b"%d" % i) for i in range(6)]
    to_c = [ipudp.build(A, C, 7100, 7100, b"%d" % i) for i in range(40)]
    for raw in to_b + to_c:
        assert engine.process(0.0, raw).at_s is None  # taken off the queue: the shaper keeps a copy
    other = engine.process(0.0, ipudp.build(C, A, 7100, 7100, b"x"))
    assert other.at_s == 0.0  # not jammed: on its way
    assert (engine.stats["jam_held"], engine.stats["jam_dropped"], engine.jammed) == (46, 2, 44)
    lifted_b = Engine(_spec(2, {C: Jam("shuffle")}), previous=engine)
    assert lifted_b.lifted == to_b[2:]  # fifo, the two oldest dropped by the cap
    assert lifted_b.jammed == 40 and lifted_b.stats["jam_released"] == 4
    assert lifted_b.last_lift == {"held": 6, "released": 4, "dropped": 2, "generation": 2}
    stays = Engine(_spec(3, {C: Jam("shuffle")}), previous=lifted_b)  # lifts nothing: the last lift stays gen 2
    assert stays.last_lift["generation"] == 2
    ending = stays.release_all()
    assert sorted(ending) == sorted(to_c) and ending != to_c
    assert stays.jammed == 0 and stays.stats["jam_released"] == 44
    assert stays.last_lift == {"held": 40, "released": 40, "dropped": 0, "generation": 3}


def test_a_jam_that_stays_keeps_what_it_holds_across_a_reload() -> None:
    engine = Engine(_spec(1, {B: Jam()}))
    engine.process(0.0, ipudp.build(A, B, 7100, 7100, b"kept"))
    again = Engine(_spec(2, {B: Jam()}), previous=engine)
    assert again.lifted == [] and again.jammed == 1


def test_the_spec_carries_its_jams_through_json() -> None:
    spec = _spec(1, {B: Jam("shuffle", 7)})
    back = ShaperSpec.from_json(spec.to_json())
    assert back.jams == {B: Jam("shuffle", 7)} and back.destinations == [B]
    data = json.loads(spec.to_json())
    del data["jams"]  # a spec written before jams existed
    assert ShaperSpec.from_json(json.dumps(data)).jams == {}


# --- scenario files ---------------------------------------------------------------------------------------------
SCENARIO = """cluster: {{nodes: 2, defaults: {{membership: gms, multicast: none}}}}
steps:
  - at_s: 0.5
    workload: {{kind: unicast, from: n1, to: n2, count: 120, size: 100, rate: 100}}
  - at_s: 1
    partition: {partition}
    duration_s: 1
duration_s: 3
settle_s: 2
"""


def test_a_jammed_scenario_in_the_simulator_holds_then_delivers(tmp_path: Path) -> None:
    loaded = load_text(SCENARIO.format(partition='{grudge: "n2<-n1", mode: jam, release: shuffle}'), "s.yaml")
    step = loaded.scenario.steps[1]
    assert step.grudge == "n2<-n1" and step.jam == Jam("shuffle")
    assert actions.describe(step) == "partition n2<-n1 (jammed, released shuffle) for 1 s"
    plain = load_text(SCENARIO.format(partition="{n2: [n1]}"), "s.yaml").scenario.steps[1]
    assert plain.jam is None and actions.describe(plain) == "partition n2<-n1 for 1 s"
    result = runner.run(loaded, backend="sim", seed=2, out=tmp_path, progress=Progress(quiet=True), analyze=False)

    def events(node: str) -> list[dict]:
        return [json.loads(line) for line in (result.run_dir / "events" / f"{node}.jsonl").read_text().splitlines()]

    starts = [e for e in events("controller") if e["type"] == "fault_start" and e["kind"] == "partition"]
    assert [e["detail"] for e in starts] == [{"grudge": {"n2": ["n1"]}, "mode": "jam", "release": "shuffle",
                                              "cap": None}]
    jam_start = starts[0]["applied_ts"]
    ends = [e for e in events("controller") if e["type"] == "fault_end" and e["kind"] == "partition"]
    delivered = [e for e in events("n2") if e["type"] == "app_deliver" and e["from"] == "n1"]
    assert len({e["msg_id"] for e in delivered}) == 120  # every message, the jammed ones after the heal
    assert not [e for e in delivered if jam_start + 0.05 < e["ts"] < ends[0]["applied_ts"]]  # nothing crossed
    # the fault_end says what the jam held and let go: n1's datagrams to n2 in that second, none dropped
    sent = [e for e in events("n1") if e["type"] == "data_tx" and e["to"] == "n2"
            and jam_start <= e["ts"] < ends[0]["applied_ts"]]
    jam = ends[0]["detail"]["jam"]
    assert jam["dropped"] == 0 and jam["released"] == jam["held"] >= len(sent) > 50, (jam, len(sent))


@pytest.mark.parametrize("partition,fragment", [
    ('{grudge: "n2<-n1", release: shuffle}', "release and cap belong to a jammed partition"),
    ('{grudge: "n2<-n1", mode: jam, cap: 0}', "cap"),
    ('{grudge: "n2<-n9", mode: jam}', "n9"),
    ('{grudge: "n2<-n1", mode: hold}', "mode"),
])
def test_bad_partition_fields_are_refused_with_their_line(partition: str, fragment: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_text(SCENARIO.format(partition=partition), "s.yaml")
    lines = [str(p) for p in info.value.problems]
    assert any(line.startswith("s.yaml:6: steps[1].partition") and fragment in line for line in lines), lines
