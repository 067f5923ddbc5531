"""NAKACK4's settings: one frozen dataclass with splitlab's test defaults, validated.

JGroups' NAKACK4 defaults: capacity 16384, ack_threshold capacity/4, xmit_interval 1000 ms,
max_xmit_req_size 1024. splitlab runs the retransmit task every 100 ms (DESIGN.md) and keeps the rest.
`retain_departed_ms` is splitlab's: how long the layer keeps the window of a sender that left the view, and the
messages a receiver that left has not acknowledged, so that a member coming back after a partition still gets
them (0: drop at once, as the seed's "remove receiver windows of non-members").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from node.errors import ConfigError
from node.settings import Settings

SYNC_MODES = ("tipc", "legacy")


@dataclass(frozen=True)
class Nakack4Config(Settings):
    """Capacity, acking and retransmission of the multicast layer."""

    LABEL: ClassVar[str] = "nakack4"

    capacity: int = 16_384            # messages in the fixed ring buffer (per sender)
    ack_threshold: int = 0            # deliveries after which an ACK leaves at once; 0 = capacity // 4
    xmit_interval_ms: int = 100       # period of the retransmit task (acks, XMIT_REQ, HIGHEST_SEQNO, sync resends)
    max_xmit_req_size: int = 1_024    # seqnos asked for per sender per run (and served per request)
    send_atomic: bool = False         # take the seqno and send under one lock (no reordering by stalled senders)
    retain_departed_ms: int = 10_000  # keep windows / unacked messages of members that left this long
    sync_interval_ms: int = 400       # BCAST_STATE resends, and state requests at most this often per peer

    def __post_init__(self) -> None:
        positive = ("capacity", "xmit_interval_ms", "max_xmit_req_size", "sync_interval_ms")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"nakack4 config: {name} must be a positive integer, got {value!r}")
        for name in ("ack_threshold", "retain_departed_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"nakack4 config: {name} must be an integer >= 0, got {value!r}")
        if not isinstance(self.send_atomic, bool):
            raise ConfigError(f"nakack4 config: send_atomic must be true or false, got {self.send_atomic!r}")

    @property
    def effective_ack_threshold(self) -> int:
        return self.ack_threshold or max(1, self.capacity // 4)

    @classmethod
    def coerce(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Parsed environment gives send_atomic as 0/1."""
        if "send_atomic" in values and values["send_atomic"] in (0, 1):
            values["send_atomic"] = bool(values["send_atomic"])
        return values
