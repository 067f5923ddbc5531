"""The sans-IO contract every protocol follows: events in, effects out, no sockets, clocks or threads.

A protocol object is fed `handle(now_s, event)` and returns a list of effects. The UDP runtime (`node.runtime`)
and the seeded simulator run the very same objects; only they touch sockets, clocks and timers.

Events: `Received` (a decoded message from a peer), `TimerFired`, `AppRequest` (a protocol-specific request from
the application or the control API), `ViewInstalled` and `PeerRestarted` (a peer's datagrams carry a newer
incarnation).
Effects: `Send`, `SetTimer`, `CancelTimer`, `Deliver` (to the application), `Emit` (a history event) and
`InstallView` (a membership layer installs a view: `node.stack.Stack` hands it to every layer as `ViewInstalled`,
and the runtime or simulator records the `view` history event).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Hashable

from mypy_extensions import mypyc_attr

from node.errors import UsageError

# Events, effects and wire messages (node.wire) are values: nothing changes one after it is made. Each is a
# `@dataclass(slots=True, unsafe_hash=True)`, written out on every class: mypyc compiles a class only when its
# decorator is `dataclass` itself (a helper that applies it would leave the class interpreted). They are not
# `frozen` dataclasses because a frozen dataclass's __init__ sets each field through object.__setattr__ (3x the
# cost of a slotted one), and the node makes several per message (measured: 0.35 against 0.10 us for Deliver).
# unsafe_hash keeps them hashable by value, as frozen ones were.
# The node makes several events and effects per message (`Send`, `Emit`, `Deliver`, ...): those classes write their
# `__init__` out (`init=False`). mypyc compiles a dataclass's methods but not the `__init__` that `dataclasses`
# generates when the module is imported: that one stays an interpreted function setting each field through its
# slot descriptor. Written out, mypyc compiles it (measured on the compiled build: 0.37 against 0.08 us per `Emit`;
# in the driver pair in memory, a fifth of the node's instructions went to generated `__init__`s).


# --- events -----------------------------------------------------------------------------------------------
@dataclass(slots=True, unsafe_hash=True, init=False)
class Received:
    """A message `msg` (a `node.wire` message object) arrived from member `src`."""

    src: str
    msg: Any

    def __init__(self, src: str, msg: Any) -> None:
        self.src = src
        self.msg = msg


@dataclass(slots=True, unsafe_hash=True, init=False)
class TimerFired:
    """The timer set earlier under `key` is due."""

    key: Hashable

    def __init__(self, key: Hashable) -> None:
        self.key = key


@dataclass(slots=True, unsafe_hash=True)
class AppRequest:
    """A request from the application or control API: `op` names it, `args` carries its arguments."""

    op: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, unsafe_hash=True)
class ViewInstalled:
    """A new group view: `view_id` and `members` in join order (the first is the coordinator)."""

    view_id: tuple[str, int]
    members: tuple[str, ...]


@dataclass(slots=True, unsafe_hash=True)
class PeerRestarted:
    """Member `peer` restarted: its datagrams carry a newer incarnation, so whatever a layer kept about its
    previous life (sequence numbers, windows) no longer holds. Delivered before the new life's first message."""

    peer: str


Event = Received | TimerFired | AppRequest | ViewInstalled | PeerRestarted


# --- effects ----------------------------------------------------------------------------------------------
@dataclass(slots=True, unsafe_hash=True, init=False)
class Send:
    """Send `msg` to member `dst` (unreliably: the runtime bundles and sends one datagram)."""

    dst: str
    msg: Any

    def __init__(self, dst: str, msg: Any) -> None:
        self.dst = dst
        self.msg = msg


@dataclass(slots=True, unsafe_hash=True, init=False)
class SetTimer:
    """Fire `TimerFired(key)` at absolute time `at_s` (same clock as `now_s`); replaces a timer with that key."""

    key: Hashable
    at_s: float

    def __init__(self, key: Hashable, at_s: float) -> None:
        self.key = key
        self.at_s = at_s


@dataclass(slots=True, unsafe_hash=True, init=False)
class CancelTimer:
    """Cancel the timer with `key`, if any."""

    key: Hashable

    def __init__(self, key: Hashable) -> None:
        self.key = key


@dataclass(slots=True, unsafe_hash=True, init=False)
class Deliver:
    """Deliver an application payload from `src` to the application (the history records `app_deliver`)."""

    src: str
    payload: bytes
    kind: str  # unicast | multicast

    def __init__(self, src: str, payload: bytes, kind: str = "unicast") -> None:
        self.src = src
        self.payload = payload
        self.kind = kind


@dataclass(slots=True, unsafe_hash=True, init=False)
class Emit:
    """Append a history event of `type` with `fields` (see pipeline/SCHEMA.md)."""

    type: str
    fields: dict[str, Any]

    def __init__(self, type: str, fields: dict[str, Any] | None = None) -> None:
        self.type = type
        self.fields = {} if fields is None else fields


@dataclass(slots=True, unsafe_hash=True)
class InstallView:
    """Install the group view `view_id` (`(coordinator, n)`) with `members` in join order (the first is the
    coordinator). The stack turns it into `ViewInstalled` for every layer right after this effect."""

    view_id: tuple[str, int]
    members: tuple[str, ...]


Effect = Send | SetTimer | CancelTimer | Deliver | Emit | InstallView


@mypyc_attr(allow_interpreted_subclasses=True)  # every other layer, the workloads and the tests subclass it
class Protocol:
    """Base class for sans-IO protocols: `handle` dispatches to `on_received`, `on_timer`, `on_request`, `on_view`.

    Subclasses override the handlers they need; each returns a list of effects.
    """

    def handle(self, now_s: float, event: Event) -> list[Effect]:
        # the exact classes first: `type() is` costs less than isinstance (a request or a timer per message sent)
        if type(event) is Received or isinstance(event, Received):
            return self.on_received(now_s, event.src, event.msg)
        if type(event) is AppRequest or isinstance(event, AppRequest):
            return self.on_request(now_s, event.op, event.args)
        if type(event) is TimerFired or isinstance(event, TimerFired):
            return self.on_timer(now_s, event.key)
        if isinstance(event, ViewInstalled):
            return self.on_view(now_s, event.view_id, event.members)
        if isinstance(event, PeerRestarted):
            return self.on_peer_restarted(now_s, event.peer)
        raise TypeError(f"unknown event {event!r}")

    def on_received(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        return []

    # A layer may also define `handle_batch(now_s, src, msgs) -> effects`: the messages of one datagram that it
    # claims, in order, at once (`BatchingProtocol`). `node.stack.Stack.received_batch` uses it; a layer without
    # it gets the messages one by one.

    def on_timer(self, now_s: float, key: Hashable) -> list[Effect]:
        return []

    def handle_send(self, now_s: float, to: str, payload: bytes) -> list[Effect]:
        """An application message for `to` ("*": every member) whose arguments the caller has checked (a node's
        workload checks them once when it starts): the effects of the `send` request without decoding them from
        a request's arguments, one message at a time (`node.stack.Stack.send`)."""
        return self.on_send(now_s, to, payload)

    def on_send(self, now_s: float, to: str, payload: bytes) -> list[Effect]:
        """See `handle_send`; a layer without a faster way is given the `send` request."""
        return self.on_request(now_s, "send", {"to": to, "payload": payload})

    def on_request(self, now_s: float, op: str, args: dict[str, Any]) -> list[Effect]:
        return []

    def on_view(self, now_s: float, view_id: tuple[str, int], members: tuple[str, ...]) -> list[Effect]:
        return []

    def on_peer_restarted(self, now_s: float, peer: str) -> list[Effect]:
        return []


@mypyc_attr(allow_interpreted_subclasses=True)  # a new layer, outside the compiled build, may subclass it
class BatchingProtocol(Protocol):
    """A protocol with bookkeeping after every event (`_after(now_s, effects)`: arming a timer when work appeared,
    telling windows that have room again) that takes the messages of one datagram in one call: `handle_batch`
    gives the effects `handle(Received)` on each would give, in order, with the bookkeeping once after the last
    (a `window_unblocked` then reports the window's `low` after the batch)."""

    def handle(self, now_s: float, event: Event) -> list[Effect]:
        return self._after(now_s, super().handle(now_s, event))

    def handle_send(self, now_s: float, to: str, payload: bytes) -> list[Effect]:
        return self._after(now_s, self.on_send(now_s, to, payload))

    def handle_batch(self, now_s: float, src: str, msgs: list[Any]) -> list[Effect]:
        effects: list[Effect] = []
        for msg in msgs:  # `self.on_received`, not a kept bound method: compiled, a direct native call
            effects += self.on_received(now_s, src, msg)
        return self._after(now_s, effects)

    def _after(self, now_s: float, effects: list[Effect]) -> list[Effect]:
        return effects


# --- application payloads -----------------------------------------------------------------------------------
# A payload starts with its run-unique message id, then a NUL, then padding up to the asked size, so protocols
# stay payload-agnostic and the receiver can name what it delivered.

class _LastMade:
    """The last payload `make_payload` made, with its id: a sender's `data_tx` names the payload its workload has
    just made (`payload_msg_id`) without decoding the id again (issue 34: the decode was 4 % of a sender's CPU per
    message). A cache only: a payload is immutable, so the same object carries the same id. One tuple, read and
    replaced whole: the JGroups node reads ids from its own threads."""

    __slots__ = ("made",)

    def __init__(self) -> None:
        self.made: tuple[bytes, str] | None = None


_LAST_MADE: Final = _LastMade()


def make_payload(msg_id: str, size: int) -> bytes:
    """Build a payload of at least `size` bytes that carries `msg_id`."""
    payload = (msg_id + "\0").encode().ljust(size, b"x")
    # not cached: an empty id (its payload can be b"\0", which CPython shares with every other one-byte b"\0"),
    # and an id with a NUL (the payload carries only its part before the NUL)
    if msg_id and "\0" not in msg_id:
        _LAST_MADE.made = (payload, msg_id)
    return payload


def payload_arg(args: dict[str, Any], max_bytes: int, what: str) -> bytes:
    """The `payload` of a send request as bytes. Raises `UsageError` naming `what` for a missing, non-bytes or
    oversized payload."""
    payload = args.get("payload")
    if isinstance(payload, (bytearray, memoryview)):
        payload = bytes(payload)
    if not isinstance(payload, bytes):
        raise UsageError(f"{what}: payload must be bytes, got {type(payload).__name__}")
    if len(payload) > max_bytes:
        raise UsageError(f"{what}: payload of {len(payload)} bytes exceeds {max_bytes}")
    return payload


def payload_msg_id(payload: bytes) -> str | None:
    """The message id a payload carries, or None for a payload not made by `make_payload`."""
    made = _LAST_MADE.made
    if made is not None and payload is made[0]:
        return made[1]
    end = payload.find(b"\0")
    if end <= 0:
        return None
    try:
        return payload[:end].decode()
    except UnicodeDecodeError:
        return None
