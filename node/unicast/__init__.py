"""Reliable unicast (issue 3): three sans-IO variants behind one factory.

- `unicast3`: the fix (conn_ids, CLOSING with conn_close_timeout, SYNC / SYNC-OK / SYNC-ACK, admin sync).
- `unicast2`: the seed's design (immediate close on a view change, first flag, SEND_FIRST_SEQNO, the ack of
  discarded messages that strands scenario #6, STABLE without protection: JGRP-1873).
- `unicast1`: no connection ids (the seed's motivation failure).

`make_unicast(variant, local, config, members=None)` builds one; each is a `node.core.Protocol` and a
`node.stack.Stack` layer (it claims every unicast message type, 16-47) with `state(now_s)` for the control API.
"""
from __future__ import annotations

from typing import Iterable

from node.errors import ConfigError
from node.unicast.base import MAX_PAYLOAD_BYTES, TIMER_KEY, UnicastBase
from node.unicast.config import UnicastConfig
from node.unicast.unicast1 import Unicast1
from node.unicast.unicast2 import Unicast2
from node.unicast.unicast3 import Unicast3

VARIANTS: dict[str, type[UnicastBase]] = {"unicast3": Unicast3, "unicast2": Unicast2, "unicast1": Unicast1}

__all__ = ["MAX_PAYLOAD_BYTES", "TIMER_KEY", "VARIANTS", "Unicast1", "Unicast2", "Unicast3", "UnicastBase",
           "UnicastConfig", "make_unicast"]


def make_unicast(variant: str, local: str, config: UnicastConfig | None = None,
                 members: Iterable[str] | None = None) -> UnicastBase:
    """The unicast protocol `variant` for member `local`; `members` is the initial membership (None: unknown,
    every peer counts as a member until a view arrives). Raises ConfigError for an unknown variant."""
    cls = VARIANTS.get(variant)
    if cls is None:
        raise ConfigError(f"unknown unicast variant {variant!r}",
                          hint=f"valid variants: {', '.join(VARIANTS)}")
    return cls(local, config if config is not None else UnicastConfig(), members)
