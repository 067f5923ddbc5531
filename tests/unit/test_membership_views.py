"""Membership in the simulator: the initial view, suspicion excludes a member (also the coordinator), views reach
every layer of the stack (InstallView), subgroups merge after a partition heals (MERGE3: the lowest coordinator
leads, MergeView id max+1), and an asymmetric partition gives the asymmetric views of the seeds."""
from __future__ import annotations

import pytest

from node.core import Emit, InstallView, Received, Send, TimerFired, ViewInstalled
from node.errors import ConfigError
from node.liveness import Liveness
from node.membership import Membership, MembershipConfig, View, merged_view
from node.membership.sim import converged, group_sim, start_member, views
from node.stack import Stack
from node.unicast import UnicastConfig, make_unicast
from node.wire import Heartbeat, ViewAck, ViewMsg

ABC = ("a", "b", "c")
MERGE_BOUND_S = 4.0  # suspicion cleared on the next check, announcements and the merge check within 2 intervals


def test_every_member_starts_in_the_initial_view_and_records_it() -> None:
    sim = group_sim(ABC, seed=1)
    sim.run_for(3.0)
    assert views(sim) == {m: (("a", 1), ABC) for m in ABC}
    assert [(e["node"], e["view_id"]) for e in sim.emitted("view")] == [(m, ["a", 1]) for m in ABC]
    assert not sim.emitted("suspect")


def test_a_silent_member_is_suspected_and_excluded_at_about_the_same_time_everywhere() -> None:
    sim = group_sim(ABC, seed=2)
    sim.run_for(1.0)
    sim.partition_both("a", "c")
    sim.partition_both("b", "c")
    sim.run_for(3.0)
    assert views(sim)["a"] == (("a", 2), ("a", "b")) and views(sim)["b"] == (("a", 2), ("a", "b"))
    assert views(sim)["c"] == (("c", 2), ("c",))
    suspects = [e for e in sim.emitted("suspect") if e["peer"] == "c"]
    assert {e["node"] for e in suspects} == {"a", "b"}
    assert max(e["ts"] for e in suspects) - min(e["ts"] for e in suspects) <= 0.25  # FD_ALL: together
    assert 1.5 <= suspects[0]["ts"] - 1.0 <= 1.5 + 0.25 + 0.25


def test_when_the_coordinator_dies_the_next_member_takes_over() -> None:
    sim = group_sim(ABC, seed=3)
    sim.run_for(1.0)
    sim.partition_both("a", "b")
    sim.partition_both("a", "c")
    sim.run_for(3.0)
    assert views(sim)["b"] == (("b", 2), ("b", "c")) == views(sim)["c"]
    assert sim.layer("b", "membership").acting() == "b"


def test_views_reach_every_layer_through_the_stack() -> None:
    sim = group_sim(ABC, seed=4, extra=lambda name, members: {
        "unicast": make_unicast("unicast3", name, UnicastConfig(), members)})
    sim.request("a", "unicast", "send", {"to": "c", "payload": b"x"})
    sim.run_for(1.0)
    sim.partition_both("a", "c")
    sim.partition_both("b", "c")
    sim.run_for(3.0)
    uni = sim.layer("a", "unicast")
    assert uni.view_id == ("a", 2) and uni.members == ("a", "b")
    assert uni.send_entries["c"].state == "closing"          # unicast3 marks entries CLOSING on the view
    assert sim.emitted("conn_state", node="a", peer="c", state="closing")


def test_stack_expands_install_view_into_every_layers_view() -> None:
    class Installer(Liveness):
        def on_timer(self, now_s, key):
            return [InstallView(("a", 7), ("a", "b"))] if key == "now" else super().on_timer(now_s, key)

    seen = []

    class Recorder(Liveness):
        MESSAGES = ()

        def on_view(self, now_s, view_id, members):
            seen.append((view_id, members))
            return []

    stack = Stack({"first": Installer("a", ["a", "b"]), "second": Recorder("a", ["a", "b"])})
    effects = stack.timer(1.0, ("first", "now"))
    assert effects == [InstallView(("a", 7), ("a", "b"))]
    assert seen == [(("a", 7), ("a", "b"))]
    assert stack.view(2.0, ("b", 8), ("b",)) == [] and seen[-1] == (("b", 8), ("b",))
    assert ViewInstalled(("b", 8), ("b",)).members == ("b",)


def test_subgroups_merge_into_one_view_after_a_symmetric_partition_heals() -> None:
    sim = group_sim(ABC, seed=5)
    sim.run_for(1.0)
    sim.partition_both("a", "b")
    sim.partition_both("a", "c")
    sim.run_for(4.0)
    assert views(sim)["a"] == (("a", 2), ("a",)) and views(sim)["b"] == (("b", 2), ("b", "c"))
    healed = sim.now_s
    sim.heal()
    assert sim.run_until_true(lambda: converged(sim), MERGE_BOUND_S), f"{views(sim)}; {sim.repro()}"
    assert views(sim)["a"] == (("a", 3), ABC)                  # the lowest coordinator led, id max + 1
    merges = sim.emitted("merge")
    assert len(merges) == 1 and merges[0]["node"] == "a" and merges[0]["ts"] > healed
    assert sorted(map(sorted, merges[0]["subgroups"])) == [["a"], ["b", "c"]]
    sim.run_for(5.0)
    assert views(sim)["c"] == (("a", 3), ABC), "no view changes after the merge"


def test_three_singletons_merge_into_one_view() -> None:
    sim = group_sim(ABC, seed=6)
    sim.run_for(1.0)
    for x, y in (("a", "b"), ("a", "c"), ("b", "c")):
        sim.partition_both(x, y)
    sim.run_for(4.0)
    assert {v[1] for v in views(sim).values()} == {("a",), ("b",), ("c",)}
    sim.heal()
    assert sim.run_until_true(lambda: converged(sim), MERGE_BOUND_S), f"{views(sim)}; {sim.repro()}"


def test_an_asymmetric_partition_gives_b_a_view_without_a_while_a_keeps_b() -> None:
    """B stops hearing A; A still hears B (the precondition of JGRP-1873), and it stays so until the heal."""
    sim = group_sim(ABC, seed=7)
    sim.run_for(1.0)
    sim.partition("a", "b")
    sim.run_for(4.0)
    for _ in range(8):                                         # stable, no flapping
        sim.run_for(0.5)
        a_view, b_view = views(sim)["a"][1], views(sim)["b"][1]
        assert "a" not in b_view and "b" in a_view, views(sim)
    assert "a" in sim.layer("b", "membership").suspected and not sim.layer("a", "membership").suspected
    installs = len(sim.emitted("view"))
    sim.run_for(3.0)
    assert len(sim.emitted("view")) == installs, "views keep changing during the cut"
    sim.heal()
    assert sim.run_until_true(lambda: converged(sim), MERGE_BOUND_S), f"{views(sim)}; {sim.repro()}"


def test_a_member_that_starts_late_has_not_joined_yet_and_is_not_suspected() -> None:
    sim = group_sim(ABC, seed=8, start=("a", "b"))
    sim.run_for(20.0)                                          # far beyond suspect_timeout_ms, within the join's
    assert views(sim) == {"a": (("a", 1), ABC), "b": (("a", 1), ABC)} and not sim.emitted("suspect")
    start_member(sim, "c")
    sim.run_for(3.0)
    assert views(sim) == {m: (("a", 1), ABC) for m in ABC} and not sim.emitted("suspect")


def test_a_member_never_heard_within_the_join_timeout_is_suspected_and_merged_in_when_it_comes() -> None:
    config = MembershipConfig(join_timeout_ms=3_000)
    sim = group_sim(ABC, seed=8, config=config, start=("a", "b"))
    sim.run_for(2.9)
    assert not sim.emitted("suspect")
    sim.run_for(0.5)
    assert views(sim) == {"a": (("a", 2), ("a", "b")), "b": (("a", 2), ("a", "b"))}
    assert {(e["node"], e["peer"]) for e in sim.emitted("suspect")} == {("a", "c"), ("b", "c")}
    start_member(sim, "c")
    assert sim.run_until_true(lambda: converged(sim), MERGE_BOUND_S), f"{views(sim)}; {sim.repro()}"


def gms(local: str = "b") -> Membership:
    layer = Membership(local, ABC, MembershipConfig(), Liveness(local, list(ABC)))
    layer.start(0.0)
    return layer


def test_views_that_are_older_or_exclude_the_member_are_discarded_and_repeats_acked() -> None:
    layer = gms("b")
    assert layer.handle(0.1, Received("a", ViewMsg("a", 1, False, ABC))) == [Send("a", ViewAck("a", 1))]  # a repeat
    assert layer.handle(0.1, Received("c", ViewMsg("c", 5, False, ("a", "c")))) == []                   # not me
    effects = layer.handle(0.2, Received("a", ViewMsg("a", 4, True, ("a", "b"))))
    assert InstallView(("a", 4), ("a", "b")) in effects and Send("a", ViewAck("a", 4)) in effects
    assert layer.handle(0.3, Received("c", ViewMsg("c", 3, False, ABC))) == []                          # older
    assert layer.view == View(("a", 4), ("a", "b"))
    assert layer.counters["view_without_me"] == 1 and layer.counters["view_older"] == 1


def test_a_view_from_a_suspected_member_waits_until_it_is_heard_again() -> None:
    layer = gms("b")
    for peer in ("a", "c"):
        layer.detector.liveness.handle(0.1, Received(peer, Heartbeat(1)))
    layer.handle(2.0, TimerFired("check"))                    # nothing heard for 1.9 s: b suspects a and c
    assert layer.suspected == {"a", "c"} and layer.view == View(("b", 2), ("b",))
    assert layer.handle(2.1, Received("a", ViewMsg("a", 5, False, ABC))) == []
    layer.detector.liveness.handle(2.2, Received("a", Heartbeat(1)))
    effects = layer.handle(2.3, Received("a", ViewMsg("a", 5, False, ABC)))
    assert Emit("unsuspect", {"peer": "a"}) in effects and InstallView(("a", 5), ABC) in effects
    assert layer.counters["view_from_suspect"] == 1


def test_merged_view_is_the_union_of_unsuspected_members_in_join_order() -> None:
    rank = {m: i for i, m in enumerate("abcd")}
    view = merged_view(View(("b", 4), ("b", "d")), [View(("a", 6), ("a", "c")), View(("c", 2), ("c",))], "b",
                       {"c"}, rank)
    assert view == View(("a", 7), ("a", "b", "d"))


@pytest.mark.parametrize("bad", [{"suspect_timeout_ms": 100}, {"merge_interval_ms": 0}, {"nope": 1},
                                 {"join_timeout_ms": 1_000}])
def test_bad_membership_settings_are_refused(bad) -> None:
    with pytest.raises(ConfigError):
        MembershipConfig.from_mapping(bad)
