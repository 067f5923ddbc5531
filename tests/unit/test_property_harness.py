"""The harness of the hostile-input property tests (`test_property_*.py`), and the tests that show it can fail.

`Driver` feeds one sans-IO layer (`LayerTarget`) or a whole `node.stack.Stack` (`StackTarget`) events one at a
time -- decoded messages, timer firings as time advances, application requests, views, `PeerRestarted` -- and
after every event checks the properties every protocol core must keep whatever arrives:

(a) `handle` raises nothing (an application request may raise `UsageError` or `WindowFull` on purpose: those
    are allowed only for requests);
(b) bounded work and memory: each event runs within `EVENT_CPU_BUDGET_S` of CPU time (an endless loop becomes a
    `Hang` failure, not a hung suite), returns at most `effect_bound(driver)` effects, every effect is one the
    runtime can carry out (a `Send` encodes and decodes back to the same message within one datagram, an `Emit`
    serialises as the history does, timers are finite), the layer's `bounds(driver)` hold (buffered messages
    per peer within the window capacity, ...) and the member names it keeps state for are the known members
    plus at most `TRACKED_STRANGERS_MAX` others; `state(now_s)` works and is JSON for the control API;
(c) for the kinds listed in `ordered_kinds`: per sender and per connection epoch (the receive entry / window
    object the layer delivers from, `epoch_of`), deliveries are exactly once and in increasing seqno order,
    and attributed to the sender that sent them. Payloads of forged messages carry `payload_for(src, tag,
    seqno)` so a delivery names what it was.

Every violation raises its own `PropertyViolation` subclass, so hypothesis reports different bugs separately,
each with its minimal example; the event trace of the failing example is printed through `hypothesis.note`.
The process's address space is capped while a driver runs (`memory_cap`), so a memory bomb is a `MemoryError`
in the test, not the OOM killer on a shared machine.
"""
from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import resource
import signal
import struct
import time
from contextlib import contextmanager
from typing import Any, Callable, Hashable, Iterable, Iterator

import orjson
import pytest
from hypothesis import HealthCheck, Phase, find, given, note, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from node.core import (AppRequest, CancelTimer, Deliver, Emit, InstallView, PeerRestarted, Received, Send,
                       SetTimer, TimerFired, ViewInstalled, make_payload, payload_msg_id)
from node.errors import UsageError
from node.stack import Stack
from node.wire import MAX_DATAGRAM_BYTES, MAX_SENDER_BYTES, Message, decode_datagram, encode_datagram

# CPU time one event may take. Process CPU time (not wall time: the machine is shared) with the garbage collector
# paused, so only the layer's own work counts; with the tests' small windows an event takes well under a ms, so
# 0.1 s is a 100-fold margin, and each endless-loop example costs only 0.1 s while hypothesis shrinks it.
EVENT_CPU_BUDGET_S = 0.1
TRACKED_STRANGERS_MAX = 2        # names outside the known members a layer may keep state for
MEMORY_HEADROOM_BYTES = 1 << 30  # address space a test may add before allocations fail
U8_MAX, U16_MAX, U32_MAX, U64_MAX = 2**8 - 1, 2**16 - 1, 2**32 - 1, 2**64 - 1
CHECK_CLUSTER_ID = 0x0BADC0DE
LONGEST_SENDER = "s" * MAX_SENDER_BYTES
PAYLOAD_PREFIX = "P"             # payload ids of forged messages: P|src|tag|seqno

# Settings every hostile property test uses: randomised (not derandomised), a fixed budget of examples, no
# per-example deadline (the per-event CPU budget replaces it), and the reproduction blob printed on failure. No
# "explain" phase: it traces every line (sys.settrace), which would charge its own work to the CPU budget.
HOSTILE_SETTINGS = dict(deadline=None, derandomize=False, print_blob=True,
                        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# The share of each test's examples a run draws (`hostile_examples`): all of them, but in the compiled build's run of
# these tests within `make test` (tests/unit/test_compiled.py), which draws a quarter of them while the pure sources'
# run in the same suite draws them all; `make bench` runs the compiled build with all of them too
EXAMPLES_FRACTION_ENV = "SPLITLAB_EXAMPLES_FRACTION"


def hostile_examples(count: int) -> int:
    """`count` examples scaled by `EXAMPLES_FRACTION_ENV` (a number in (0, 1], default 1), at least one."""
    raw = os.environ.get(EXAMPLES_FRACTION_ENV, "1")
    try:
        fraction = float(raw)
    except ValueError:
        fraction = math.nan
    if not 0 < fraction <= 1:
        raise UsageError(f"{EXAMPLES_FRACTION_ENV}={raw!r} is not a share of the examples",
                         hint="a number above 0 and at most 1")
    return max(1, round(count * fraction))



def any_value(strategy: st.SearchStrategy[Any]) -> Any:
    """A value `strategy` builds: the first one drawn, not shrunk (`hypothesis.find` alone shrinks what it finds to
    the simplest: 4 s for the eight types of one unicast variant, against 0.07 s)."""
    return find(strategy, lambda _: True, settings=settings(phases=(Phase.generate,), database=None))

# --- what a violation looks like --------------------------------------------------------------------------------
class PropertyViolation(AssertionError):
    """A property of the hostile-input layer failed."""


class Hang(PropertyViolation):
    """One event took more than the CPU budget (an endless or unbounded loop)."""


class TooManyEffects(PropertyViolation):
    """One event returned more effects than the configuration allows."""


class BadEffect(PropertyViolation):
    """An effect the runtime cannot carry out (a message that does not encode, a bad timer, ...)."""


class UnboundedMemory(PropertyViolation):
    """A per-peer buffer or the set of tracked peers exceeds its bound."""


class BrokenState(PropertyViolation):
    """`state(now_s)` raised or is not JSON."""


class DuplicateDelivery(PropertyViolation):
    """The application got the same message twice within one connection epoch."""


class OutOfOrderDelivery(PropertyViolation):
    """The application got a lower seqno after a higher one within one connection epoch."""


class MisattributedDelivery(PropertyViolation):
    """A delivery names another sender than the one the message came from."""


class RequestRaised(PropertyViolation):
    """A non-request event raised an error that only requests may raise."""


# --- bounded CPU time and memory -------------------------------------------------------------------------------
@contextmanager
def cpu_budget(seconds: float, what: str) -> Iterator[None]:
    """Raise `Hang` inside the block once it used `seconds` of process CPU time (ITIMER_PROF: independent of the
    load other processes put on the machine). The garbage collector is paused inside the block, so a collection
    of the test process's heap is not charged to the code under test. Main thread only (signals)."""
    def expired(signum: int, frame: Any) -> None:
        raise Hang(f"{what} used more than {seconds} s of CPU time (an unbounded loop?)")

    collecting = gc.isenabled()
    gc.disable()
    previous = signal.signal(signal.SIGPROF, expired)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    except Hang as exc:
        # raised anew with where the loop was: the interrupted frames' traceback can break pytest's report
        raise Hang(f"{exc}; it was running {_innermost(exc.__traceback__)}") from None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
        if collecting:
            gc.enable()


def _innermost(tb: Any) -> str:
    """The two innermost frames of `tb` (file:line (function)), without this module's signal handler."""
    frames = []
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name != "expired":
            frames.append(f"{code.co_filename}:{tb.tb_frame.f_lineno} ({code.co_name})")
        tb = tb.tb_next
    return " <- ".join(reversed(frames[-2:])) or "?"


@contextmanager
def memory_cap(headroom_bytes: int = MEMORY_HEADROOM_BYTES) -> Iterator[None]:
    """Cap the address space at its current size plus `headroom_bytes` inside the block (restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        used_bytes = int(f.read().split()[0]) * resource.getpagesize()
    cap = used_bytes + headroom_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def trace(line: str) -> None:
    """Print `line` with the failing example (hypothesis `note`); outside a hypothesis test, do nothing."""
    try:
        note(line)
    except InvalidArgument:
        pass


# --- boundary-heavy values --------------------------------------------------------------------------------------
def near(edges: Iterable[int], top: int, spread: Iterable[int] = (-1, 0, 1)) -> list[int]:
    """`edges` and their neighbours, within 0..top, sorted."""
    spread = tuple(spread)
    return sorted({e + d for e in edges if isinstance(e, int) for d in spread if 0 <= e + d <= top})


def boundary_int(top: int, edges: Iterable[int] = ()) -> st.SearchStrategy[int]:
    """An unsigned field of maximum `top`: 0, 1, top, top-1, the middle, `edges` +/- 1, or anything."""
    fixed = [0, 1, 2, top - 1, top, (top + 1) // 2]
    return st.one_of(st.sampled_from(sorted(set(fixed) | set(near(edges, top)))), st.integers(0, top))


def u64(edges: Iterable[int] = ()) -> st.SearchStrategy[int]:
    return boundary_int(U64_MAX, edges)


def u32(edges: Iterable[int] = ()) -> st.SearchStrategy[int]:
    return boundary_int(U32_MAX, edges)


def payload_for(src: str, tag: int, seqno: int, size: int = 0) -> bytes:
    """The payload of a forged message: names its sender, its connection/life `tag` and its seqno."""
    return make_payload(f"{PAYLOAD_PREFIX}|{src}|{tag}|{seqno}", size)


def parse_payload(payload: bytes) -> tuple[str, int, int] | None:
    """(src, tag, seqno) of a `payload_for` payload, else None."""
    msg_id = payload_msg_id(payload)
    if msg_id is None:
        return None
    parts = msg_id.split("|")
    if len(parts) != 4 or parts[0] != PAYLOAD_PREFIX:
        return None
    try:
        return parts[1], int(parts[2]), int(parts[3])
    except ValueError:
        return None


def opaque_payloads(max_size: int = 24) -> st.SearchStrategy[bytes]:
    """Arbitrary payloads that never look like `payload_for` ones (they start with NUL: no message id)."""
    return st.binary(max_size=max_size).map(lambda b: b"\0" + b)


# --- arbitrary decoded messages, field by field -----------------------------------------------------------------
@dataclasses.dataclass
class Edges:
    """What a message's fields are drawn around: the receiver's current window edges and ids, and names.

    `payload(src, values)` gives the strategy of a payload once the other fields (`values`) are drawn.
    """

    src: str
    names: tuple[str, ...]
    seqnos: tuple[int, ...] = ()
    conn_ids: tuple[int, ...] = ()
    view_ns: tuple[int, ...] = ()
    ids: tuple[int, ...] = ()
    flags: tuple[int, ...] = ()
    member_lists: tuple[tuple[str, ...], ...] = ()
    payload: Callable[[str, dict[str, Any]], st.SearchStrategy[bytes]] | None = None
    max_list: int = 12


def _seqno_lists(cls: type[Message], edges: Edges) -> st.SearchStrategy[tuple[int, ...]]:
    most = getattr(cls, "MAX_SEQNOS", U16_MAX)
    runs = st.sampled_from(sorted(set(edges.seqnos)) or [0]).map(
        lambda s: tuple(range(s, min(s + most, U64_MAX + 1))))  # as many as the wire allows
    return st.one_of(st.lists(u64(edges.seqnos), max_size=edges.max_list).map(tuple), runs)


def _name_lists(edges: Edges) -> st.SearchStrategy[tuple[str, ...]]:
    drawn = st.lists(st.sampled_from(edges.names), max_size=8).map(tuple)
    return st.one_of(st.sampled_from(edges.member_lists), drawn) if edges.member_lists else drawn


def field_strategy(cls: type[Message], name: str, edges: Edges, values: dict[str, Any]) -> st.SearchStrategy:
    """The strategy of field `name` of message `cls`, boundary-heavy and within what the wire can carry.
    Raises KeyError for a field it has no rule for (a new message needs one)."""
    if name in ("seqno", "low", "next_seqno", "low_seqno"):
        return u64(edges.seqnos)
    if name == "n":
        return u64(edges.view_ns)
    if name in ("counter", "ping_id"):
        return u64(edges.ids)
    if name == "conn_id":
        return u32(edges.conn_ids)
    if name == "timestamp":
        return u32()
    if name == "flags":
        return boundary_int(U8_MAX, edges.flags)
    if name in ("first", "merge"):
        return st.booleans()
    if name == "payload":
        derived = edges.payload(edges.src, values) if edges.payload is not None else None
        return st.one_of(derived, opaque_payloads()) if derived is not None else opaque_payloads()
    if name == "seqnos":
        return _seqno_lists(cls, edges)
    if name in ("coord", "acting", "sender"):
        return st.sampled_from(edges.names)
    if name == "members":
        return _name_lists(edges)
    raise KeyError(f"no strategy for {cls.__name__}.{name}: add a rule to field_strategy")


def message_strategy(cls: type[Message], edges: Edges) -> st.SearchStrategy[Message]:
    """Arbitrary decoded messages of type `cls` (every field drawn around `edges`)."""
    @st.composite
    def build(draw: Callable[[st.SearchStrategy], Any]) -> Message:
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            values[f.name] = draw(field_strategy(cls, f.name, edges, values))
        return cls(**values)

    return build()


def draw_message(data: st.DataObject, cls: type[Message], edges: Edges) -> Message:
    return data.draw(message_strategy(cls, edges))


# --- targets: one layer, or a whole stack ---------------------------------------------------------------------
class LayerTarget:
    """One layer fed directly; its own `InstallView` comes back to it as `ViewInstalled`, as the stack does."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.layers = {"layer": layer}

    def start(self, now_s: float) -> list:
        starter = getattr(self.layer, "start", None)
        return self._views(now_s, starter(now_s)) if starter is not None else []

    def received(self, now_s: float, src: str, msg: Message) -> list:
        return self._views(now_s, self.layer.handle(now_s, Received(src, msg)))

    def timer(self, now_s: float, key: Hashable) -> list:
        return self._views(now_s, self.layer.handle(now_s, TimerFired(key)))

    def request(self, now_s: float, layer: str | None, op: str, args: dict[str, Any]) -> list:
        return self._views(now_s, self.layer.handle(now_s, AppRequest(op, args)))

    def view(self, now_s: float, view_id: tuple[str, int], members: tuple[str, ...]) -> list:
        return self._views(now_s, self.layer.handle(now_s, ViewInstalled(view_id, members)))

    def peer_restarted(self, now_s: float, peer: str) -> list:
        return self._views(now_s, self.layer.handle(now_s, PeerRestarted(peer)))

    def _views(self, now_s: float, effects: list) -> list:
        out = []
        for eff in effects:
            out.append(eff)
            if isinstance(eff, InstallView):
                out += self.layer.handle(now_s, ViewInstalled(eff.view_id, eff.members))
        return out


class StackTarget:
    """A whole `Stack`: the runtime's entry points."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.layers = stack.layers

    def start(self, now_s: float) -> list:
        return self.stack.start(now_s)

    def received(self, now_s: float, src: str, msg: Message) -> list:
        return self.stack.received(now_s, src, msg)

    def timer(self, now_s: float, key: Hashable) -> list:
        return self.stack.timer(now_s, key)

    def request(self, now_s: float, layer: str | None, op: str, args: dict[str, Any]) -> list:
        return self.stack.request(now_s, layer, op, args)

    def view(self, now_s: float, view_id: tuple[str, int], members: tuple[str, ...]) -> list:
        return self.stack.view(now_s, view_id, members)

    def peer_restarted(self, now_s: float, peer: str) -> list:
        return self.stack.peer_restarted(now_s, peer)


# --- which member names a layer keeps state for -----------------------------------------------------------------
def tracked_names(root: Any, names: frozenset[str], depth: int = 4) -> set[str]:
    """Every name of `names` that appears as a key or element in the containers of `root` (a layer) and of the
    node objects it holds, `depth` levels down (white-box: finds per-peer state wherever a layer keeps it)."""
    found: set[str] = set()
    seen: set[int] = set()

    def walk(obj: Any, level: int) -> None:
        if level < 0 or id(obj) in seen or isinstance(obj, (bytes, bytearray, int, float, bool)) or obj is None:
            return
        if isinstance(obj, str):
            if obj in names:
                found.add(obj)
            return
        seen.add(id(obj))
        if isinstance(obj, dict):
            for key, value in obj.items():
                walk(key, level - 1)
                walk(value, level - 1)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            if len(obj) > 4096:
                return  # ring slots and the like: payloads and seqnos, not names
            for item in obj:
                walk(item, level - 1)
        elif obj is root or type(obj).__module__.startswith("node."):
            attrs = getattr(obj, "__dict__", None)
            values = list(attrs.values()) if attrs is not None else []
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    values.append(getattr(obj, slot))
            for value in values:
                walk(value, level - 1)

    walk(root, depth)
    return found


# --- the driver -------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class _Epoch:
    """Deliveries of one sender within one connection epoch (the entry object they came from)."""

    owner: Any
    last_seqno: int | None = None
    seen: set = dataclasses.field(default_factory=set)


class Driver:
    """Feeds a target events and checks (a), (b), (c) after each (see the module docstring).

    - `members`: the initial membership (known names); every view the driver installs adds its members, and
      every peer the application addresses is known too.
    - `names`: every name the test uses as a source (members, strangers); the scan for tracked state looks for
      these.
    - `effect_bound(driver) -> int` (asked before each event), `bounds(driver) -> None` (raises
      `UnboundedMemory`; with the tracked-names scan, skipped when `check_memory` is false): per layer.
    - `ordered_kinds`: Deliver kinds whose order (c) is checked; `epoch_of(kind, src)`: the object deliveries of
      that kind from `src` come from (a receive entry), so (c) holds per epoch.
    """

    def __init__(self, target: LayerTarget | StackTarget, local: str, members: Iterable[str],
                 names: Iterable[str], effect_bound: Callable[["Driver"], int],
                 bounds: Callable[["Driver"], None] | None = None, ordered_kinds: Iterable[str] = (),
                 epoch_of: Callable[[str, str], Any] | None = None,
                 request_errors: tuple[type[BaseException], ...] = (UsageError,), check_memory: bool = True) -> None:
        self.target = target
        self.local = local
        self.members = tuple(members)
        self.known: set[str] = set(self.members) | {local}
        self.names = frozenset(names) | self.known
        self.effect_bound = effect_bound
        self.bounds = bounds
        self.ordered_kinds = frozenset(ordered_kinds)
        self.epoch_of = epoch_of
        self.request_errors = request_errors
        self.check_memory = check_memory
        self.now_s = 0.0
        self.timers: dict[Hashable, float] = {}
        self.fired_keys: list[Hashable] = []
        self.lives: dict[str, int] = {}          # restarts seen per peer (the tag of multicast payloads)
        self.steps = 0
        self.delivered: list[Deliver] = []
        self.sent: list[Send] = []
        self.installed: list[InstallView] = []
        self._epochs: dict[tuple[str, str], _Epoch] = {}
        self._encoded: dict[Message, bool] = {}

    # --- events ---------------------------------------------------------------------------------------------
    def start(self) -> list:
        return self._run("start", lambda: self.target.start(self.now_s))

    def receive(self, src: str, msg: Message) -> list:
        return self._run(f"from {src!r}: {msg!r}", lambda: self.target.received(self.now_s, src, msg))

    def fire(self, key: Hashable) -> list:
        self.timers.pop(key, None)
        if key not in self.fired_keys:
            self.fired_keys.append(key)
        return self._run(f"timer {key!r}", lambda: self.target.timer(self.now_s, key))

    def advance(self, dt_s: float) -> int:
        """Move time forward by `dt_s`, firing every timer that falls due on the way, in order. Returns how
        many fired."""
        end_s = self.now_s + dt_s
        fired = 0
        while True:
            due = [(at_s, repr(key), key) for key, at_s in self.timers.items() if at_s <= end_s]
            if not due:
                break
            at_s, _, key = min(due, key=lambda item: (item[0], item[1]))
            self.now_s = max(self.now_s, at_s)
            self.fire(key)
            fired += 1
            if fired > 10_000:
                raise Hang(f"more than 10000 timers fell due within {dt_s} s (a timer set in the past, again?)")
        self.now_s = end_s
        return fired

    def request(self, op: str, args: dict[str, Any], layer: str | None = None) -> list | BaseException:
        """An application request; returns its effects, or the (allowed) error it raised on purpose."""
        for key in ("to", "peer"):
            if isinstance(args.get(key), str):
                self.known.add(args[key])
        try:
            return self._run(f"request {layer or ''} {op} {args!r}",
                             lambda: self.target.request(self.now_s, layer, op, args))
        except self.request_errors as exc:
            trace(f"   -> refused on purpose: {type(exc).__name__}: {exc}")
            return exc

    def view(self, members: Iterable[str], n: int | None = None) -> list:
        members = tuple(members)
        self.known.update(members)
        view_id = (members[0] if members else self.local, n if n is not None else 1000 + self.steps)
        return self._run(f"view {view_id} {members}", lambda: self.target.view(self.now_s, view_id, members))

    def restarted(self, peer: str) -> list:
        self.lives[peer] = self.lives.get(peer, 0) + 1
        return self._run(f"peer_restarted {peer!r}", lambda: self.target.peer_restarted(self.now_s, peer))

    # --- the checks -----------------------------------------------------------------------------------------
    def _run(self, what: str, call: Callable[[], list]) -> list:
        self.steps += 1
        trace(f"[{self.steps}] t={self.now_s:.3f} {what}")
        bound = self.effect_bound(self)  # from the state before the event (what it may deliver, ...)
        try:
            with cpu_budget(EVENT_CPU_BUDGET_S, f"event [{self.steps}] {what}"):
                effects = call()
        except self.request_errors as exc:
            if not what.startswith("request"):
                raise RequestRaised(f"event [{self.steps}] {what} raised {type(exc).__name__}: {exc}") from exc
            raise
        self._check_effects(what, effects, bound)
        if self.check_memory:
            self._check_memory(what)
        self._check_state(what)
        return effects

    def _check_effects(self, what: str, effects: list, bound: int) -> None:
        if not isinstance(effects, list):
            raise BadEffect(f"event {what} returned {type(effects).__name__}, not a list")
        if len(effects) > bound:
            raise TooManyEffects(f"event {what} returned {len(effects)} effects, the bound is {bound}")
        for eff in effects:
            if isinstance(eff, Send):
                self._check_send(what, eff)
                self.sent.append(eff)
            elif isinstance(eff, SetTimer):
                if not isinstance(eff.at_s, (int, float)) or not math.isfinite(eff.at_s):
                    raise BadEffect(f"event {what}: timer {eff.key!r} set at {eff.at_s!r}")
                hash(eff.key)
                self.timers[eff.key] = max(eff.at_s, self.now_s)
            elif isinstance(eff, CancelTimer):
                self.timers.pop(eff.key, None)
            elif isinstance(eff, Deliver):
                self._check_deliver(what, eff)
            elif isinstance(eff, Emit):
                self._check_emit(what, eff)
            elif isinstance(eff, InstallView):
                self.installed.append(eff)
            else:
                raise BadEffect(f"event {what}: unknown effect {eff!r}")

    def _check_send(self, what: str, eff: Send) -> None:
        if not isinstance(eff.dst, str) or not eff.dst:
            raise BadEffect(f"event {what}: Send to {eff.dst!r}")
        if not isinstance(eff.msg, Message):
            raise BadEffect(f"event {what}: Send of {eff.msg!r}, not a wire message")
        try:
            if self._encoded.get(eff.msg):
                return
        except TypeError:
            raise BadEffect(f"event {what}: {eff.msg!r} is not hashable (a list field?)") from None
        try:
            data = encode_datagram(CHECK_CLUSTER_ID, LONGEST_SENDER, [eff.msg])
        except (struct.error, ValueError, OverflowError, TypeError, UnicodeEncodeError) as exc:
            raise BadEffect(f"event {what}: {eff.msg!r} to {eff.dst!r} does not encode: "
                            f"{type(exc).__name__}: {exc}") from None
        if len(data) > MAX_DATAGRAM_BYTES:
            raise BadEffect(f"event {what}: {eff.msg!r} needs a datagram of {len(data)} bytes")
        _, decoded = decode_datagram(data, CHECK_CLUSTER_ID)
        if decoded != [eff.msg]:
            raise BadEffect(f"event {what}: {eff.msg!r} decodes as {decoded!r}")
        if len(self._encoded) < 100_000:
            self._encoded[eff.msg] = True

    def _check_emit(self, what: str, eff: Emit) -> None:
        if not isinstance(eff.type, str) or not isinstance(eff.fields, dict):
            raise BadEffect(f"event {what}: Emit {eff!r}")
        try:
            orjson.dumps({"ts": self.now_s, "node": self.local, "type": eff.type, **eff.fields}, default=str)
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise BadEffect(f"event {what}: history event {eff.type} does not serialise: {exc}") from None

    def _check_deliver(self, what: str, eff: Deliver) -> None:
        if not isinstance(eff.payload, bytes) or not isinstance(eff.src, str):
            raise BadEffect(f"event {what}: Deliver {eff!r}")
        self.delivered.append(eff)
        parsed = parse_payload(eff.payload)
        if parsed is None:
            return
        src, tag, seqno = parsed
        if src != eff.src:
            raise MisattributedDelivery(f"event {what}: delivered {payload_msg_id(eff.payload)!r} as from "
                                        f"{eff.src!r}")
        if eff.kind not in self.ordered_kinds or self.epoch_of is None:
            return
        owner = self.epoch_of(eff.kind, eff.src)
        epoch = self._epochs.get((eff.kind, eff.src))
        if epoch is None or epoch.owner is not owner:
            epoch = self._epochs[(eff.kind, eff.src)] = _Epoch(owner)
        ident = (tag, seqno)
        if ident in epoch.seen:
            raise DuplicateDelivery(f"event {what}: {eff.kind} {payload_msg_id(eff.payload)!r} from {eff.src!r} "
                                    f"delivered a second time in one connection epoch")
        if epoch.last_seqno is not None and seqno <= epoch.last_seqno:
            raise OutOfOrderDelivery(f"event {what}: {eff.kind} seqno {seqno} from {eff.src!r} delivered after "
                                     f"seqno {epoch.last_seqno} in one connection epoch")
        epoch.seen.add(ident)
        epoch.last_seqno = seqno

    def _check_memory(self, what: str) -> None:
        if self.bounds is not None:
            self.bounds(self)
        for name, layer in self.target.layers.items():
            strangers = tracked_names(layer, self.names) - self.known
            if len(strangers) > TRACKED_STRANGERS_MAX:
                raise UnboundedMemory(f"after {what}: layer {name} keeps state for {len(strangers)} names that are "
                                      f"not members ({sorted(strangers)}); at most {TRACKED_STRANGERS_MAX}")

    def _check_state(self, what: str) -> None:
        for name, layer in self.target.layers.items():
            state = getattr(layer, "state", None)
            if state is None:
                continue
            with cpu_budget(EVENT_CPU_BUDGET_S, f"state() of {name} after {what}"):
                rendered = state(self.now_s)  # an error here would break GET /state: it fails the test as is
            try:
                json.dumps(rendered)
            except (TypeError, ValueError) as exc:
                raise BrokenState(f"after {what}: {name}.state() is not JSON: {exc}") from None


def advance_steps() -> st.SearchStrategy[float]:
    """How far time jumps in one step: not at all, a little, a timer period, or past every timeout."""
    return st.sampled_from([0.0, 0.001, 0.05, 0.1, 0.25, 0.4, 1.0, 2.6, 11.0])


def run_driver(body: Callable[[], None]) -> None:
    """Run a test body under the memory cap."""
    with memory_cap():
        body()


# --- the histories of one layer (unicast, multicast) -------------------------------------------------------
LAYER_LOCAL = "n1"
LAYER_MEMBERS = ("n1", "n2", "n3")
STRANGERS = ("x1", "x2", "x3", "\u00f1" * 32)  # the last is 64 utf-8 bytes: the longest name the wire carries
LAYER_NAMES = LAYER_MEMBERS + STRANGERS
VIEWABLE = LAYER_MEMBERS[1:] + STRANGERS[:1]


def shared_step(data: st.DataObject, driver: "Driver", kind: str) -> None:
    """The steps every layer's history has: time passing, a view (one stranger may join, a non-member becoming a
    member; the others stay strangers for good), a peer's restart, a timer that already fired."""
    if kind == "advance":
        driver.advance(data.draw(advance_steps()))
    elif kind == "view":
        others = data.draw(st.lists(st.sampled_from(VIEWABLE), unique=True, max_size=4))
        driver.view((LAYER_LOCAL, *others))
    elif kind == "restart":
        driver.restarted(data.draw(st.sampled_from(LAYER_NAMES)))
    elif kind == "stale_timer" and driver.fired_keys:
        driver.fire(data.draw(st.sampled_from(driver.fired_keys)))


def run_steps(data: st.DataObject, driver: "Driver", max_steps: int, step: Callable[[], None]) -> "Driver":
    """Start the driver and take 1..`max_steps` drawn steps under the memory cap."""
    def body() -> None:
        driver.start()
        for _ in range(data.draw(st.integers(1, max_steps))):
            step()

    run_driver(body)
    return driver


# --- the harness catches what it should ------------------------------------------------------------------------
class _Toy:
    """A layer with one deliberate defect per `mode`, to show every check can fail."""

    MESSAGES = ()

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.buffer: dict[str, list[int]] = {}

    def handle(self, now_s: float, event: Any) -> list:
        if self.mode == "hang":
            while True:
                pass
        if self.mode == "raise":
            raise KeyError("boom")
        if self.mode == "effects":
            return [Emit("x") for _ in range(100)]
        if self.mode == "unencodable":
            from node.wire import Heartbeat
            return [Send("b", Heartbeat(2**64))]
        if self.mode == "stranger":
            self.buffer[event.src] = []
            return []
        if self.mode in ("duplicate", "reorder"):
            seqnos = (2, 2) if self.mode == "duplicate" else (3, 2)
            return [Deliver("b", payload_for("b", 0, s)) for s in seqnos]
        if self.mode == "misattributed":
            return [Deliver("b", payload_for("c", 0, 1))]
        return []


def _toy_driver(mode: str) -> Driver:
    return Driver(LayerTarget(_Toy(mode)), "a", ("a", "b", "c"), ("a", "b", "c", "x", "y", "z"),
                  effect_bound=lambda d: 10, ordered_kinds=("unicast",), epoch_of=lambda kind, src: None)


@pytest.mark.parametrize("mode, error", [
    ("hang", Hang), ("raise", KeyError), ("effects", TooManyEffects), ("unencodable", BadEffect),
    ("duplicate", DuplicateDelivery), ("reorder", OutOfOrderDelivery), ("misattributed", MisattributedDelivery),
])
def test_the_driver_turns_each_defect_into_its_failure(mode: str, error: type[BaseException]) -> None:
    from node.wire import Heartbeat
    driver = _toy_driver(mode)
    started = time.process_time()
    with pytest.raises(error):
        driver.receive("b", Heartbeat(1))
    assert time.process_time() - started < 10 * EVENT_CPU_BUDGET_S


def test_the_share_of_examples_scales_each_count_and_refuses_what_is_not_a_share(monkeypatch) -> None:
    monkeypatch.delenv(EXAMPLES_FRACTION_ENV, raising=False)
    assert hostile_examples(150) == 150
    monkeypatch.setenv(EXAMPLES_FRACTION_ENV, "0.25")
    assert (hostile_examples(150), hostile_examples(120), hostile_examples(1)) == (38, 30, 1)
    for wrong in ("0", "1.5", "-1", "nan", "a quarter", ""):
        monkeypatch.setenv(EXAMPLES_FRACTION_ENV, wrong)
        with pytest.raises(UsageError, match=EXAMPLES_FRACTION_ENV):
            hostile_examples(150)


def test_the_driver_counts_state_kept_for_strangers() -> None:
    from node.wire import Heartbeat
    driver = _toy_driver("stranger")
    for name in ("x", "y"):
        driver.receive(name, Heartbeat(1))
    with pytest.raises(UnboundedMemory):
        driver.receive("z", Heartbeat(1))


def test_the_memory_cap_turns_a_memory_bomb_into_memory_error() -> None:
    with memory_cap(256 << 20):
        with pytest.raises(MemoryError):
            bytearray(1 << 30)


@settings(max_examples=50, **HOSTILE_SETTINGS)
@given(st.data())
def test_boundary_values_stay_in_the_field_and_reach_the_edges(data: st.DataObject) -> None:
    edges = data.draw(st.lists(st.integers(-5, U64_MAX + 5), max_size=4))
    value = data.draw(u64(edges))
    assert 0 <= value <= U64_MAX
    around = set(near(edges, U64_MAX))
    assert all(e + d in around for e in edges for d in (-1, 0, 1) if 0 <= e + d <= U64_MAX)
    assert all(0 <= v <= U64_MAX for v in around)
    assert parse_payload(payload_for("n1", 7, 2**64 - 1)) == ("n1", 7, 2**64 - 1)
    assert parse_payload(data.draw(opaque_payloads())) is None
