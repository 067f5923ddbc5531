"""Group membership (issue 4): views installed by the coordinator, FD_ALL-style suspicion from heartbeats, and
MERGE3-style merging of subgroups after partitions heal. Sans-IO.

- `Membership` (gms.py): the stack layer (claims `ViewMsg`, `ViewAck`, `ViewInfo`); installs views with the
  `node.core.InstallView` effect, which the stack hands to every layer. Registered here as the `membership`
  slot's `gms` (node.layers; `none` leaves the slot empty).
- `FailureDetector` (detector.py): suspicion from the liveness layer's heartbeat record.
- `View`, `merged_view`, ... (views.py): views and the pure decisions about them.
- `MembershipConfig` (config.py): timeouts.

`make_membership(local, members, config, liveness)` builds the layer on a `node.liveness.Liveness` that runs in
the same stack (the layer reads its record; the heartbeats stay the liveness layer's).
"""
from __future__ import annotations

from typing import Iterable

from node.layers import register_layer
from node.liveness import Liveness
from node.membership.config import MembershipConfig
from node.membership.detector import FailureDetector
from node.membership.gms import Membership
from node.membership.views import View, acting_coordinator, merged_view

register_layer("membership", "gms")(Membership)

__all__ = ["FailureDetector", "Membership", "MembershipConfig", "View", "acting_coordinator", "make_membership",
           "merged_view"]


def make_membership(local: str, members: Iterable[str], config: MembershipConfig | None,
                    liveness: Liveness) -> Membership:
    """The membership layer of `local` among `members` (join order). Raises ConfigError if local is not one."""
    return Membership(local, members, config if config is not None else MembershipConfig(), liveness)
