"""Reliable multicast (issue 4): NAKACK4 over fixed ring buffers with a blocking sender, and the TIPC-style
broadcast-link start sync (`bcast_sync`: `tipc`, the fix, or `legacy`, the race). Sans-IO.

- `Nakack4` (nakack4.py): the stack layer (claims the multicast type range 48-79) with `state(now_s)`,
  registered here as the `multicast` slot's `nakack4` (node.layers; `none` leaves the slot empty). Another
  multicast layer is one more module of this package with `@register_layer("multicast", NAME)`.
- `Nakack4Config` (config.py), `WindowFull` / `SenderClosed` (errors.py).
- ring.py (ring buffers and windows), receiver.py, sender.py, sync.py, bounds.py (the per-field checks of
  every wire message and the drop vocabulary): the parts.
- sim.py: ready-made simulations of members with membership and multicast.
"""
from __future__ import annotations

from node.layers import register_layer
from node.multicast.config import SYNC_MODES, Nakack4Config
from node.multicast.errors import SenderClosed, WindowFull
from node.multicast.nakack4 import MAX_PAYLOAD_BYTES, Nakack4

register_layer("multicast", "nakack4")(Nakack4)

__all__ = ["MAX_PAYLOAD_BYTES", "Nakack4", "Nakack4Config", "SYNC_MODES", "SenderClosed", "WindowFull"]

