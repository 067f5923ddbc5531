"""The reliable-unicast layer's settings: one frozen dataclass with splitlab's test defaults, validated.

JGroups' UNICAST3 defaults are for production (xmit_interval 500 ms, sync_min_interval 2000 ms,
conn_close_timeout 240 s, max_retransmit_time 60 s). splitlab scales them down and keeps the ratios where they
matter: the retransmit task runs every 100 ms, a SYNC is repeated at most every 400 ms, a connection to a member
that left is closed after 10 s (DESIGN.md), and a send connection to a non-member is dropped after 2.5 s.
Idle connections are not reaped by default (conn_expiry_timeout 0): a scenario that wants it sets it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from node.errors import ConfigError
from node.settings import Settings


@dataclass(frozen=True)
class UnicastConfig(Settings):
    """Timeouts and limits of `unicast1` / `unicast2` / `unicast3` (each variant uses the ones it knows)."""

    LABEL: ClassVar[str] = "unicast"

    xmit_interval_ms: int = 100        # period of the retransmit task (acks, XMIT_REQ, tail resend, ageing)
    ack_threshold: int = 100           # deliveries after which an ACK (unicast2: STABLE) leaves at once
    conn_close_timeout_ms: int = 10_000  # unicast3: a CLOSING connection is removed after this long
    sync_min_interval_ms: int = 400    # unicast3: at most one SYNC per sender in this interval
    sync_timeout_ms: int = 2_000       # unicast3: a SYNC handshake not finished by then is abandoned
    max_retransmit_time_ms: int = 2_500  # unicast3: send connection to a non-member removed after this; 0 = never
    conn_expiry_timeout_ms: int = 0    # unicast3: an OPEN connection idle this long becomes CLOSING; 0 = never
    max_xmit_req_seqnos: int = 8_192   # seqnos asked for (or resent) per peer per retransmit run
    window_capacity: int = 50_000      # unacked messages per peer (a send beyond waits: WindowFull) and the
    #                                    receive window's reach above its highest delivered seqno
    conn_id_start: int = 1 << 12       # first connection id (its stream part counts); a runtime derives it
    #                                    from its boot time so a restarted node never reuses one (connid.py)

    def __post_init__(self) -> None:
        positive = ("xmit_interval_ms", "ack_threshold", "conn_close_timeout_ms", "sync_min_interval_ms",
                    "sync_timeout_ms", "max_xmit_req_seqnos", "window_capacity")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"unicast config: {name} must be a positive integer, got {value!r}")
        for name, what in (("max_retransmit_time_ms", "the removal of send connections to non-members"),
                           ("conn_expiry_timeout_ms", "the closing of idle connections")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"unicast config: {name} must be >= 0, got {value!r}", hint=f"0 disables {what}")
        start = self.conn_id_start
        if isinstance(start, bool) or not isinstance(start, int) or not 0 < start <= 0xFFFFFFFF:
            raise ConfigError(f"unicast config: conn_id_start must be in 1..{0xFFFFFFFF}, got {start!r}")
