"""Protocol-aware fault rules: which node message to hit and what to do with it (pure, no packets here).

A rule matches a message by wire type, sender node (`src`), receiver node (`dst`) and optionally `conn_id`
and `seqno`; its action is one of

    drop            every matching message is removed from its datagram
    delay:MS        every matching message leaves MS ms later, in a datagram of its own
    duplicate       every matching message is sent twice
    hold:MS         matching messages are held from the first match on for MS ms, then released together
                    (afterwards the rule is spent and matches pass)
    drop-first:N    the first N matching messages are dropped, later ones pass
    drop-nth:N      only the N-th matching message is dropped

`RuleBook.decide` keeps the per-rule counters and hold windows; the shaper calls it per message.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from node.errors import UsageError

ACTIONS = ("drop", "delay", "duplicate", "hold", "drop-first", "drop-nth")
_ACTION_RE = re.compile(r"^(drop|delay|duplicate|hold|drop-first|drop-nth)(?::(\d+(?:\.\d+)?))?$")

PASS, DROP, DUPLICATE = "pass", "drop", "duplicate"


@dataclass(frozen=True)
class MsgRule:
    """One rule; `type` is the wire type code, `src`/`dst` node names; `ms` for delay/hold, `n` for drop-*."""

    type: int
    src: str
    dst: str
    action: str
    ms: float = 0.0
    n: int = 0
    conn_id: int | None = None
    seqno: int | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise UsageError(f"unknown message-fault action {self.action!r}; use one of {', '.join(ACTIONS)}")
        if self.action in ("delay", "hold") and not 0 < self.ms <= 600_000:
            raise UsageError(f"action {self.action} needs a time in ms within 0..600000, e.g. {self.action}:200")
        if self.action in ("drop-first", "drop-nth") and self.n < 1:
            raise UsageError(f"action {self.action} needs a count >= 1, e.g. {self.action}:3")
        if self.src == self.dst:
            raise UsageError(f"message rule from {self.src} to itself")

    def matches(self, msg_type: int, fields: Mapping[str, Any]) -> bool:
        if msg_type != self.type:
            return False
        if self.conn_id is not None and fields.get("conn_id") != self.conn_id:
            return False
        return self.seqno is None or fields.get("seqno") == self.seqno

    def describe(self) -> str:
        what = self.action + (f":{self.ms:g}" if self.action in ("delay", "hold") else "") + \
            (f":{self.n}" if self.action.startswith("drop-") else "")
        extra = "".join(f" {k}={v}" for k, v in (("conn_id", self.conn_id), ("seqno", self.seqno)) if v is not None)
        return f"{what} type {self.type} {self.src}->{self.dst}{extra}"


def parse_action(text: str) -> tuple[str, float, int]:
    """`delay:200` -> ("delay", 200.0, 0); `drop-first:3` -> ("drop-first", 0.0, 3). Raises `UsageError`."""
    match = _ACTION_RE.match(text.strip())
    if not match:
        raise UsageError(f"malformed action {text!r}",
                         hint="one of drop, delay:MS, duplicate, hold:MS, drop-first:N, drop-nth:N")
    action, number = match.group(1), match.group(2)
    if action in ("delay", "hold"):
        if number is None:
            raise UsageError(f"action {action} needs a time in ms, e.g. {action}:200")
        return action, float(number), 0
    if action in ("drop-first", "drop-nth"):
        if number is None or "." in number:
            raise UsageError(f"action {action} needs a whole count, e.g. {action}:3")
        return action, 0.0, int(number)
    if number is not None:
        raise UsageError(f"action {action} takes no argument, got {text!r}")
    return action, 0.0, 0


@dataclass
class _State:
    matched: int = 0
    hold_until_s: float | None = None


@dataclass
class RuleBook:
    """The rules of one shaper with their counters. `decide` returns PASS, DROP, DUPLICATE or a release time."""

    rules: list[MsgRule]
    _states: list[_State] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._states = [_State() for _ in self.rules]

    def for_dst(self, dst: str) -> bool:
        return any(r.dst == dst for r in self.rules)

    def decide(self, now_s: float, src: str, dst: str, msg_type: int, fields: Mapping[str, Any]) -> str | float:
        """What to do with one message from `src` to `dst`: the first matching rule decides."""
        for rule, state in zip(self.rules, self._states):
            if rule.src != src or rule.dst != dst or not rule.matches(msg_type, fields):
                continue
            state.matched += 1
            if rule.action == "drop":
                return DROP
            if rule.action == "duplicate":
                return DUPLICATE
            if rule.action == "delay":
                return now_s + rule.ms / 1000
            if rule.action == "hold":
                if state.hold_until_s is None:
                    state.hold_until_s = now_s + rule.ms / 1000
                return state.hold_until_s if now_s < state.hold_until_s else PASS
            if rule.action == "drop-first":
                return DROP if state.matched <= rule.n else PASS
            return DROP if state.matched == rule.n else PASS
        return PASS

    def counters(self) -> list[int]:
        return [s.matched for s in self._states]

    def carry_from(self, old: "RuleBook") -> None:
        """Keep the counters and hold windows of rules that stay the same across a reload."""
        previous = dict(zip(old.rules, old._states))
        self._states = [previous.get(rule, state) for rule, state in zip(self.rules, self._states)]
