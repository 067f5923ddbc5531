"""The one error hierarchy of splitlab: every error says what failed, where, and a hint.

The node, the controller (`chaos`) and the pipeline all raise subclasses of `SplitlabError`. The command line
maps `UsageError` to exit code 2 and every other `SplitlabError` to exit code 1.
"""
from __future__ import annotations

import sys
from typing import TextIO


class SplitlabError(Exception):
    """Base of every error splitlab raises on purpose.

    `message` says what went wrong and where; `hint` (optional) says what the user can do about it.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} (hint: {self.hint})"
        return self.message


def report_error(prog: str, exc: SplitlabError, stream: TextIO | None = None) -> int:
    """Print `exc` as every command line tool of splitlab does (`PROG: error: ...` per message line, then
    `hint: ...`) on stderr; return its exit code."""
    stream = stream or sys.stderr
    for line in exc.message.splitlines() or [""]:
        print(f"{prog}: error: {line}", file=stream)
    if exc.hint:
        print(f"hint: {exc.hint}", file=stream)
    return exc.exit_code


class UsageError(SplitlabError):
    """The user's input is wrong: a bad option, file, name or value. Exit code 2."""

    exit_code = 2


class ConfigError(UsageError):
    """A node or cluster configuration value is missing or invalid."""


class EnvironmentProblem(SplitlabError):
    """The machine cannot do what was asked: Docker down, images missing, a kernel feature absent."""


class CommandFailed(SplitlabError):
    """An external command (docker, iptables, tc, nsenter, ...) failed; carries the command, exit code and output."""

    def __init__(self, argv: list[str], returncode: int, output: str, hint: str | None = None) -> None:
        shown = " ".join(argv)
        tail = output.strip()[-2000:]
        super().__init__(f"command failed with exit code {returncode}: {shown}\n{tail}", hint)
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output


class WireError(SplitlabError):
    """A datagram could not be decoded. `reason` is a short counter key (truncated, foreign, version, ...)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"bad datagram ({reason}): {detail}")
        self.reason = reason


class WindowFull(SplitlabError):
    """A protocol's send window holds `capacity` unacknowledged messages: the sender must wait (back-pressure).

    Raised by a `send` request instead of sending; nothing was sent and the message was not taken. The layer
    emits `window_unblocked` when acks free room; retry then.
    """

    def __init__(self, proto: str, next_seqno: int, low: int, capacity: int, peer: str = "everyone") -> None:
        super().__init__(f"{proto}: send window full (next seqno {next_seqno}, {peer} has acked up to {low}, "
                         f"capacity {capacity})", hint="wait for window_unblocked, then send again")
        self.next_seqno = next_seqno
        self.low = low
        self.capacity = capacity


class HistoryError(SplitlabError):
    """The history (events JSON-lines) could not be written or read."""
