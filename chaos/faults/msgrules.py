"""Protocol-aware fault rules: which node message to hit and what to do with it (pure, no packets here).

A rule matches a message by wire type, sender node (`src`), receiver node (`dst`) and optionally `conn_id`,
`seqno` and `first` (the flag of UnicastData); its action is one of

    drop            every matching message is removed from its datagram
    delay:MS        every matching message leaves MS ms later, in a datagram of its own
    duplicate       every matching message is sent twice
    hold:MS         matching messages are held from the first match on for MS ms, then released together
                    (afterwards the rule is spent and matches pass)
    drop-first:N    the first N matching messages are dropped, later ones pass
    drop-nth:N      only the N-th matching message is dropped
    drop-every:N    every N-th matching message is dropped (the N-th, 2N-th, ...); drop-every:1 drops them all
    drop-range:A-B  matching messages whose seqno is within A..B (inclusive) are dropped; the range is part of
                    the match, so messages outside it (or without a seqno) fall through to later rules

`action_spec(text)` parses an action into the MsgRule fields it sets (`parse_action` is the older three-value
form, without drop-range). `RuleBook.decide` keeps the per-rule counters and hold windows; the shaper calls it
per message.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from node.errors import UsageError

ACTIONS = ("drop", "delay", "duplicate", "hold", "drop-first", "drop-nth", "drop-every", "drop-range")
COUNTED = ("drop-first", "drop-nth", "drop-every")  # actions taking a count N
_ACTION_RE = re.compile(r"^(drop-first|drop-nth|drop-every|drop-range|drop|delay|duplicate|hold)"
                        r"(?::([0-9.]+)(?:-([0-9.]+))?)?$")
ACTION_HINT = "one of drop, delay:MS, duplicate, hold:MS, drop-first:N, drop-nth:N, drop-every:N, drop-range:A-B"

PASS, DROP, DUPLICATE = "pass", "drop", "duplicate"


@dataclass(frozen=True)
class MsgRule:
    """One rule; `type` is the wire type code, `src`/`dst` node names; `ms` for delay/hold, `n` for drop-first,
    drop-nth and drop-every, `seqno_lo`..`seqno_hi` for drop-range; `first` matches UnicastData's flag."""

    type: int
    src: str
    dst: str
    action: str
    ms: float = 0.0
    n: int = 0
    conn_id: int | None = None
    seqno: int | None = None
    first: bool | None = None
    seqno_lo: int = 0
    seqno_hi: int = 0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise UsageError(f"unknown message-fault action {self.action!r}; use one of {', '.join(ACTIONS)}")
        if self.action in ("delay", "hold") and not 0 < self.ms <= 600_000:
            raise UsageError(f"action {self.action} needs a time in ms within 0..600000, e.g. {self.action}:200")
        if self.action in COUNTED and self.n < 1:
            raise UsageError(f"action {self.action} needs a count >= 1, e.g. {self.action}:3")
        if self.action == "drop-range" and not 0 <= self.seqno_lo <= self.seqno_hi:
            raise UsageError(f"action drop-range needs seqnos 0 <= A <= B, got {self.seqno_lo}-{self.seqno_hi}",
                             hint="e.g. drop-range:3-7")
        if self.src == self.dst:
            raise UsageError(f"message rule from {self.src} to itself")

    def matches(self, msg_type: int, fields: Mapping[str, Any]) -> bool:
        if msg_type != self.type:
            return False
        if self.conn_id is not None and fields.get("conn_id") != self.conn_id:
            return False
        if self.first is not None and ("first" not in fields or bool(fields["first"]) != self.first):
            return False
        if self.action == "drop-range":
            seqno = fields.get("seqno")
            if not isinstance(seqno, int) or not self.seqno_lo <= seqno <= self.seqno_hi:
                return False
        return self.seqno is None or fields.get("seqno") == self.seqno

    def describe(self) -> str:
        what = self.action + (f":{self.ms:g}" if self.action in ("delay", "hold") else "") + \
            (f":{self.n}" if self.action in COUNTED else "") + \
            (f":{self.seqno_lo}-{self.seqno_hi}" if self.action == "drop-range" else "")
        extra = "".join(f" {k}={v}" for k, v in (("conn_id", self.conn_id), ("seqno", self.seqno),
                                                 ("first", self.first)) if v is not None)
        return f"{what} type {self.type} {self.src}->{self.dst}{extra}"


def action_spec(text: str) -> dict[str, Any]:
    """The MsgRule fields an action sets: `delay:200` -> {"action": "delay", "ms": 200.0};
    `drop-every:3` -> {"action": "drop-every", "n": 3}; `drop-range:4-9` -> {"action": "drop-range",
    "seqno_lo": 4, "seqno_hi": 9}. Raises `UsageError`."""
    match = _ACTION_RE.match(text.strip())
    if not match:
        raise UsageError(f"malformed action {text!r}", hint=ACTION_HINT)
    action, number, upper = match.group(1), match.group(2), match.group(3)
    if upper is not None and action != "drop-range":
        raise UsageError(f"action {action} takes one number, got {text!r}", hint=ACTION_HINT)
    if action in ("delay", "hold"):
        if number is None or not re.fullmatch(r"\d+(?:\.\d+)?", number):
            raise UsageError(f"action {action} needs a time in ms, e.g. {action}:200")
        return {"action": action, "ms": float(number)}
    if action in COUNTED:
        if number is None or not number.isdigit():
            raise UsageError(f"action {action} needs a whole count, e.g. {action}:3")
        return {"action": action, "n": int(number)}
    if action == "drop-range":
        if number is None or upper is None or not number.isdigit() or not upper.isdigit():
            raise UsageError(f"action drop-range needs two whole seqnos A-B, got {text!r}", hint="e.g. drop-range:3-7")
        return {"action": action, "seqno_lo": int(number), "seqno_hi": int(upper)}
    if number is not None:
        raise UsageError(f"action {action} takes no argument, got {text!r}")
    return {"action": action}


def parse_action(text: str) -> tuple[str, float, int]:
    """`delay:200` -> ("delay", 200.0, 0); `drop-first:3` -> ("drop-first", 0.0, 3). The three-value form of
    `action_spec` (it cannot carry drop-range's two seqnos). Raises `UsageError`."""
    spec = action_spec(text)
    if spec["action"] == "drop-range":
        raise UsageError("drop-range has two seqnos: build the rule with action_spec() (scenario files do)",
                         hint="or drop one seqno with --seqno and action drop")
    return spec["action"], float(spec.get("ms", 0.0)), int(spec.get("n", 0))


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
            if rule.action in ("drop", "drop-range"):
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
            if rule.action == "drop-every":
                return DROP if state.matched % rule.n == 0 else PASS
            return DROP if state.matched == rule.n else PASS
        return PASS

    def counters(self) -> list[int]:
        return [s.matched for s in self._states]

    def carry_from(self, old: "RuleBook") -> None:
        """Keep the counters and hold windows of rules that stay the same across a reload."""
        previous = dict(zip(old.rules, old._states))
        self._states = [previous.get(rule, state) for rule, state in zip(self.rules, self._states)]
