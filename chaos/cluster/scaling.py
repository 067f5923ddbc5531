"""The failure detector's timing for a cluster's size, given to the nodes of `splitlab up` through their
environment: heartbeats and view announcements go to every member, so their cost grows with the square of the
cluster while the machine stays the same.

The node's defaults (heartbeats every 250 ms, suspicion after 1.5 s, announcements every 1 s) are kept up to 26
nodes. Above, every member still receives at most about `HEARD_PER_S` heartbeats and `INFOS_PER_S` announcements
a second, and the whole cluster at most `CLUSTER_HEARD_PER_S` and `CLUSTER_INFOS_PER_S` (what 50 members receive
at the member's rates): the heartbeat interval is the longer of `1000 / HEARD_PER_S` ms per peer and
`1000 / CLUSTER_HEARD_PER_S` ms per pair of members, suspicion comes after `SUSPECT_BEATS` heartbeats, the merge
announcements likewise (their age limit in proportion). At 50 nodes: heartbeats every 490 ms, suspicion after
1.96 s, announcements every 1 s; at 100: 1980 ms, 7.92 s and 3.96 s. (An idle cluster of 50 at the defaults kept
both cores of this machine busy and the last nodes took 14 s to start their Python process after their
container started; an idle 100 at the member's rates alone, heartbeats every 990 ms, kept both cores busy too:
1.9 % of a core per node, mostly the kernel's path of each datagram through bridges and VXLAN.)

A node whose environment (`node_env`) sets any of this timing keeps its own whole; scenarios (a few nodes) are
unchanged.
"""
from __future__ import annotations

from typing import Mapping

from node.config import NodeConfig
from node.membership.config import MembershipConfig

HEARD_PER_S = 100   # heartbeats a member receives per second, at most (above the defaults)
INFOS_PER_S = 50    # merge announcements a member receives per second, at most (above the defaults)
CLUSTER_HEARD_PER_S = 50 * HEARD_PER_S  # heartbeats the whole cluster receives per second, at most
CLUSTER_INFOS_PER_S = 50 * INFOS_PER_S  # merge announcements the whole cluster receives per second, at most
SUSPECT_BEATS = 4   # suspicion after this many heartbeat intervals of silence (the defaults: 6)
DEFAULT_HEARTBEAT_MS = NodeConfig.heartbeat_ms  # the node's own default (a dataclass field's class attribute)
_DEFAULTS = MembershipConfig()


def _interval_ms(nodes: int, member_per_s: int, cluster_per_s: int) -> int:
    """The interval at which every member sends to every other so that a member receives at most `member_per_s`
    a second and the cluster at most `cluster_per_s`."""
    peers = max(0, nodes - 1)
    return max(peers * 1000 // member_per_s, nodes * peers * 1000 // cluster_per_s)


def detector_env(nodes: int) -> dict[str, str]:
    """The environment a node of an `nodes`-node cluster gets for its timing: empty while the defaults serve."""
    heartbeat_ms = max(DEFAULT_HEARTBEAT_MS, _interval_ms(nodes, HEARD_PER_S, CLUSTER_HEARD_PER_S))
    suspect_ms = max(_DEFAULTS.suspect_timeout_ms, SUSPECT_BEATS * heartbeat_ms)
    merge_ms = max(_DEFAULTS.merge_interval_ms, _interval_ms(nodes, INFOS_PER_S, CLUSTER_INFOS_PER_S))
    info_age_ms = max(_DEFAULTS.info_max_age_ms, merge_ms * _DEFAULTS.info_max_age_ms // _DEFAULTS.merge_interval_ms)
    env: dict[str, str] = {}
    if heartbeat_ms != DEFAULT_HEARTBEAT_MS:
        env.update({"SPLITLAB_HEARTBEAT_MS": str(heartbeat_ms), "SPLITLAB_SILENCE_MS": str(suspect_ms),
                    "SPLITLAB_MEMBERSHIP_SUSPECT_TIMEOUT_MS": str(suspect_ms)})
    if merge_ms != _DEFAULTS.merge_interval_ms:
        env.update({"SPLITLAB_MEMBERSHIP_MERGE_INTERVAL_MS": str(merge_ms),
                    "SPLITLAB_MEMBERSHIP_INFO_MAX_AGE_MS": str(info_age_ms)})
    return env


def with_detector_timing(node_env: Mapping[str, Mapping[str, str]] | None,
                         names: list[str]) -> dict[str, dict[str, str]] | None:
    """`node_env` with `detector_env(len(names))` for every node that sets none of its timing itself (None
    stays None while the defaults serve)."""
    timing = detector_env(len(names))
    if not timing:
        return None if node_env is None else {n: dict(e) for n, e in node_env.items()}
    given = node_env or {}
    return {n: dict(given.get(n, {})) if timing.keys() & given.get(n, {}).keys() else {**timing, **given.get(n, {})}
            for n in names}
