"""The membership layer's settings: one frozen dataclass with splitlab's test defaults, validated.

JGroups' FD_ALL defaults (timeout 40 s, interval 8 s) and MERGE3's (min_interval 10 s) are for production.
splitlab (DESIGN.md): heartbeats every 250 ms (the liveness layer sends them), suspicion after 1.5 s of silence,
a merge check every 1 s. The coordinator resends an unacknowledged view every 250 ms. A member never heard has
not joined yet: it is suspected after `join_timeout_ms` (60 s: `splitlab up`'s wait), not after 1.5 s.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from node.errors import ConfigError
from node.settings import Settings


@dataclass(frozen=True)
class MembershipConfig(Settings):
    """Timeouts of failure detection, view installation and merging."""

    LABEL: ClassVar[str] = "membership"

    check_interval_ms: int = 250      # how often suspicion is re-evaluated from the heartbeat record
    suspect_timeout_ms: int = 1_500   # a member silent this long is suspected (FD_ALL timeout)
    merge_interval_ms: int = 1_000    # period of the view announcements and of the merge check (MERGE3)
    view_resend_ms: int = 250         # the coordinator resends a view not yet acknowledged this often
    info_max_age_ms: int = 2_500      # announcements older than this are not considered by the merge check
    join_timeout_ms: int = 60_000     # a member never heard is suspected after this long (it has not joined yet)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"membership config: {f.name} must be a positive integer, got {value!r}")
        if self.suspect_timeout_ms <= self.check_interval_ms:
            raise ConfigError(f"membership config: suspect_timeout_ms ({self.suspect_timeout_ms}) must exceed "
                              f"check_interval_ms ({self.check_interval_ms})")
        if self.join_timeout_ms < self.suspect_timeout_ms:
            raise ConfigError(f"membership config: join_timeout_ms ({self.join_timeout_ms}) must be at least "
                              f"suspect_timeout_ms ({self.suspect_timeout_ms})")
