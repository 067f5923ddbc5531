"""Reliable multicast (issue 4): NAKACK4 over fixed ring buffers with a blocking sender, and the TIPC-style
broadcast-link start sync (`bcast_sync`: `tipc`, the fix, or `legacy`, the race). Sans-IO.

- `Nakack4` (nakack4.py): the stack layer (claims the multicast type range 48-79) with `state(now_s)`.
- `Nakack4Config` (config.py), `WindowFull` / `SenderClosed` (errors.py).
- ring.py (ring buffers and windows), receiver.py, sender.py, sync.py, bounds.py (the per-field checks of
  every wire message and the drop vocabulary): the parts.
- sim.py: ready-made simulations of members with membership and multicast.

`make_multicast(variant, local, config, members, bcast_sync)` builds the layer (`variant`: nakack4).
"""
from __future__ import annotations

from typing import Iterable

from node.errors import ConfigError
from node.multicast.config import SYNC_MODES, Nakack4Config
from node.multicast.errors import SenderClosed, WindowFull
from node.multicast.nakack4 import MAX_PAYLOAD_BYTES, Nakack4

VARIANTS = ("nakack4", "none")

__all__ = ["MAX_PAYLOAD_BYTES", "Nakack4", "Nakack4Config", "SYNC_MODES", "SenderClosed", "VARIANTS",
           "WindowFull", "make_multicast"]


def make_multicast(variant: str, local: str, config: Nakack4Config | None = None,
                   members: Iterable[str] | None = None, bcast_sync: str = "tipc") -> Nakack4:
    """The multicast layer `variant` for `local` with the initial view `members`. Raises ConfigError."""
    if variant != "nakack4":
        raise ConfigError(f"unknown multicast variant {variant!r}", hint="valid: nakack4 (or none: no layer)")
    return Nakack4(local, config if config is not None else Nakack4Config(), members, bcast_sync)
