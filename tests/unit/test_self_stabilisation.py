"""Self-stabilisation of the fixed protocols, as a hypothesis state machine over the simulator: three members run
the node's stack (liveness, ping, unicast3, gms, nakack4 with the tipc sync) on a clean network while a forger
sends them arbitrary datagrams -- every message type the stack routes, claiming any member or a stranger as
sender, with incarnation 0 ("not stated"), the claimed member's current one or another, fields drawn around the
victim's own state for the claimed sender (test_property_hostile_*'s strategies) -- interleaved with the members'
real unicasts and multicasts and time passing.

Then the forger falls silent, and the property (DESIGN.md, "Self-stabilisation"): within `BOUND_S` (a few
retransmit intervals, one sync timeout, and the membership's suspicion and merge periods) the views converge on
all three, and every member delivers every new unicast and multicast of every other member once and in order.
The one thing no protocol without authentication can prevent is allowed: a forged message inside a window may be
delivered as its claimed sender's, and the real message with that seqno is then dropped as already delivered,
so a receiver may miss as many new messages of a sender as it delivered forged ones of that sender.

A failure prints the steps hypothesis shrank it to; each shrunk example becomes a regression test below, named
after what it forges.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Iterable

import test_property_hostile_group as group
import test_property_hostile_multicast as mcast
import test_property_hostile_unicast as ucast
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule
from test_property_harness import HOSTILE_SETTINGS, U64_MAX, Edges, message_strategy

from node.core import make_payload, payload_msg_id
from node.errors import WindowFull
from node.liveness import Liveness
from node.membership import Membership
from node.incarnation import LIFE_TIMEOUT_S
from node.membership.sim import converged
from node.multicast import Nakack4, Nakack4Config
from node.ping import PingWorkload
from node.sim.simulator import Simulator
from node.stack import Stack
from node.unicast import make_unicast
from node.unicast.connid import GEN_BITS, first_conn_id, next_generation
from node.wire import (BcastState, BcastStateReq, Heartbeat, Message, Nakack4Highest, Nakack4Msg, UnicastAck,
                       UnicastData, UnicastSyncOk, encode_datagram)

MEMBERS = ("n1", "n2", "n3")
STRANGER = "x1"
CLAIMED = MEMBERS + (STRANGER,)
NEW_UNICASTS = 6     # per ordered pair, after the forger stopped
NEW_MULTICASTS = 6   # per member
RETRY_S = 0.05       # an application thread whose multicast window is full tries again after this
UCFG, GCFG = ucast.CONFIG, group.CONFIG
# the hostile tests' small ring, but the node's retention of a departed member's messages: a member a forged
# suspicion or life excluded for a while gets what was multicast meanwhile when it is merged back
MCFG = Nakack4Config(**{**mcast.CONFIG.as_dict(), "retain_departed_ms": Nakack4Config().retain_departed_ms})
# A forged life (another incarnation, heard before the real one or after it fell silent) stays the member's
# current life until it has been silent LIFE_TIMEOUT_S; then the real life is taken as a restart of that member,
# and what it was owed meanwhile is lost as for a restart (DESIGN.md, "What is not defended": only authentication
# closes it). New messages are sent once that is over: the heartbeats' period after the life timeout.
LIVES_SETTLE_S = LIFE_TIMEOUT_S + 0.3
# After the forger's last datagram: views converge (a forged view or suspicion is undone by the merge check:
# suspicion timeout + an announcement's maximum age + a merge round) and every window resyncs (one sync timeout
# and a few retransmit intervals each for unicast3 and the tipc sync).
BOUND_S = ((GCFG.suspect_timeout_ms + GCFG.info_max_age_ms + 2 * GCFG.merge_interval_ms)
           + UCFG.sync_timeout_ms + 5 * UCFG.xmit_interval_ms
           + 5 * MCFG.sync_interval_ms) / 1000


def member_stack(name: str) -> Stack:
    """The node's layers (node.layers.build_stack's order) with the hostile tests' small windows."""
    liveness = Liveness(name, list(MEMBERS), heartbeat_ms=250, silence_ms=GCFG.suspect_timeout_ms)
    return Stack({
        "liveness": liveness,
        "ping": PingWorkload(name, list(MEMBERS)),
        "unicast": make_unicast("unicast3", name, UCFG, MEMBERS),
        "membership": Membership(name, MEMBERS, GCFG, liveness),
        "multicast": Nakack4(name, MCFG, MEMBERS, "tipc"),
    })


def edges(sim: Simulator, victim: str, claimed: str, layer: str) -> Edges:
    """Fields around what `victim` holds for `claimed` in `layer` (the hostile tests' strategies)."""
    layers = sim.stacks[victim].layers
    if layer == "unicast":
        return ucast.edges_for(layers["unicast"], claimed, False)
    if layer == "multicast":
        shim = SimpleNamespace(target=SimpleNamespace(layer=layers["multicast"]),
                               lives={claimed: sim.incarnation.get(claimed, 0)})
        return mcast.edges_for(shim, claimed)
    return group.edges_for(SimpleNamespace(target=SimpleNamespace(layers=layers)), claimed)


class ForgedThenSilent(RuleBasedStateMachine):
    """Forged datagrams and real traffic, then silence of the forger and the property (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.sim = Simulator(seed=0, record_events=False)
        for name in MEMBERS:
            self.sim.add_member(name, member_stack(name))
        self.routes = {cls: layer for cls, layer in self.sim.stacks[MEMBERS[0]]._by_message.items()}
        self.sent = 0
        self.forged_states: set[tuple[str, str]] = set()  # (victim, claimed sender) of forged BcastStates

    @initialize(settle_s=st.sampled_from([0.0, 0.5, 3.0]))
    def start(self, settle_s: float) -> None:
        self.sim.run_for(settle_s)

    @rule(data=st.data(), victim=st.sampled_from(MEMBERS), claimed=st.sampled_from(CLAIMED),
          life=st.sampled_from(["zero", "current", "other"]))
    def forge(self, data: st.DataObject, victim: str, claimed: str, life: str) -> None:
        cls = data.draw(st.sampled_from(sorted(self.routes, key=lambda c: c.TYPE)), label="type")
        msg = data.draw(message_strategy(cls, edges(self.sim, victim, claimed, self.routes[cls])), label="msg")
        current = self.sim.incarnation.get(claimed, 0)
        incarnation = {"zero": 0, "current": current}.get(life)
        if incarnation is None:
            incarnation = data.draw(st.one_of(st.sampled_from([max(0, current - 1), current + 1, U64_MAX]),
                                              st.integers(1, U64_MAX)), label="incarnation")
        inject_forgery(self.sim, (victim, claimed, incarnation, msg), self.forged_states)

    @rule(dt_s=st.sampled_from([0.001, 0.02, 0.1, 0.45, 1.2]))
    def advance(self, dt_s: float) -> None:
        self.sim.run_for(dt_s)

    @rule(src=st.sampled_from(MEMBERS), dst=st.sampled_from(MEMBERS))
    def unicast(self, src: str, dst: str) -> None:
        if src != dst:
            send(self.sim, src, "unicast", f"{src}.old.{self._next()}", dst)

    @rule(src=st.sampled_from(MEMBERS))
    def multicast(self, src: str) -> None:
        send(self.sim, src, "multicast", f"{src}.old.{self._next()}")

    def _next(self) -> int:
        self.sent += 1
        return self.sent

    def teardown(self) -> None:
        check_recovery(self.sim, self.forged_states)


def new_ids(src: str, dst: str) -> tuple[list[str], list[str]]:
    """The ids of the new unicasts src -> dst and of src's new multicasts, in send order."""
    return ([f"{src}.newu.{dst}.{n}" for n in range(1, NEW_UNICASTS + 1)],
            [f"{src}.newm.{n}" for n in range(1, NEW_MULTICASTS + 1)])


def check_recovery(sim: Simulator, forged_states: set[tuple[str, str]] = frozenset()) -> None:
    """The forger is silent from now on: once forged lives are over (LIVES_SETTLE_S), every member sends new
    messages, and the property must hold."""
    sim.run_for(LIVES_SETTLE_S)
    start = {(r, s): len(sim.delivered(r, s)) for r in MEMBERS for s in MEMBERS if r != s}
    for src in MEMBERS:
        for dst in MEMBERS:
            if dst != src:
                send_in_order(sim, src, "unicast", new_ids(src, dst)[0], dst)
        send_in_order(sim, src, "multicast", new_ids(src, src)[1])
    deadline_s = sim.now_s + BOUND_S

    def outcome() -> list[str]:
        return [problem for r, s in start
                for problem in _pair_problems(sim, r, s, start[(r, s)], (r, s) in forged_states)]

    done = sim.run_until_true(lambda: converged(sim, MEMBERS) and not outcome(), BOUND_S)
    problems = outcome()
    if not converged(sim, MEMBERS):
        views = {m: sim.layer(m, "membership").view.members for m in MEMBERS}
        problems.append(f"views did not converge: {views}")
    assert done and not problems, (f"{BOUND_S:.1f} s after the forger stopped (t={deadline_s:.1f}s): "
                                   + "; ".join(problems) + f"\n{diagnosis(sim)}")


def send(sim: Simulator, src: str, layer: str, msg_id: str, dst: str | None = None) -> bool:
    """One application send of `layer`; False when the window is full (nothing was taken)."""
    args: dict[str, Any] = {"payload": make_payload(msg_id, 8)}
    if dst is not None:
        args["to"] = dst
    try:
        sim.request(src, layer, "send", args)
    except WindowFull:
        return False
    return True


def send_in_order(sim: Simulator, src: str, layer: str, ids: list[str], dst: str | None = None) -> None:
    """An application thread sending `ids` one after the other, waiting RETRY_S while the window is full."""
    pending = list(ids)

    def step() -> None:
        while pending:
            if not send(sim, src, layer, pending[0], dst):
                sim.at(sim.now_s + RETRY_S, step)
                return
            pending.pop(0)
    step()


def is_real(payload: bytes, sender: str) -> bool:
    """Whether `payload` is one `sender` sent (the forger's payloads name another id, or none)."""
    msg_id = payload_msg_id(payload) or ""
    return msg_id.split(".")[:1] == [sender] and msg_id.split(".")[1:2] in (["old"], ["newu"], ["newm"])


def _pair_problems(sim: Simulator, receiver: str, sender: str, since: int, state_forged: bool) -> list[str]:
    """What is wrong with what `receiver` delivered from `sender` since the forger stopped: new messages missing
    (beyond the forged ones of that sender it delivered, then or before, and the seqnos a forged BcastState of
    that sender made it skip: DESIGN.md, "What is not defended"), duplicated, or out of order."""
    everything = sim.delivered(receiver, sender)
    ids = [payload_msg_id(p) for p in everything[since:]]
    forged = sum(1 for p in everything if not is_real(p, sender))  # each may have taken a real one's place
    if state_forged:
        window = sim.layer(receiver, "multicast").windows.get(sender)
        forged += window.counters["skipped"] if window is not None else 0
    problems = []
    missing_total = 0
    for kind, expected in zip(("unicast", "multicast"), new_ids(sender, receiver)):
        wanted = set(expected)
        seen = [i for i in ids if i in wanted]
        if len(seen) != len(set(seen)):
            problems.append(f"{receiver} delivered new {kind}s of {sender} twice: {seen}")
        if seen != sorted(set(seen), key=expected.index):
            problems.append(f"{receiver} delivered new {kind}s of {sender} out of order: {seen}")
        missing_total += len(wanted - set(seen))
    if missing_total > forged:
        problems.append(f"{receiver} misses {missing_total} new messages of {sender} "
                        f"(delivered {forged} forged ones of it)")
    return problems


def diagnosis(sim: Simulator) -> str:
    """Each member's counters and windows per peer, to read a failure by."""
    lines = []
    for name in MEMBERS:
        uni = sim.layer(name, "unicast")
        multi = sim.layer(name, "multicast")
        lines.append(f"{name}: dropped={dict(sim.driver(name).dropped)} unicast={dict(uni.counters)} "
                     f"multicast={dict(multi.counters)}")
        for peer in MEMBERS:
            if peer == name:
                continue
            recv = uni.recv_entries.get(peer)
            send = uni.send_entries.get(peer)
            win = multi.windows.get(peer)
            lines.append(f"  {peer}: recv={recv and recv.to_state()} send={send and send.to_state()} "
                         f"mwin={win and (win.window.low, win.window.high, win.delivered_high)}")
    return "\n".join(lines)


ForgedThenSilent.TestCase.settings = settings(max_examples=100, stateful_step_count=30, **HOSTILE_SETTINGS)
test_members_deliver_again_after_any_forged_datagrams = ForgedThenSilent.TestCase


Forgery = tuple[str, str, int, Message]  # victim, claimed sender, incarnation, message


def inject_forgery(sim: Simulator, forgery: Forgery, forged_states: set[tuple[str, str]]) -> None:
    """Deliver one forged datagram now; a forged BcastState is noted (victim, claimed sender) for the allowance."""
    victim, claimed, incarnation, msg = forgery
    if isinstance(msg, BcastState):
        forged_states.add((victim, claimed))
    sim.inject_bytes(victim, encode_datagram(sim.cluster_id, claimed, [msg], incarnation))
    sim.run_for(0.0)


def forge_then_check(forgeries: Callable[[Simulator], Iterable[Forgery]],
                     traffic: Callable[[Simulator], None] = lambda sim: None, settle_s: float = 3.0) -> Simulator:
    """A regression: after `settle_s` and the real `traffic`, inject each forgery `forgeries(sim)` names (it may
    read the members' state), then the property must hold."""
    sim = Simulator(seed=0, record_events=False)
    for name in MEMBERS:
        sim.add_member(name, member_stack(name))
    sim.run_for(settle_s)
    traffic(sim)
    forged_states: set[tuple[str, str]] = set()
    for forgery in forgeries(sim):
        inject_forgery(sim, forgery, forged_states)
    check_recovery(sim, forged_states)
    return sim


def missed_within_bound(sim: Simulator, receiver: str, sender: str, wanted: list[str]) -> list[str]:
    """The messages `wanted` (ids) of `sender` that `receiver` has not delivered BOUND_S from now (the property
    allows as many missing as forged deliveries; these regressions allow none)."""
    def missed() -> list[str]:
        delivered = {payload_msg_id(p) for p in sim.delivered(receiver, sender)}
        return [i for i in wanted if i not in delivered]
    sim.run_until_true(lambda: not missed(), BOUND_S)
    return missed()


def next_batch_missed(sim: Simulator, receiver: str, sender: str, kind: str) -> list[str]:
    """After the property held: `sender` sends a next batch of `kind` (to `receiver`); those `receiver` has not
    delivered BOUND_S later (none may be missed: whatever forged deliveries took is behind)."""
    wanted = [f"{sender}.next.{n}" for n in range(1, NEW_MULTICASTS + 1)]
    send_in_order(sim, sender, kind, wanted, receiver if kind == "unicast" else None)
    return missed_within_bound(sim, receiver, sender, wanted)


def real_unicasts(count: int) -> Any:
    """Traffic before the forgery: n1 sends `count` unicasts to n2 (so n2 holds a window for n1)."""
    def traffic(sim: Simulator) -> None:
        send_in_order(sim, "n1", "unicast", [f"n1.old.{n}" for n in range(1, count + 1)], "n2")
        sim.run_for(1.0)
    return traffic


def test_a_forged_first_message_with_a_newer_conn_id_does_not_silence_its_claimed_sender() -> None:
    """The issue's case: n2's window for n1 replaced by a forged `first` whose conn_id compares newer; n1's real
    stream then compares older and must resync instead of being dropped as `wrong_conn` forever."""
    def forgery(sim: Simulator) -> list:
        real = sim.layer("n2", "unicast").recv_entries["n1"].conn_id
        return [("n2", "n1", 0, UnicastData(1, first_conn_id((real >> GEN_BITS) + 5), True, b"\0forged"))]
    forge_then_check(forgery, real_unicasts(3))


def multicasts(member: str, count: int) -> Callable[[Simulator], None]:
    """Traffic before the forgery: `member` multicasts `count` messages."""
    def traffic(sim: Simulator) -> None:
        send_in_order(sim, member, "multicast", [f"{member}.old.{n}" for n in range(1, count + 1)])
    return traffic


def test_a_forged_older_life_heard_first_costs_its_member_nothing_sent_after_it() -> None:
    """n1 hears a forged heartbeat of "n2" with an older incarnation before n2's own traffic: that life is n2's
    until it has been silent a second, n2's real datagrams are dropped meanwhile, n1 suspects n2 and then takes
    its real life for a restart. n1's multicasts sent while n2 was excluded are kept for it (as for a departed
    member) and reach it when the merge brings it back."""
    forge_then_check(lambda sim: [("n1", "n2", sim.incarnation["n2"] - 1, Heartbeat(0))], multicasts("n1", 3),
                     settle_s=0.0)


def test_a_forged_first_message_above_the_real_start_does_not_cost_the_real_first_ones() -> None:
    """A forged first message of n1's coming connection id at seqno 2 opens n2's window above the real start:
    n1's real first message (seqno 1) then names an earlier start, and the window starts again from it."""
    forge_then_check(lambda sim: [("n2", "n1", 0, UnicastData(2, first_conn_id(1), True, b"\0forged"))],
                     settle_s=0.0)


def test_a_forged_first_message_of_the_next_generation_is_undone_by_the_senders_sync() -> None:
    """The same with the next generation of n1's coming stream: the real first message compares older, n2 asks
    n1 (SYNC), and the SYNC-OK's low below the forged start restarts the window where n1 says."""
    forge_then_check(lambda sim: [("n2", "n1", 0, UnicastData(2, next_generation(first_conn_id(1)), True,
                                                               b"\0forged"))], settle_s=0.0)


def test_a_forged_sync_ok_naming_the_coming_conn_id_does_not_cost_the_real_first_message() -> None:
    """make test's case (2026-12-04): a forged message of "n1" with no window at n2 makes n2 ask n1 (SYNC), and a
    forged SYNC-OK answers it first, naming n1's coming connection id with low 1: n2's window then holds seqno 1 for
    delivered. n1's real first message (seqno 1, first=true under that id) contradicts the SYNC-OK (a sender
    never sends `first` under an id it announced in one): the window starts again from it, not drops it."""
    forge_then_check(lambda sim: [("n2", "n1", 0, UnicastData(0, 0, False, b"P|n1|0|0\0")),
                                  ("n2", "n1", 0, UnicastSyncOk(1, first_conn_id(1)))], settle_s=0.0)


def test_a_forged_first_message_under_the_id_of_a_real_sync_costs_no_real_message() -> None:
    """The other side of the same rule: n2's window for n1 took n1's id from n1's own SYNC-OK (an admin sync after
    three unicasts), and a forged `first` under that id at a delivered seqno starts the window again from it (the
    forged one may be delivered); n1's real stream above it waits behind a gap n1 cannot fill, and the stuck gap's
    SYNC brings n1's word back: every new message is delivered, once."""
    def traffic(sim: Simulator) -> None:
        real_unicasts(3)(sim)
        sim.request("n2", "unicast", "sync", {"peer": "n1"})
        sim.run_for(1.0)

    def forgery(sim: Simulator) -> list[Forgery]:
        window = sim.layer("n2", "unicast").recv_entries["n1"]
        assert window.opened_by is None, "the admin sync did not set the window"
        return [("n2", "n1", 0, UnicastData(2, window.conn_id, True, b"\0forged"))]
    sim = forge_then_check(forgery, traffic)
    window = sim.layer("n2", "unicast").recv_entries["n1"]
    assert (window.counters["stuck_syncs"], window.counters["skipped"]) == (1, 1), diagnosis(sim)  # seqno 3


def test_a_forged_highest_above_what_was_sent_does_not_block_retransmission() -> None:
    """A forged HIGHEST of n1 at seqno 7 makes n3 ask n1 for seqnos n1 never sent, with real ones in the same
    request: n1 serves the real ones instead of discarding the request."""
    def forgeries(sim: Simulator) -> list[Forgery]:
        return [("n3", "n1", 0, Nakack4Highest(7)), ("n1", "n3", sim.incarnation["n3"] - 1, Heartbeat(0))]
    forge_then_check(forgeries, settle_s=0.0)


def test_a_forged_state_skip_contradicted_within_one_datagram_holds_delivery_until_the_senders_state() -> None:
    """A forged BcastState makes n2 skip n1's seqno 1; n1's real 1..6 then arrive in one datagram: 1 contradicts
    the skip, and 2..6 are held until n1's state moves the window back, so 1..6 are delivered in order."""
    forge_then_check(lambda sim: [("n2", "n1", 0, BcastState(2, 2, 1))], settle_s=0.0)


def test_a_forged_ack_releasing_a_lost_message_does_not_leave_its_receiver_waiting_for_good() -> None:
    """n1's unicast #3 to n2 is lost on the wire, and a forged ACK of "n2" with the current conn_id acks up to #5
    before n2's XMIT_REQ: n1 releases #3, and answers n2's requests for it with nothing. n2's window, whose
    resends keep missing, asks n1 for its stream (SYNC), and the SYNC-OK's low skips what n1 no longer has."""
    def traffic(sim: Simulator) -> None:
        sim.drop_next("n1", "n2", UnicastData, where=lambda m: m.seqno == 3)
        send_in_order(sim, "n1", "unicast", [f"n1.old.{n}" for n in range(1, 6)], "n2")

    def forgeries(sim: Simulator) -> list[Forgery]:
        conn_id = sim.layer("n1", "unicast").send_entries["n2"].conn_id
        return [("n1", "n2", 0, UnicastAck(5, conn_id, 1))]
    forge_then_check(forgeries, traffic)


def test_a_forged_skip_far_ahead_with_a_forged_message_above_it_does_not_silence_the_sender() -> None:
    """The fuzz cluster test's case: a forged BcastState skips n2's window for n1 far past anything n1 sent, and a
    forged message just above is delivered, so the skip can no longer be contradicted. n1's real multicasts are a
    capacity or more below the window (n1 can never catch up: n2's acks are above what it sent): n2 asks n1 for
    its state, whose next seqno is below the window, and the window starts again where n1 says."""
    far = 5 * MCFG.capacity

    def forgeries(sim: Simulator) -> list[Forgery]:
        return [("n2", "n1", 0, BcastState(far, far, 1)), ("n2", "n1", 0, Nakack4Msg(far, b"\0forged"))]
    forge_then_check(forgeries, multicasts("n1", 3))


def test_contiguous_forged_messages_at_the_window_edge_do_not_keep_the_window_ahead() -> None:
    """The 1 M-datagram fuzz bench's case: forged multicasts of "n1" at n2, contiguous from the edge of n2's window
    and less than a capacity of them (no skip, nothing to contradict): n2 delivers them, and its window is past
    anything n1 sent, so n1's next multicasts are duplicates there (allowed: as many as were forged). n2's ack
    above what n1 sent makes n1 count all it sent as acked and send its state marked AHEAD; n2's window starts
    again where n1 is, and what n1 sends next is delivered (before, not until n1 had sent that many more)."""
    forged = MCFG.capacity // 2

    def forgeries(sim: Simulator) -> list[Forgery]:
        low = sim.layer("n2", "multicast").windows["n1"].window.low
        return [("n2", "n1", 0, Nakack4Msg(low + k, b"\0forged")) for k in range(1, forged + 1)]
    sim = forge_then_check(forgeries, multicasts("n1", 3))
    missed = next_batch_missed(sim, "n2", "n1", "multicast")
    assert not missed, f"n2 missed multicasts n1 sent after the restart: {missed}\n{diagnosis(sim)}"
    assert sim.layer("n2", "multicast").counters["windows_restarted"] == 1, diagnosis(sim)


def test_contiguous_forged_unicasts_at_the_window_edge_do_not_keep_the_window_ahead() -> None:
    """The fuzz cluster test's case (a bundle of them: 49,899 ahead): forged unicasts of "n1" at n2 with n1's
    conn_id, contiguous from the edge of n2's window: n2 delivers them, and its window is past anything n1 sent,
    so n1's next messages are duplicates there (allowed: as many as were forged). n2's ack above what n1 sent
    makes n1 count all it sent as acked and CLOSE; its next message SYNCs, n2's window starts again at n1's low,
    and what n1 sends next is delivered."""
    forged = 40

    def forgeries(sim: Simulator) -> list[Forgery]:
        conn_id = sim.layer("n1", "unicast").send_entries["n2"].conn_id
        high = sim.layer("n2", "unicast").recv_entries["n1"].window.highest_delivered
        return [("n2", "n1", 0, UnicastData(high + k, conn_id, False, b"\0forged")) for k in range(1, forged + 1)]
    sim = forge_then_check(forgeries, real_unicasts(3))
    missed = next_batch_missed(sim, "n2", "n1", "unicast")
    assert not missed, f"n2 missed unicasts n1 sent after the restart: {missed}\n{diagnosis(sim)}"
    assert sim.layer("n1", "unicast").counters["closes_on_ack_above_sent"] >= 1, diagnosis(sim)


def test_a_forged_first_message_of_a_later_generation_gives_way_to_the_sync_ok_asked_for() -> None:
    """Before n1 sends anything, a forged `first` of n1's own stream but a later generation (seqno 0) opens n2's
    window; n1's real messages (an older id) are dropped and n2 SYNCs. n1's SYNC-OK names an older id than the
    window's, and n2 asked for it: it is n1's word, not a stale answer (before, it was ignored as an earlier
    sync's answer, for good)."""
    def forgeries(sim: Simulator) -> list[Forgery]:
        stream = sim.layer("n1", "unicast")._stream
        return [("n2", "n1", 0, UnicastData(0, first_conn_id(stream) + 5, True, b"\0forged"))]
    sim = forge_then_check(forgeries, settle_s=0.0)
    missed = missed_within_bound(sim, "n2", "n1", new_ids("n1", "n2")[0])
    assert not missed, f"n2 missed new unicasts of n1: {missed}\n{diagnosis(sim)}"


def test_a_forged_message_above_the_senders_next_ones_restarts_no_window_below_them() -> None:
    """Found by the state machine: at the start, a forged multicast of "n1" with seqno 7 waits in n2's window; n1's
    new multicasts 1..6 fill the gap and the forged one is delivered after them: n2 acks 7, above what n1 sent.
    The window restarts where n1 is (all it sent counts as acked), not at n1's last ack of n2 (n2 would have
    asked for 5 and 6 again and delivered them twice)."""
    def forgeries(sim: Simulator) -> list[Forgery]:
        older = sim.incarnation["n3"] - 1
        return [("n2", "n1", 0, Nakack4Msg(7, make_payload("n1.forged.7", 8))), ("n1", "n3", older, Heartbeat(0))]
    forge_then_check(forgeries, settle_s=0.0)


def test_a_forged_message_without_the_sync_capability_does_not_make_its_sender_legacy() -> None:
    """A forged BcastStateReq of "n3" without the capability bit, then forged older lives of n3 at n1 and n2: n2
    took n3 for a legacy node (n3's own acks, with the bit, were dropped as another life's for a second), and kept
    treating its real life so after taking it for a restart: no retention while n3 was excluded, n2's multicasts
    of that time released, skipped by n3's state. A new life's sync mode is learned again from its own messages."""
    def forgeries(sim: Simulator) -> list[Forgery]:
        older = sim.incarnation["n3"] - 1
        return [("n2", "n3", 0, BcastStateReq(0)), ("n1", "n3", older, Heartbeat(0)), ("n2", "n3", older, Heartbeat(0))]
    forge_then_check(forgeries, settle_s=0.0)
