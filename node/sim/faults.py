"""Faults aimed at messages: drop, delay or hold messages of one type on one direction of a link.

A `MsgFault` matches a message by sender, receiver, message class and an optional predicate (e.g. "DATA with
first=True"), acts on at most `count` matching messages (None: all), and is checked before bundling, so it hits
exactly one message. `hold` keeps matching messages until `Simulator.release` sends them on (a delayed message
whose arrival a test wants to place exactly, like the stale STABLE of JGRP-1873).

`where` predicates for the usual selections are built here: `fields_equal` (conn_id, seqno, first, ...),
`seqno_within` (a seqno range), `every_nth` / `nth_only` (counting the messages another predicate matched),
`all_of`, and `Switch` (a predicate that can be turned off, to end a fault whose held messages must still go).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from node.errors import UsageError
from node.wire import Message, message_types

DROP = "drop"
DELAY = "delay"
HOLD = "hold"


def message_class(msg_type: type[Message] | str | None) -> type[Message] | None:
    """A wire class from a class or its name ("UnicastData"); None matches every type. Raises UsageError."""
    if msg_type is None or isinstance(msg_type, type):
        return msg_type
    for cls in message_types().values():
        if cls.__name__ == msg_type:
            return cls
    names = sorted(cls.__name__ for cls in message_types().values())
    raise UsageError(f"unknown message type {msg_type!r}", hint=f"known: {', '.join(names)}")


@dataclass
class MsgFault:
    """One message fault; `src`/`dst` None match any member."""

    fault_id: int
    action: str
    src: str | None
    dst: str | None
    msg_type: type[Message] | None
    where: Callable[[Message], bool] | None = None
    count: int | None = None
    delay_s: float = 0.0
    hits: int = 0
    held: list[tuple[str, str, Message]] = field(default_factory=list)

    def matches(self, src: str, dst: str, msg: Message) -> bool:
        if self.count is not None and self.hits >= self.count:
            return False
        if self.src is not None and self.src != src:
            return False
        if self.dst is not None and self.dst != dst:
            return False
        if self.msg_type is not None and type(msg) is not self.msg_type:
            return False
        return self.where is None or bool(self.where(msg))


class FaultTable:
    """The active message faults, checked in the order they were added."""

    def __init__(self) -> None:
        self.faults: dict[int, MsgFault] = {}
        self._next_id = 1

    def add(self, action: str, src: str | None, dst: str | None, msg_type: type[Message] | str | None,
            where: Callable[[Message], bool] | None = None, count: int | None = None,
            delay_s: float = 0.0) -> MsgFault:
        if count is not None and count <= 0:
            raise UsageError(f"message fault count must be positive or None, got {count}")
        if delay_s < 0:
            raise UsageError(f"message fault delay must be >= 0, got {delay_s}")
        fault = MsgFault(self._next_id, action, src, dst, message_class(msg_type), where, count, delay_s)
        self.faults[fault.fault_id] = fault
        self._next_id += 1
        return fault

    def remove(self, fault_id: int) -> MsgFault:
        """Raises UsageError for an unknown id."""
        fault = self.faults.pop(fault_id, None)
        if fault is None:
            raise UsageError(f"no message fault with id {fault_id}")
        return fault

    def match(self, src: str, dst: str, msg: Message) -> MsgFault | None:
        """The first fault that acts on this message (its hit is counted), or None."""
        for fault in self.faults.values():
            if fault.matches(src, dst, msg):
                fault.hits += 1
                return fault
        return None


Where = Callable[[Message], bool]


def fields_equal(**values: Any) -> Where:
    """Matches messages whose fields equal `values` (None values are ignored: no condition); a message without
    such a field does not match. `first` compares as a boolean."""
    wanted = {k: v for k, v in values.items() if v is not None}
    missing = object()

    def where(msg: Message) -> bool:
        for name, value in wanted.items():
            got = getattr(msg, name, missing)
            if got is missing:
                return False
            if (bool(got) != bool(value)) if isinstance(value, bool) else got != value:
                return False
        return True
    return where


def seqno_within(lo: int, hi: int) -> Where:
    """Matches messages with a `seqno` within lo..hi (inclusive)."""
    if not 0 <= lo <= hi:
        raise UsageError(f"seqno range needs 0 <= lo <= hi, got {lo}..{hi}")

    def where(msg: Message) -> bool:
        seqno = getattr(msg, "seqno", None)
        return isinstance(seqno, int) and lo <= seqno <= hi
    return where


def all_of(*preds: Where | None) -> Where:
    """Matches when every given predicate does (None: no condition); evaluated in order, stopping at the first
    that fails, so a counting predicate last sees only messages the others matched."""
    active = [p for p in preds if p is not None]
    return lambda msg: all(p(msg) for p in active)


def _counting(n: int, base: Where | None, hit: Callable[[int], bool]) -> Where:
    if n < 1:
        raise UsageError(f"message count must be >= 1, got {n}")
    seen = [0]

    def where(msg: Message) -> bool:
        if base is not None and not base(msg):
            return False
        seen[0] += 1
        return hit(seen[0])
    return where


def every_nth(n: int, base: Where | None = None) -> Where:
    """Matches the n-th, 2n-th, ... message that `base` matches."""
    return _counting(n, base, lambda seen: seen % n == 0)


def nth_only(n: int, base: Where | None = None) -> Where:
    """Matches only the n-th message that `base` matches."""
    return _counting(n, base, lambda seen: seen == n)


class Switch:
    """A predicate wrapper that can be turned off (`off()`): from then on it matches nothing."""

    def __init__(self, where: Where | None = None) -> None:
        self.where = where
        self.on = True

    def off(self) -> None:
        self.on = False

    def __call__(self, msg: Message) -> bool:
        return self.on and (self.where is None or bool(self.where(msg)))
