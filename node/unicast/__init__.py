"""Reliable unicast (issue 3): sans-IO variants of the stack's `unicast` slot (node.layers), chosen by name.

- `unicast3`: the fix (conn_ids, CLOSING with conn_close_timeout, SYNC / SYNC-OK / SYNC-ACK, admin sync).
- `unicast2`: the seed's design (immediate close on a view change, first flag, SEND_FIRST_SEQNO, the ack of
  discarded messages that strands scenario #6, STABLE without protection: JGRP-1873).
- `unicast1`: no connection ids (the seed's motivation failure).
- `noretx` (noretx.py): the README's extension example, unicast3 that never retransmits.

The three shipped variants are registered here (`VARIANTS`, the ones the unit suites hold to the protocol's
promises); any other module of this package registers itself with `@register_layer("unicast", NAME)` and is
found by `node.layers`. `make_unicast(variant, local, config, members=None)` builds any registered one; each is
a `node.core.Protocol` and a `node.stack.Stack` layer (it claims every unicast message type, 16-47) with
`state(now_s)` for the control API.
"""
from __future__ import annotations

from typing import Iterable

from node.layers import layer_class, register_layer
from node.unicast.base import MAX_PAYLOAD_BYTES, TIMER_KEY, UnicastBase
from node.unicast.config import UnicastConfig
from node.unicast.unicast1 import Unicast1
from node.unicast.unicast2 import Unicast2
from node.unicast.unicast3 import Unicast3

VARIANTS: dict[str, type[UnicastBase]] = {"unicast3": Unicast3, "unicast2": Unicast2, "unicast1": Unicast1}
for _name, _cls in VARIANTS.items():
    register_layer("unicast", _name)(_cls)

__all__ = ["MAX_PAYLOAD_BYTES", "TIMER_KEY", "VARIANTS", "Unicast1", "Unicast2", "Unicast3", "UnicastBase",
           "UnicastConfig", "make_unicast"]


def make_unicast(variant: str, local: str, config: UnicastConfig | None = None,
                 members: Iterable[str] | None = None) -> UnicastBase:
    """The registered unicast layer `variant` for member `local`; `members` is the initial membership (None:
    unknown, every peer counts as a member until a view arrives). Raises ConfigError for an unknown variant."""
    return layer_class("unicast", variant)(local, config if config is not None else UnicastConfig(), members)
