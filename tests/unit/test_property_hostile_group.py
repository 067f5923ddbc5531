"""Hostile input against the group layers -- liveness (heartbeats), membership (GMS views, FD_ALL suspicion,
MERGE3 merges) and the ping workload -- run together in one `Stack` as a node runs them: arbitrary decoded
`Heartbeat`, `Ping`, `Pong`, `ViewMsg`, `ViewAck` and `ViewInfo` messages from members, from the node itself and
from strangers, with view numbers around the installed one (n +/- 1, 0, 1, 2**64-1) and member lists drawn from
members, strangers, duplicates and the empty list, interleaved with time advancing (heartbeat, check and merge
timers fire, members fall silent and are suspected), ping requests, views and PeerRestarted events.

Properties (see test_property_harness): (a) nothing raises (UsageError of a bad ping request excepted); (b)
bounded work and effects per event, effects the runtime can carry out (a view number that cannot grow any more
is one that does not encode), state kept for at most TRACKED_STRANGERS_MAX non-members, at most
`MAX_OUTSTANDING` pings awaiting an answer; and for membership: every view it installs holds only configured
members, once each, with the local member, and names its first member as coordinator. The drops are counted by
reason in the layers' counters (tested one by one below, each failing without its fix).
"""
from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_property_harness import (HOSTILE_SETTINGS, U64_MAX, Driver, Edges, PropertyViolation, StackTarget,
                                   UnboundedMemory, advance_steps, any_value, draw_message, message_strategy,
                                   run_driver)

from node.core import InstallView, Send, TimerFired
from node.errors import UsageError
from node.liveness import Liveness
from node.membership import Membership, MembershipConfig
from node.membership.views import MAX_VIEW_STEP
from node.ping import MAX_OUTSTANDING, PingWorkload
from node.stack import Stack
from node.wire import Heartbeat, Ping, Pong, ViewAck, ViewInfo, ViewMsg

LOCAL = "n2"  # not the first member: it coordinates only once n1 is suspected
MEMBERS = ("n1", "n2", "n3", "n4")
STRANGERS = ("x1", "x2", "x3", "\u00f1" * 32)  # the last is 64 utf-8 bytes: the longest name the wire carries
NAMES = MEMBERS + STRANGERS
EXAMPLES = 200
STEPS = 40
CONFIG = MembershipConfig(check_interval_ms=250, suspect_timeout_ms=1_000, merge_interval_ms=1_000,
                          view_resend_ms=250, info_max_age_ms=2_500)


class BadView(PropertyViolation):
    """Membership installed a view a configured member would not: strangers, duplicates, without the local
    member, or with another coordinator than its first member."""


def group_stack() -> Stack:
    liveness = Liveness(LOCAL, list(MEMBERS), heartbeat_ms=250, silence_ms=1_000)
    return Stack({"liveness": liveness, "ping": PingWorkload(LOCAL, list(MEMBERS)),
                  "membership": Membership(LOCAL, MEMBERS, CONFIG, liveness)})


def effect_bound(driver: Driver) -> int:
    """Per event: a few messages and history events per member (heartbeats, views, announcements, pongs)."""
    return 16 + 8 * len(MEMBERS)


def bounds(driver: Driver) -> None:
    """At most MAX_OUTSTANDING pings awaiting an answer; every installed view is a valid one."""
    ping = driver.target.layers["ping"]
    if len(ping._outstanding) > MAX_OUTSTANDING:
        raise UnboundedMemory(f"{len(ping._outstanding)} pings await an answer; at most {MAX_OUTSTANDING}")
    for eff in driver.installed:
        members = eff.members
        problems = [text for bad, text in (
            (any(m not in MEMBERS for m in members), "strangers"),
            (len(set(members)) != len(members), "duplicates"),
            (LOCAL not in members, "no local member"),
            (not members or eff.view_id[0] != members[0], "coordinator is not the first member"),
            (not 0 < eff.view_id[1] < U64_MAX, "view number cannot grow")) if bad]
        if problems:
            raise BadView(f"installed {eff.view_id} {members}: {', '.join(problems)}")
    driver.installed.clear()


def edges_for(driver: Driver, src: str) -> Edges:
    """View numbers around the installed view and the announcements heard; member lists around the view."""
    gms = driver.target.layers["membership"]
    ping = driver.target.layers["ping"]
    n = gms.view.n
    view_ns = (n, n + MAX_VIEW_STEP, *(i.view.n for i in gms.infos.values()))
    lists = (gms.view.members, MEMBERS, (), (LOCAL,), (LOCAL, LOCAL), tuple(reversed(MEMBERS)),
             MEMBERS + STRANGERS[:1], tuple(m for m in MEMBERS if m != LOCAL))
    return Edges(src=src, names=NAMES, view_ns=view_ns, ids=tuple(ping._outstanding)[:4] + (ping._next_id,),
                 member_lists=lists)


STEP_KINDS = ["msg"] * 8 + ["heartbeat"] * 3 + ["advance"] * 4 + ["ping", "view", "restart", "stale_timer"]
MESSAGES = (Heartbeat, Ping, Pong, ViewMsg, ViewAck, ViewInfo)


def step(data: st.DataObject, driver: Driver) -> None:
    """One event of a hostile history."""
    kind = data.draw(st.sampled_from(STEP_KINDS))
    if kind == "msg":
        src = data.draw(st.sampled_from(NAMES))
        cls = data.draw(st.sampled_from(MESSAGES))
        driver.receive(src, draw_message(data, cls, edges_for(driver, src)))
    elif kind == "heartbeat":  # members that are heard are not suspected: views change both ways
        driver.receive(data.draw(st.sampled_from(MEMBERS)), Heartbeat(driver.steps))
    elif kind == "advance":
        driver.advance(data.draw(advance_steps()))
    elif kind == "ping":
        args: dict[str, Any] = {"to": data.draw(st.sampled_from(NAMES)), "count": data.draw(st.integers(1, 5)),
                                "interval_ms": data.draw(st.sampled_from([1, 10, 250]))}
        driver.request("ping", args, layer="ping")
    elif kind == "view":
        others = data.draw(st.lists(st.sampled_from(MEMBERS), unique=True, max_size=4))
        driver.view(tuple(dict.fromkeys((*others, LOCAL))), n=data.draw(st.integers(1, 3)))
    elif kind == "restart":
        driver.restarted(data.draw(st.sampled_from(NAMES)))
    elif kind == "stale_timer" and driver.fired_keys:
        driver.fire(data.draw(st.sampled_from(driver.fired_keys)))


@settings(max_examples=EXAMPLES, **HOSTILE_SETTINGS)
@given(data=st.data())
def test_group_layers_survive_hostile_messages_within_bounds(data: st.DataObject) -> None:
    driver = Driver(StackTarget(group_stack()), LOCAL, MEMBERS, NAMES, effect_bound=effect_bound, bounds=bounds)

    def body() -> None:
        driver.start()
        for _ in range(data.draw(st.integers(1, STEPS))):
            step(data, driver)

    run_driver(body)


def test_the_strategies_build_every_message_the_group_layers_claim() -> None:
    stack = group_stack()
    claimed = {cls for layer in stack.layers.values() for cls in layer.MESSAGES}
    assert claimed == set(MESSAGES)
    driver = Driver(StackTarget(stack), LOCAL, MEMBERS, NAMES, effect_bound=effect_bound)
    for cls in MESSAGES:
        assert type(any_value(message_strategy(cls, edges_for(driver, "n1")))) is cls


# --- each fix, with the exact message that broke it -------------------------------------------------------------
def started() -> tuple[Stack, Membership]:
    stack = group_stack()
    stack.start(0.0)
    return stack, stack.layers["membership"]


def test_a_view_with_strangers_is_dropped_and_counted() -> None:
    stack, gms = started()
    effects = stack.received(0.1, "n1", ViewMsg("n1", 2, False, ("n1", "n2", "x1", "x2", "x3")))
    assert not [e for e in effects if isinstance(e, InstallView)]
    assert gms.view.members == MEMBERS and gms.counters["view_stranger_members"] == 1


def test_a_view_with_a_member_twice_or_another_coordinator_is_dropped_and_counted() -> None:
    stack, gms = started()
    stack.received(0.1, "n1", ViewMsg("n1", 2, False, ("n1", "n2", "n2")))
    stack.received(0.1, "n1", ViewMsg("n3", 3, False, ("n1", "n2")))
    assert gms.view.n == 1
    assert gms.counters["view_duplicate_members"] == 1 and gms.counters["view_coord_not_first"] == 1


def test_a_view_number_that_cannot_grow_is_dropped_so_later_views_still_encode() -> None:
    stack, gms = started()
    effects = stack.received(0.1, "n1", ViewMsg("n1", U64_MAX, False, MEMBERS))
    assert not [e for e in effects if isinstance(e, InstallView)] and gms.view.n == 1
    assert gms.counters["view_n_absurd"] == 1
    stack.received(0.1, "n1", ViewMsg("n1", 1 + MAX_VIEW_STEP, False, MEMBERS))  # the largest step taken
    assert gms.view.n == 1 + MAX_VIEW_STEP


def test_an_announcement_of_an_absurd_view_does_not_drive_a_merge() -> None:
    stack, gms = started()
    stack.received(0.1, "n1", Heartbeat(1))
    for t_s in (0.5, 1.0, 1.5):  # n1 falls silent: n2 coordinates
        stack.received(t_s, "n3", Heartbeat(2))
        stack.received(t_s, "n4", Heartbeat(2))
    stack.timer(1.5, ("membership", "check"))
    assert gms.acting() == LOCAL
    stack.received(1.6, "n3", ViewInfo("n3", U64_MAX, "n3", ("n3", "n4")))
    stack.received(1.6, "n4", ViewInfo("x1", 5, "x1", ("x1", "n4")))
    effects = stack.timer(1.7, ("membership", "merge"))
    views = [e for e in effects if isinstance(e, InstallView)]
    assert all(e.view_id[1] < U64_MAX and set(e.members) <= set(MEMBERS) for e in views)
    assert gms.counters["info_n_absurd"] == 1 and gms.counters["info_stranger_members"] == 1


def test_membership_messages_claiming_to_come_from_this_member_are_dropped() -> None:
    stack, gms = started()
    stack.received(0.1, LOCAL, ViewMsg(LOCAL, 2, False, (LOCAL, "n3")))
    stack.received(0.1, LOCAL, ViewInfo(LOCAL, 9, LOCAL, (LOCAL,)))
    assert gms.view.n == 1 and LOCAL not in gms.infos and gms.counters["from_self"] == 2


def test_state_renders_a_view_injected_with_a_name_outside_the_configuration() -> None:
    stack, gms = started()
    stack.received(0.05, "n1", Heartbeat(1))
    stack.view(0.1, ("n2", 7), ("n2", "n1", "y9"))  # views given to the stack are trusted as they are
    stack.timer(2.0, ("membership", "check"))  # n1 is silent: n2 installs a view without it, unacked by y9
    assert gms.state(2.0)["unacked"][-1] == "y9"


def test_a_heartbeat_claiming_to_come_from_this_member_is_counted_not_reported_as_a_stranger() -> None:
    stack, _ = started()
    liveness = stack.layers["liveness"]
    assert stack.received(0.1, LOCAL, Heartbeat(1)) == []
    assert stack.received(0.1, "x1", Heartbeat(1))[0].type == "stranger_heard"
    assert liveness.counters == {"from_self": 1, "from_stranger": 1}


def test_a_ping_from_a_stranger_is_not_answered() -> None:
    stack, _ = started()
    ping = stack.layers["ping"]
    assert stack.received(0.1, "x1", Ping(1)) == [] and stack.received(0.1, LOCAL, Ping(1)) == []
    assert stack.received(0.1, "n1", Ping(1)) == [Send("n1", Pong(1))]
    assert ping.counters == {"ping_from_stranger": 1, "ping_from_self": 1}


def test_a_forged_pong_from_another_member_does_not_cancel_the_real_one() -> None:
    stack, _ = started()
    ping = stack.layers["ping"]
    stack.request(1.0, "ping", "ping", {"to": "n3"})
    assert stack.received(1.001, "n4", Pong(1)) == []
    assert [e.type for e in stack.received(1.002, "n3", Pong(1))] == ["pong_rx"]
    assert ping.counters["pong_wrong_peer"] == 1 and ping.answered == {"n3": 1}


def test_pings_never_answered_are_forgotten_beyond_the_bound() -> None:
    stack, _ = started()
    ping = stack.layers["ping"]
    stack.request(0.0, "ping", "ping", {"to": "n3", "count": MAX_OUTSTANDING + 5, "interval_ms": 1})
    for i in range(1, MAX_OUTSTANDING + 5):
        ping.handle(i / 1000, TimerFired(("next", i)))
    assert len(ping._outstanding) == MAX_OUTSTANDING and ping.counters["pings_unanswered_forgotten"] == 5
    assert min(ping._outstanding) == 6  # the oldest went first


def test_a_ping_interval_that_is_not_a_finite_number_is_refused() -> None:
    stack, _ = started()
    for bad in (float("nan"), float("inf"), True):
        try:
            stack.request(0.0, "ping", "ping", {"to": "n3", "count": 2, "interval_ms": bad})
        except UsageError as exc:
            assert "interval_ms" in str(exc)
        else:
            raise AssertionError(f"interval_ms={bad!r} was accepted")

