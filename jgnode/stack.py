"""The JGroups 2.12 protocol stack of a node, as the configuration string `JChannel(String)` takes (pure).

UDP with IP multicast off (a partition rule that matches a receiver's address would not catch 228.x group
traffic) and bundling off (one message per datagram, so a message fault acts on one message), discovery by
TCPPING over the members' data addresses, then MERGE2, FD_ALL, VERIFY_SUSPECT, pbcast.NAKACK, the chosen unicast
protocol (UNICAST2 or UNICAST), pbcast.STABLE and pbcast.GMS. splitlab's trace protocol sits directly above UDP.
The defaults are JGroups' own except where a test bed of seconds needs shorter timings (failure detection within
about 3 s, merges every 2-4 s); every property can be set per scenario (`SPLITLAB_JGROUPS_PROPS`).
"""
from __future__ import annotations

from typing import Mapping

from node.errors import ConfigError

TRACE_PROTOCOL = "splitlab.SplitlabTrace"


def protocols(data_ip: str, port: int, member_ips: list[str], unicast: str) -> list[tuple[str, dict[str, str]]]:
    """The stack from the bottom up: (protocol, default properties)."""
    hosts = ",".join(f"{ip}[{port}]" for ip in member_ips)
    return [
        ("UDP", {"bind_addr": data_ip, "bind_port": str(port), "port_range": "1", "ip_mcast": "false",
                 "enable_bundling": "false", "enable_unicast_bundling": "false", "loopback": "true",
                 "enable_diagnostics": "false", "thread_pool.min_threads": "2", "thread_pool.max_threads": "8",
                 "oob_thread_pool.min_threads": "1", "oob_thread_pool.max_threads": "8"}),
        (TRACE_PROTOCOL, {}),
        ("TCPPING", {"initial_hosts": hosts, "port_range": "0", "timeout": "1000",
                     "num_initial_members": str(len(member_ips))}),
        ("MERGE2", {"min_interval": "2000", "max_interval": "4000"}),
        ("FD_ALL", {"interval": "500", "timeout": "3000"}),
        ("VERIFY_SUSPECT", {"timeout": "1000"}),
        ("pbcast.NAKACK", {"use_mcast_xmit": "false", "retransmit_timeout": "300,600,1200",
                           "discard_delivered_msgs": "true"}),
        (unicast, {}),
        ("pbcast.STABLE", {"desired_avg_gossip": "5000", "max_bytes": "400000"}),
        ("pbcast.GMS", {"join_timeout": "2000", "print_local_addr": "false", "view_bundling": "true"}),
    ]


def check_props(props: Mapping[str, Mapping[str, str]], unicast: str) -> None:
    """Raise ConfigError for a protocol `props` names that the stack with `unicast` does not have."""
    names = {name.rsplit(".", 1)[-1] for name, _ in protocols("0.0.0.0", 0, [], unicast)}
    unknown = sorted(set(p.rsplit(".", 1)[-1] for p in props) - names)
    if unknown:
        raise ConfigError(f"SPLITLAB_JGROUPS_PROPS names {', '.join(unknown)}, which the stack does not have",
                          hint=f"the stack with {unicast}: {', '.join(sorted(names))}")


def config_string(data_ip: str, port: int, member_ips: list[str], unicast: str,
                  props: Mapping[str, Mapping[str, str]]) -> str:
    """The `JChannel` configuration: the default stack with `props` over its properties. Raises ConfigError for
    a protocol `props` names that the stack does not have."""
    check_props(props, unicast)
    stack = protocols(data_ip, port, member_ips, unicast)
    layers = []
    for name, defaults in stack:
        merged = {**defaults, **props.get(name.rsplit(".", 1)[-1], {})}
        body = ";".join(f"{k}={v}" for k, v in merged.items())
        layers.append(f"{name}({body})" if body else name)
    return ":".join(layers)
