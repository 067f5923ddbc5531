"""Drives one node's protocol `Stack`: the one place where datagrams become events and effects become actions.

Both the asyncio UDP runtime (`node.runtime`) and the seeded simulator (`node.sim.simulator`) are a `Driver` plus
their IO; nothing here touches a socket, a clock or an event loop. A `Driver` owns:
- the receive path: with a run key (`auth_key`, the authenticated wire) the datagram's tag first
  (`node.wire.check_tag`, one HMAC per datagram), then decode (`node.wire.decode_datagram_from`), the
  incarnation gate (`node.incarnation.Lives`), `PeerRestarted` before a new life's first message, then the
  datagram's messages to the layers that claim them (`node.stack.Stack.received_batch`: a run of DATA to one
  layer in one call), their effects carried out after. Wire input never raises: what is refused is counted in
  `dropped` by reason (`unauthenticated` for a datagram without the key's tag, before any decode; the codec's
  `WireError` reasons; the gate's `DROP_REASONS`; `unhandled-type` for a message no layer claims) and recorded as
  `datagram_dropped`, at most `MAX_DROP_EVENTS_PER_REASON` times per reason (a flood cannot flood the history);
- the effects: `Send` goes to the outbox (destination -> message objects, encoded only when the host takes them,
  so the simulator can still fault single messages), `SetTimer` / `CancelTimer` go to the host, `Deliver` is
  counted and recorded as `app_deliver` (with the payload's message id), `Emit` is recorded as it is,
  `InstallView` is remembered (`view`) and recorded as `view`;
- bundling: `datagrams(msgs)` packs one destination's messages into datagrams of this node's incarnation within
  `bundle_max_bytes` and `node.wire.MAX_MESSAGES` (`node.wire.bundle`), each signed with `auth_key` when set;
- `counters` (datagrams and messages received and sent, delivered) and `dropped`.

The host gives the side effects as callbacks: `set_timer(key, at_s)`, `cancel_timer(key)` (a timer that fires
comes back as `timer(now_s, key)`), `record(type, fields)` (a history event; None records nothing, and the host
may change `Driver.record` at any time), `outbox_ready()` (called when the outbox gets its first message since
the last `take_outbox`; it must not take the outbox at once: the runtime schedules a flush on its loop, the
simulator flushes after every driver call and passes None), `deliver(src, payload, kind)` (optional) and
`on_emit` (optional: event type -> a callback given the fields of each `Emit` of that type, after it is
recorded; the runtime wakes workloads waiting for room on `window_unblocked`, without a wrapper around every
record).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Container, Hashable, Iterable, Mapping

from node.auth import WireKey
from node.core import CancelTimer, Deliver, Effect, Emit, InstallView, Send, SetTimer, payload_msg_id
from node.errors import WireError
from node.incarnation import DROP_REASONS, RESTARTED, SAME, Lives
from node.stack import Stack
from node.wire import Message, bundle, check_tag, decode_datagram_from, encode_message

MAX_DROP_EVENTS_PER_REASON = 100
UNHANDLED = "unhandled-type"  # a decoded message that no layer of this stack claims
UNAUTHENTICATED = "unauthenticated"  # with a run key: a datagram without its tag (node.wire.check_tag)

Record = Callable[[str, dict[str, Any]], None]


class Driver:
    """Drives `stack`, the layers of member `name` in the cluster `cluster_id`, in its life `incarnation` (boot,
    unix ms). `members` are the names whose datagrams pass the gate (a live container such as a dict's keys is
    fine). `auth_key`: the run's key of the authenticated wire (None: the open wire). See the module docstring
    for the callbacks."""

    def __init__(self, name: str, stack: Stack, cluster_id: int, incarnation: int, bundle_max_bytes: int,
                 members: Container[str] | None, *, set_timer: Callable[[Hashable, float], None],
                 cancel_timer: Callable[[Hashable], None], record: Record | None,
                 outbox_ready: Callable[[], None] | None = None,
                 deliver: Callable[[str, bytes, str], None] | None = None,
                 auth_key: WireKey | None = None,
                 on_emit: Mapping[str, Callable[[dict[str, Any]], None]] | None = None) -> None:
        self.name = name
        self.auth_key = auth_key
        self.stack = stack
        self.cluster_id = cluster_id
        self.incarnation = incarnation
        self.bundle_max_bytes = bundle_max_bytes
        self.lives = Lives(members)  # which member, and which life of it, a datagram comes from
        self.counters: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.view: tuple[tuple[str, int], tuple[str, ...]] | None = None  # the last installed view
        self.outbox: dict[str, list[Message]] = {}
        self.record = record
        self._set_timer = set_timer
        self._cancel_timer = cancel_timer
        self._outbox_ready = outbox_ready
        self._deliver = deliver
        self._on_emit = dict(on_emit or {})

    # --- events in ----------------------------------------------------------------------------------------------
    def start(self, now_s: float) -> None:
        """Let the layers start (first timers, the initial view)."""
        self.apply(self.stack.start(now_s))

    def receive(self, now_s: float, wall_ms: int, data: bytes, src_ip: str) -> None:
        """Take one datagram from `src_ip`, received at `now_s` when this node's unix clock reads `wall_ms`.
        Never raises for what the datagram says: a refused one is a counted drop."""
        counters = self.counters
        counters["datagrams_received"] += 1
        if self.auth_key is not None:
            why = check_tag(self.auth_key, data)
            if why is not None:
                self._drop(UNAUTHENTICATED, src_ip, why)
                return
        try:
            sender, incarnation, messages = decode_datagram_from(data, self.cluster_id)
        except WireError as exc:
            self._drop(exc.reason, src_ip, exc.message)
            return
        life, previous = self.lives.see(sender, incarnation, now_s, wall_ms)
        if life != SAME:
            if life != RESTARTED:
                self._drop(DROP_REASONS[life], src_ip,
                           f"{sender!r} incarnation {incarnation} (current life: {previous})")
                return
            if self.record is not None:
                self.record("peer_restarted", {"peer": sender, "incarnation": incarnation, "previous": previous})
            self.apply(self.stack.peer_restarted(now_s, sender))
        counters["messages_received"] += len(messages)
        effects, unclaimed = self.stack.received_batch(now_s, sender, messages)
        if unclaimed:
            self.dropped[UNHANDLED] += unclaimed
        self.apply(effects)

    def timer(self, now_s: float, key: tuple[str, Hashable]) -> None:
        """The timer the host was given under `key` is due."""
        self.apply(self.stack.timer(now_s, key))

    def request(self, now_s: float, layer: str, op: str, args: dict[str, Any] | None = None) -> list[Effect]:
        """Run an application request on `layer`; returns its effects, already carried out. Raises what the layer
        raises (`UsageError`, `WindowFull`), before any effect."""
        effects = self.stack.request(now_s, layer, op, args)
        self.apply(effects)
        return effects

    def send(self, now_s: float, layer: str, to: str, payload: bytes) -> None:
        """Send an application message whose arguments the caller checked (`node.stack.Stack.send`); its effects
        carried out. Raises what the layer raises (`WindowFull`), before any effect."""
        self.apply(self.stack.send(now_s, layer, to, payload))

    def sender(self, clock: Callable[[], float], layer: str, to: str) -> Callable[[bytes], None]:
        """`send` of one application message to `to` through `layer` at `clock()`, as one callable: a workload's
        loop calls it per message (the host's clock, e.g. `time.monotonic`; no interpreted frame in between)."""
        stack = self.stack

        # `self` and `stack`, not their bound methods: compiled, both calls are then direct native calls, not
        # generic calls through method objects (measured: the sender's CPU per message, bench_unicast)
        def send(payload: bytes) -> None:
            self.apply(stack.send(clock(), layer, to, payload))
        return send

    def install_view(self, now_s: float, view_id: tuple[str, int], members: tuple[str, ...]) -> None:
        """Give every layer a view from outside the stack (what a membership layer does with `InstallView`)."""
        self._view(view_id, members)
        self.apply(self.stack.view(now_s, view_id, members))

    def _drop(self, reason: str, src_ip: str, detail: str) -> None:
        dropped = self.dropped
        dropped[reason] += 1
        if dropped[reason] <= MAX_DROP_EVENTS_PER_REASON and self.record is not None:
            self.record("datagram_dropped", {"reason": reason, "src_ip": src_ip, "detail": detail})

    def _view(self, view_id: tuple[str, int], members: tuple[str, ...]) -> None:
        self.view = (view_id, members)
        if self.record is not None:
            self.record("view", {"view_id": list(view_id), "members": list(members)})

    # --- effects out --------------------------------------------------------------------------------------------
    def apply(self, effects: Iterable[Effect]) -> None:
        """Carry out effects returned by the stack."""
        record = self.record
        on_emit = self._on_emit
        for eff in effects:
            if type(eff) is Send:  # `type() is`: as fast as a kept `cls`, and mypy narrows it
                outbox = self.outbox
                queue = outbox.get(eff.dst)
                if queue is not None:
                    queue.append(eff.msg)
                else:
                    if not outbox and self._outbox_ready is not None:
                        self._outbox_ready()
                    outbox[eff.dst] = [eff.msg]
            elif type(eff) is Emit:
                if record is not None:
                    record(eff.type, eff.fields)
                if on_emit:
                    hook = on_emit.get(eff.type)
                    if hook is not None:
                        hook(eff.fields)
            elif type(eff) is SetTimer:
                self._set_timer(eff.key, eff.at_s)
            elif type(eff) is CancelTimer:
                self._cancel_timer(eff.key)
            elif type(eff) is Deliver:
                self.counters["delivered"] += 1
                if self._deliver is not None:
                    self._deliver(eff.src, eff.payload, eff.kind)
                if record is not None:
                    record("app_deliver", {"msg_id": payload_msg_id(eff.payload), "kind": eff.kind, "from": eff.src})
            elif type(eff) is InstallView:  # the stack already gave it to every layer
                self._view(eff.view_id, eff.members)
            else:
                raise TypeError(f"unknown effect {eff!r} from {self.name}")

    def take_outbox(self) -> dict[str, list[Message]]:
        """The messages sent since the last call, by destination, in order (the next `Send` starts a new outbox)."""
        outbox, self.outbox = self.outbox, {}
        return outbox

    def datagrams(self, msgs: list[Message] | list[bytes], encoded: dict[int, bytes] | None = None) -> list[bytes]:
        """One destination's messages (objects, or bytes from `encode_message`) as datagrams from this node's
        life, bundled within `bundle_max_bytes` (0: one message per datagram) and `node.wire.MAX_MESSAGES`, signed
        with `auth_key` when set.
        `encoded` (id of a message object -> its bytes) lets one flush of the outbox encode a message sent to
        several destinations once (a multicast is one object sent to every member): pass the same dict for
        every destination of one `take_outbox`, while the outbox it returned keeps the objects alive."""
        if encoded is None:
            encoded = {}
        encoded_msgs: list[bytes] = []
        for m in msgs:
            if isinstance(m, bytes):
                encoded_msgs.append(m)
                continue
            data = encoded.get(id(m))
            if data is None:
                data = encoded[id(m)] = encode_message(m)
            encoded_msgs.append(data)
        out = bundle(self.cluster_id, self.name, encoded_msgs, self.incarnation, self.bundle_max_bytes, self.auth_key)
        counters = self.counters
        counters["datagrams_sent"] += len(out)
        counters["messages_sent"] += len(encoded_msgs)
        return out

    # --- state --------------------------------------------------------------------------------------------------
    def state(self, now_s: float) -> dict[str, Any]:
        """The driver's part of the node's `/state`: view, every layer's state, counters, dropped."""
        layers = {}
        for name, layer in self.stack.layers.items():
            state = getattr(layer, "state", None)
            if state is not None:
                layers[name] = state(now_s)
        view = None if self.view is None else {"view_id": list(self.view[0]), "members": list(self.view[1])}
        return {"view": view, "layers": layers, "counters": dict(self.counters), "dropped": dict(self.dropped)}
