"""A seeded in-memory simulator with virtual time: one `node.driver.Driver` per member plus a virtual clock, a
network and message faults, so it runs the very protocol objects, and the very driver, the UDP runtime runs.

Each member is a `Driver` of a `node.stack.Stack` of sans-IO layers, so the multicast and membership layers of
later issues run here unchanged: build the member's stack with all its layers. Decoding, the incarnation gate,
counted drops (`driver(member).dropped`, by the runtime's reasons), timers, deliveries, the records of `Emit`,
`InstallView` (`view`), `app_deliver`, `datagram_dropped` and `peer_restarted` are the driver's, as on a real node;
tests without a membership layer inject views with `install_view`. After every call into a member's driver the
simulator takes its outbox: per destination, message faults apply one message at a time, and the rest is
bundled into datagrams by the driver (as the runtime bundles one loop turn) and decoded on arrival, so the codec
is exercised.

One `random.Random(seed)` (`Simulator.rng`) drives every random choice: link loss, delay, jitter,
duplication and reordering, and whatever a test draws for its workload and schedule. `repro()` says how to
reproduce a run; put it in assertion messages.

Records: deliveries per receiver and sender (`delivered`), and a history-like list of event dicts (`events`,
each with `ts` in virtual seconds and `node`). `counters` are the network's: datagrams lost, cut (when sent or
on arrival), held by a jam, released or dropped by one, duplicated, faulted, sent to an unknown member; each
member's driver counts its own.

`restart_member` replaces a member's driver and stack by fresh ones, as a process restart does: its timers go,
its datagrams carry a new incarnation, and receivers tell their layers (`node.incarnation`) as the runtime does.

`auth_key` runs the authenticated wire (`splitlab up --auth`): every member's driver signs what it sends and drops
what lacks the key's tag as `unauthenticated`; `inject` and `inject_bytes` sign when asked (`sign=True`), as
`splitlab chaos inject --sign` does.
"""
from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from typing import Any, Callable, Hashable, Iterable

from node.core import Effect, Protocol, payload_msg_id
from node.driver import Driver
from node.auth import WireKey
from node.errors import UsageError
from node.sim.faults import DELAY, DROP, HOLD, FaultTable, MsgFault
from node.sim.jam import outcome as jam_outcome
from node.sim.network import LinkSpec, Network
from node.stack import Stack
from node.wire import Message, encode_datagram, sign as sign_datagram

SIM_CLUSTER_ID = 0x5EED5EED
SIM_EPOCH_MS = 1_700_000_000_000  # the simulated unix clock at t=0 for seed 0 (each seed starts elsewhere)
_DGRAM, _TIMER, _CALL = 0, 1, 2


class Simulator:
    """Members, links, faults and a virtual clock. See the module docstring."""

    def __init__(self, seed: int, default_link: LinkSpec | None = None, bundle_max_bytes: int = 8192,
                 cluster_id: int = SIM_CLUSTER_ID, record_events: bool = True,
                 auth_key: WireKey | None = None) -> None:
        self.seed = seed
        self.auth_key = auth_key
        self.rng = random.Random(seed)
        self.now_s = 0.0
        self.network = Network(self.rng, default_link)
        self.faults = FaultTable()
        self.cluster_id = cluster_id
        self.bundle_max_bytes = bundle_max_bytes
        self._record_events = record_events
        self.drivers: dict[str, Driver] = {}
        self.stacks: dict[str, Stack] = {}
        self.events: list[dict[str, Any]] = []
        self.deliveries: dict[str, dict[str, list[bytes]]] = {}
        self.counters: Counter = Counter()
        self._heap: list[tuple] = []
        self._order = itertools.count()
        self._timers: dict[tuple[str, Hashable], int] = {}
        self._view_counter = 0
        # member -> its current life: its boot on the simulated unix clock, as a real node's incarnation
        self.incarnation: dict[str, int] = {}
        self.epoch_ms = SIM_EPOCH_MS + (seed % 1_000_003) * 86_400  # each seed starts elsewhere (no rng draw)

    @property
    def record_events(self) -> bool:
        """Whether events are recorded (`events`); may be switched during a run."""
        return self._record_events

    @record_events.setter
    def record_events(self, on: bool) -> None:
        self._record_events = on
        for name, driver in self.drivers.items():
            driver.record = self._recorder(name) if on else None

    def repro(self) -> str:
        """The line a failing test prints."""
        return f"reproduce with seed={self.seed}"

    # --- members --------------------------------------------------------------------------------------------
    def add_member(self, name: str, stack: Stack | dict[str, Protocol]) -> None:
        """Add a member running `stack` (or a dict of named layers) and start it."""
        if name in self.stacks:
            raise UsageError(f"member {name!r} already exists")
        self.deliveries.setdefault(name, {})
        self._start(name, stack, self.wall_ms())

    def wall_ms(self) -> int:
        """The simulated unix clock now, in ms (what a member's boot and incarnation are read from)."""
        return self.epoch_ms + int(self.now_s * 1000)

    def next_boot_ms(self, name: str, clock_step_ms: int = 0) -> int:
        """The incarnation `name` gets if restarted now: the clock now, moved by `clock_step_ms` (negative: a clock
        stepped back). Without a step, at least one ms after the current life (no real restart takes 0 ms)."""
        boot = self.wall_ms() + clock_step_ms
        return max(boot, self.incarnation.get(name, 0) + 1) if not clock_step_ms else boot

    def restart_member(self, name: str, stack: Stack | dict[str, Protocol], boot_ms: int | None = None) -> None:
        """Restart `name` with the fresh `stack`: its pending timers are dropped, what it knew of its peers'
        lives goes, and its datagrams carry the new life's incarnation, `boot_ms` (default `next_boot_ms(name)`;
        build the stack's settings from the same value, e.g. `conn_id_start_from_boot`). Datagrams already in
        flight stay in flight."""
        self.driver(name)
        for key in [k for k in self._timers if k[0] == name]:
            del self._timers[key]
        self._start(name, stack, self.next_boot_ms(name) if boot_ms is None else boot_ms)

    def _start(self, name: str, stack: Stack | dict[str, Protocol], boot_ms: int) -> None:
        """A new life of `name`: a fresh driver (which knows no peer's life yet) of `stack`, started now."""
        stack = stack if isinstance(stack, Stack) else Stack(stack)
        timers, push, order = self._timers, self._push, self._order

        def set_timer(key: Hashable, at_s: float) -> None:
            token = next(order)
            timers[(name, key)] = token
            push(max(at_s, self.now_s), _TIMER, (name, key, token))

        def cancel_timer(key: Hashable) -> None:
            timers.pop((name, key), None)

        delivered = self.deliveries[name]  # kept across lives

        def deliver(src: str, payload: bytes, kind: str) -> None:
            payloads = delivered.get(src)
            if payloads is None:
                delivered[src] = [payload]
            else:
                payloads.append(payload)

        driver = Driver(name, stack, self.cluster_id, boot_ms, self.bundle_max_bytes, self.drivers.keys(),
                        set_timer=set_timer, cancel_timer=cancel_timer,
                        record=self._recorder(name) if self._record_events else None, deliver=deliver,
                        auth_key=self.auth_key)
        self.drivers[name] = driver
        self.stacks[name] = stack
        self.incarnation[name] = boot_ms
        driver.start(self.now_s)
        self._flush(name, driver)

    def _recorder(self, name: str) -> Callable[[str, dict[str, Any]], None]:
        """Records events of member `name` (the driver's `record`)."""
        def record(type_: str, fields: dict[str, Any]) -> None:
            self.events.append({"ts": self.now_s, "node": name, "type": type_, **fields})
        return record

    def driver(self, member: str) -> Driver:
        """The driver of `member` (its `counters`, `dropped`, `view`, ...)."""
        driver = self.drivers.get(member)
        if driver is None:
            raise UsageError(f"no member {member!r}; members: {', '.join(self.drivers)}")
        return driver

    def layer(self, member: str, name: str) -> Protocol:
        """The protocol object of layer `name` on `member` (to read its state)."""
        return self.driver(member).stack.layers[name]

    def request(self, member: str, layer: str, op: str, args: dict[str, Any] | None = None) -> list[Effect]:
        """Run an application request now; returns the effects (already carried out). Raises UsageError."""
        driver = self.driver(member)
        effects = driver.request(self.now_s, layer, op, args)
        if driver.outbox:
            for dst, msgs in driver.take_outbox().items():
                self._transmit(member, dst, msgs)
        return effects

    def install_view(self, member: str, members: Iterable[str], view_id: tuple[str, int] | None = None) -> None:
        """Give `member` a view (what the membership layer will do); records a `view` event."""
        members = tuple(members)
        if view_id is None:
            self._view_counter += 1
            view_id = (members[0], self._view_counter)
        driver = self.driver(member)
        driver.install_view(self.now_s, view_id, members)
        self._flush(member, driver)

    # --- the network's verbs ------------------------------------------------------------------------------
    def set_link(self, src: str, dst: str, **spec: float) -> None:
        """Set the spec of the directed link src -> dst (fields of `LinkSpec`)."""
        self.network.set_link(src, dst, LinkSpec(**spec))

    def set_default_link(self, **spec: float) -> None:
        self.network.default = LinkSpec(**spec)

    def reset_links(self) -> None:
        self.network.reset_links()

    def partition(self, src: str, dst: str) -> None:
        """Cut src -> dst only (dst -> src keeps working); also drops datagrams in flight on arrival."""
        self.network.cut(src, dst)

    def partition_both(self, a: str, b: str) -> None:
        self.network.cut(a, b)
        self.network.cut(b, a)

    def jam(self, src: str, dst: str, release: str = "fifo", cap: int | None = None) -> None:
        """Jam src -> dst only: its datagrams (also those in flight, on arrival) are held, at most `cap` (the
        oldest dropped beyond it), and sent on at the heal in order (`fifo`) or shuffled (`shuffle`)."""
        self.network.jam(src, dst, release, cap)

    def heal(self, src: str | None = None, dst: str | None = None) -> dict[str, int] | None:
        """Remove the cut or jam src -> dst, or every one when no link is named (links and message faults stay).
        What a jam held is sent on now, through the link's delay and loss, in its release order. Returns what the
        healed jams did (`node.sim.jam.outcome`), None when none was healed."""
        if (src is None) != (dst is None):
            raise UsageError("heal: name both ends of the link, or neither to heal every cut")
        jams = [q for link, q in self.network.jams.items() if src is None or link == (src, dst)]
        self.counters["jam_dropped"] += sum(q.dropped for q in jams)
        for link_src, link_dst, data in self.network.heal(src, dst):
            self.counters["jam_released"] += 1
            self._send_data(link_src, link_dst, data, 0.0)
        return jam_outcome(jams) if jams else None

    def drop_next(self, src: str | None, dst: str | None, msg_type: type[Message] | str | None,
                  where: Callable[[Message], bool] | None = None, count: int = 1) -> int:
        """Drop the next `count` matching messages src -> dst. Returns the fault id."""
        return self.faults.add(DROP, src, dst, msg_type, where, count).fault_id

    def drop_matching(self, src: str | None, dst: str | None, msg_type: type[Message] | str | None,
                      where: Callable[[Message], bool] | None = None, count: int | None = None) -> int:
        """Drop matching messages (at most `count`, None: until removed). Returns the fault id."""
        return self.faults.add(DROP, src, dst, msg_type, where, count).fault_id

    def delay_matching(self, src: str | None, dst: str | None, msg_type: type[Message] | str | None,
                       delay_s: float, where: Callable[[Message], bool] | None = None,
                       count: int | None = None) -> int:
        """Delay matching messages by `delay_s` on top of the link delay. Returns the fault id."""
        return self.faults.add(DELAY, src, dst, msg_type, where, count, delay_s).fault_id

    def hold(self, src: str | None, dst: str | None, msg_type: type[Message] | str | None,
             where: Callable[[Message], bool] | None = None, count: int | None = None) -> int:
        """Keep matching messages back until `release(fault_id)`. Returns the fault id."""
        return self.faults.add(HOLD, src, dst, msg_type, where, count).fault_id

    def release(self, fault_id: int) -> list[Message]:
        """End a hold: send the held messages on now (through the link), in the order they were held."""
        fault = self.faults.remove(fault_id)
        for src, dst, msg in fault.held:
            self._send_datagrams(src, dst, [msg], 0.0)
        return [msg for _src, _dst, msg in fault.held]

    def remove_fault(self, fault_id: int) -> MsgFault:
        return self.faults.remove(fault_id)

    def clear_faults(self) -> None:
        """Remove every message fault (held messages are discarded)."""
        self.faults.faults.clear()

    def inject(self, src: str, dst: str, msgs: Message | list[Message], delay_s: float = 0.0,
               sign: bool = False) -> None:
        """Deliver a forged datagram from `src` to `dst` after `delay_s`, bypassing links, cuts and faults
        (`sign`: signed with the run's key)."""
        batch = [msgs] if isinstance(msgs, Message) else list(msgs)
        self.inject_bytes(dst, encode_datagram(self.cluster_id, src, batch), delay_s, sign)

    def inject_bytes(self, dst: str, data: bytes, delay_s: float = 0.0, sign: bool = False) -> None:
        """Deliver raw bytes to `dst` (e.g. a foreign or malformed datagram); `sign`: signed with the run's key
        first (`node.wire.sign`). Raises UsageError for `sign` without a key."""
        if sign:
            if self.auth_key is None:
                raise UsageError("nothing to sign with: this simulation runs the open wire (no auth_key)")
            data = sign_datagram(self.auth_key, data)
        self._push(self.now_s + delay_s, _DGRAM, (None, dst, data))

    def at(self, t_s: float, action: Callable[[], Any]) -> None:
        """Call `action()` at virtual time `t_s` (for scripted schedules)."""
        self._push(max(t_s, self.now_s), _CALL, action)

    # --- running ----------------------------------------------------------------------------------------------
    def run_until(self, t_s: float) -> None:
        """Process every event up to virtual time `t_s`; the clock ends at `t_s`."""
        heap = self._heap
        while heap and heap[0][0] <= t_s:
            self._step(heapq.heappop(heap))
        self.now_s = max(self.now_s, t_s)

    def run_for(self, dt_s: float) -> None:
        self.run_until(self.now_s + dt_s)

    def run_until_quiet(self, max_s: float = 60.0) -> bool:
        """Run until nothing is scheduled (no datagram in flight, no timer); False if `max_s` passed first."""
        deadline = self.now_s + max_s
        heap = self._heap
        while self._drop_stale_timers():
            if heap[0][0] > deadline:
                self.now_s = deadline
                return False
            self._step(heapq.heappop(heap))
        return True

    def run_until_true(self, predicate: Callable[[], bool], max_s: float) -> bool:
        """Run until `predicate()` holds (checked after every event); False if `max_s` passed first."""
        deadline = self.now_s + max_s
        heap = self._heap
        if predicate():
            return True
        while heap and heap[0][0] <= deadline:
            self._step(heapq.heappop(heap))
            if predicate():
                return True
        self.now_s = max(self.now_s, deadline)
        return predicate()

    def _drop_stale_timers(self) -> bool:
        """Pop replaced or cancelled timers off the head of the heap; True if anything is left."""
        heap = self._heap
        while heap and heap[0][2] == _TIMER:
            member, key, token = heap[0][3]
            if self._timers.get((member, key)) == token:
                break
            heapq.heappop(heap)
        return bool(heap)

    def pending(self) -> int:
        """Scheduled items (datagrams in flight, timers, calls), stale timers included."""
        return len(self._heap)

    # --- records ----------------------------------------------------------------------------------------------
    def delivered(self, receiver: str, sender: str) -> list[bytes]:
        """Payloads `receiver` delivered from `sender`, in delivery order."""
        return list(self.deliveries.get(receiver, {}).get(sender, []))

    def delivered_ids(self, receiver: str, sender: str) -> list[str | None]:
        return [payload_msg_id(p) for p in self.deliveries.get(receiver, {}).get(sender, [])]

    def emitted(self, type_: str | None = None, node: str | None = None, **match: Any) -> list[dict[str, Any]]:
        """Recorded events, filtered by type, node and exact field values."""
        out = []
        for ev in self.events:
            if type_ is not None and ev["type"] != type_:
                continue
            if node is not None and ev["node"] != node:
                continue
            if any(ev.get(k) != v for k, v in match.items()):
                continue
            out.append(ev)
        return out

    # --- internals ----------------------------------------------------------------------------------------------
    def _push(self, at_s: float, kind: int, data: Any) -> None:
        heapq.heappush(self._heap, (at_s, next(self._order), kind, data))

    def _step(self, item: tuple) -> None:
        at_s, _order, kind, data = item
        if kind == _TIMER:
            member, key, token = data
            if self._timers.get((member, key)) != token:
                return  # replaced or cancelled: not an event, the clock does not move
            del self._timers[(member, key)]
        self.now_s = at_s
        try:
            if kind == _DGRAM:
                self._arrive(*data)
            elif kind == _TIMER:
                driver = self.drivers[member]
                driver.timer(at_s, key)
                if driver.outbox:  # (the hot paths take the outbox inline: `_flush` without the call)
                    for dst, msgs in driver.take_outbox().items():
                        self._transmit(member, dst, msgs)
            else:
                data()
        except Exception as exc:  # re-raised at once: only the seed is added to what the test will print
            note = f"simulator at t={at_s:.3f}s: {self.repro()}"
            if note not in getattr(exc, "__notes__", ()):
                exc.add_note(note)
            raise

    def _arrive(self, src: str | None, dst: str, data: bytes) -> None:
        if src is not None and self.network.is_cut(src, dst):
            self.counters["cut_on_arrival"] += 1
            return
        if src is not None and self.network.held_by_jam(src, dst, data):
            self.counters["jam_held"] += 1
            return
        driver = self.drivers.get(dst)
        if driver is None:
            self.counters["to_unknown_member"] += 1
            return
        now_s = self.now_s
        driver.receive(now_s, self.epoch_ms + int(now_s * 1000), data, "sim")  # wall_ms(), inline
        if driver.outbox:
            for peer, msgs in driver.take_outbox().items():
                self._transmit(dst, peer, msgs)

    def _flush(self, member: str, driver: Driver) -> None:
        """Send what `member`'s driver queued during the call that just ended."""
        for dst, msgs in driver.take_outbox().items():
            self._transmit(member, dst, msgs)

    def _transmit(self, src: str, dst: str, msgs: list[Message]) -> None:
        """Apply message faults one message at a time, then send the rest bundled."""
        faults = self.faults
        plain: list[Message] = msgs
        if faults.faults:
            plain = []
            for msg in msgs:
                fault = faults.match(src, dst, msg)
                if fault is None:
                    plain.append(msg)
                elif fault.action == DROP:
                    self.counters["fault_dropped"] += 1
                elif fault.action == DELAY:
                    self.counters["fault_delayed"] += 1
                    self._send_datagrams(src, dst, [msg], fault.delay_s)
                else:
                    self.counters["fault_held"] += 1
                    fault.held.append((src, dst, msg))
        if plain:
            self._send_datagrams(src, dst, plain, 0.0)

    def _send_datagrams(self, src: str, dst: str, msgs: list[Message], extra_s: float) -> None:
        for data in self.drivers[src].datagrams(msgs):
            if self.network.is_cut(src, dst):
                self.counters["cut"] += 1
            elif self.network.held_by_jam(src, dst, data):
                self.counters["jam_held"] += 1
            else:
                self._send_data(src, dst, data, extra_s)

    def _send_data(self, src: str, dst: str, data: bytes, extra_s: float) -> None:
        """One datagram onto the link src -> dst: its loss, duplication and delay."""
        fates = self.network.fates(src, dst)
        if not fates:
            self.counters["lost"] += 1
        elif len(fates) > 1:
            self.counters["duplicated"] += 1
        for delay_s in fates:
            self._push(self.now_s + extra_s + delay_s, _DGRAM, (src, dst, data))
