"""The node's `GET /metrics`: its `/state`, read at scrape time, as Prometheus metric families.

Nothing is counted for this: `NodeCollector` calls the runtime's `state()` (the counters the driver and the layers
keep anyway) when a scraper asks, and maps it to families; the hot path does no extra work. Served by the control
API (node/control.py) in the Prometheus text format through `prometheus_client`, with the process collector's
`process_*` families beside.

Families (counters end in `_total`; a label names where one exists):
- node: `splitlab_node_info{node,run,unicast,membership,multicast}`, `splitlab_node_incarnation` (the boot
  time in unix ms that every datagram carries), `splitlab_node_view_id{coordinator}` (the view's number) and
  `splitlab_node_view_members`, `splitlab_node_peer_heard{peer}`, datagrams and protocol messages sent and
  received, application messages sent (`{kind}`, the workloads) and delivered, datagrams dropped `{reason}`
  (the codec's and the gate's reasons, `before-start`), and every other counter of the node as
  `splitlab_node_counter_total{name}`;
- unicast, per `peer`: messages sent, retransmitted, delivered, retransmissions asked (XMIT_REQs sent), messages
  dropped `{reason}` (duplicate, below_window, outside_window), the send window's unacked messages and capacity
  (its fill), whether it blocks, the receive window's buffered and missing messages;
- multicast: messages sent and retransmitted, the send window's unacked messages and capacity, whether it blocks;
  per `sender`: delivered, retransmissions asked, dropped `{reason}`, buffered, missing;
- every layer's own counters as `splitlab_layer_counter_total{layer,name}`.

A counter kept per connection starts again from 0 when its connection is removed (a close, a restarted peer):
Prometheus reads that as a counter reset.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

PREFIX = "splitlab"
SLOTS = ("unicast", "membership", "multicast")
WINDOW_DROPS = ("duplicate", "below_window", "outside_window")  # window results that drop a message
# node counters with a family of their own (the rest become splitlab_node_counter_total{name})
_NODE_MAPPED = {"datagrams_sent", "datagrams_received", "messages_sent", "messages_received", "delivered",
                "received_before_start"}

State = Mapping[str, Any]


def _counter(name: str, doc: str, labels: Iterable[str] = ()) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels))


def _gauge(name: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels))


def node_families(state: State) -> list[Metric]:
    """The node-wide families of one `/state`."""
    layers = state.get("layers") or {}
    counters = state.get("counters") or {}
    info = InfoMetricFamily(f"{PREFIX}_node", "who the node is and which layer fills each slot of its stack")
    info.add_metric([], {"node": str(state.get("node", "")), "run": str(state.get("run", "")),
                         **{slot: str((layers.get(slot) or {}).get("proto", "none")) for slot in SLOTS}})
    incarnation = _gauge("node_incarnation", "the node's incarnation: its boot time in unix ms, in every datagram")
    incarnation.add_metric([], float(state.get("boot") or 0))
    view_id = _gauge("node_view_id", "the number of the installed view, labelled with its coordinator",
                     ["coordinator"])
    view_members = _gauge("node_view_members", "members in the installed view")
    view = state.get("view")
    if view:
        coordinator, number = view["view_id"]
        view_id.add_metric([str(coordinator)], float(number))
        view_members.add_metric([], float(len(view["members"])))
    heard = _gauge("node_peer_heard", "1 while the liveness layer hears the peer, else 0", ["peer"])
    for peer, rec in sorted((layers.get("liveness") or {}).items()):
        heard.add_metric([peer], 1.0 if rec.get("heard") else 0.0)
    families: list[Metric] = [info, incarnation, view_id, view_members, heard]
    for what, unit in (("datagrams", "UDP datagrams"), ("messages", "protocol messages (bundled in datagrams)")):
        for way in ("sent", "received"):
            family = _counter(f"node_{what}_{way}", f"{unit} {way}")
            family.add_metric([], float(counters.get(f"{what}_{way}", 0)))
            families.append(family)
    app_sent = _counter("node_app_sent_messages", "application messages sent by the node's workloads", ["kind"])
    by_kind: Counter[str] = Counter()
    for item in state.get("workloads") or ():
        by_kind[str(item.get("kind"))] += int(item.get("sent") or 0)
    for kind, count in sorted(by_kind.items()):
        app_sent.add_metric([kind], float(count))
    delivered = _counter("node_app_delivered_messages", "messages delivered to the application (every layer)")
    delivered.add_metric([], float(counters.get("delivered", 0)))
    dropped = _counter("node_dropped_datagrams", "datagrams dropped before any layer, by reason", ["reason"])
    drops = dict(state.get("dropped") or {})
    if counters.get("received_before_start"):
        drops["before-start"] = counters["received_before_start"]
    for reason, count in sorted(drops.items()):
        dropped.add_metric([reason], float(count))
    other = _counter("node_counter", "the node's other counters, by name", ["name"])
    for name, count in sorted(counters.items()):
        if name not in _NODE_MAPPED:
            other.add_metric([name], float(count))
    return families + [app_sent, delivered, dropped, other]


def _receive_windows(proto: str, label: str, windows: Iterable[tuple[str, State]]) -> list[Metric]:
    """Per `label` (the peer or sender a receive window takes from): delivered, retransmissions asked, drops by
    reason, buffered and missing messages of `proto`'s receive windows."""
    whose = f"the {label}"
    delivered = _counter(f"{proto}_delivered_messages", f"messages from {whose} delivered", [label])
    asked = _counter(f"{proto}_xmit_requests_sent", f"retransmission requests (XMIT_REQ) sent to {whose}", [label])
    dropped = _counter(f"{proto}_dropped_messages", f"messages from {whose} dropped by the window, by reason",
                       [label, "reason"])
    buffered = _gauge(f"{proto}_receive_window_buffered_messages", "messages received behind a gap", [label])
    missing = _gauge(f"{proto}_receive_window_missing_messages", "seqnos missing below the highest received",
                     [label])
    for key, window in windows:
        c = window.get("counters") or {}
        delivered.add_metric([key], float(c.get("delivered", 0)))
        asked.add_metric([key], float(c.get("xmit_reqs", 0)))
        for reason in WINDOW_DROPS:
            dropped.add_metric([key, reason], float(c.get(reason, 0)))
        buffered.add_metric([key], float(window.get("buffered", 0)))
        missing.add_metric([key], float(window.get("missing", 0)))
    return [delivered, asked, dropped, buffered, missing]


def unicast_families(layer: State) -> list[Metric]:
    """The unicast layer's families: per peer, its send and receive connection."""
    sent = _counter("unicast_sent_messages", "DATA messages sent (first transmissions)", ["peer"])
    resent = _counter("unicast_retransmitted_messages", "DATA messages sent again (retransmissions)", ["peer"])
    unacked = _gauge("unicast_send_window_unacked_messages", "messages in the send window, not yet acked", ["peer"])
    capacity = _gauge("unicast_send_window_capacity_messages", "the send window's capacity", ["peer"])
    blocked = _gauge("unicast_send_window_blocked", "1 while the send window is full and sends wait", ["peer"])
    peers = sorted((layer.get("peers") or {}).items())
    for peer, entries in peers:
        send = entries.get("send")
        if send:
            c = send.get("counters") or {}
            sent.add_metric([peer], float(c.get("sent", 0)))
            resent.add_metric([peer], float(c.get("resent", 0)))
            unacked.add_metric([peer], float(send.get("unacked", 0)))
            capacity.add_metric([peer], float(send.get("capacity", 0)))
            blocked.add_metric([peer], 1.0 if send.get("blocked") else 0.0)
    receiving = _receive_windows("unicast", "peer", ((p, e["recv"]) for p, e in peers if e.get("recv")))
    return [sent, resent, unacked, capacity, blocked, *receiving]


def multicast_families(layer: State) -> list[Metric]:
    """The multicast layer's families: its send window, and per sender its receive window."""
    counters = layer.get("counters") or {}
    send = layer.get("send") or {}
    families: list[Metric] = []
    for name, doc, value in (
            ("multicast_sent_messages", "multicasts sent (first transmissions)", counters.get("sent", 0)),
            ("multicast_retransmitted_messages", "multicasts sent again (retransmissions)", counters.get("resent", 0))):
        family = _counter(name, doc)
        family.add_metric([], float(value))
        families.append(family)
    for name, doc, value in (
            ("multicast_send_window_unacked_messages", "multicasts not yet acked by every receiver",
             send.get("unacked", 0)),
            ("multicast_send_window_capacity_messages", "the send window's capacity", send.get("capacity", 0)),
            ("multicast_send_window_blocked", "1 while the send window is full and senders wait",
             1 if send.get("blocked") else 0)):
        family = _gauge(name, doc)
        family.add_metric([], float(value))
        families.append(family)
    return families + _receive_windows("multicast", "sender", sorted((layer.get("windows") or {}).items()))


def layer_counter_family(layers: State) -> Metric:
    """Every layer's own (layer-wide) counters, by layer and name."""
    family = _counter("layer_counter", "a layer's own counters, by layer and name", ["layer", "name"])
    for layer_name, layer in sorted(layers.items()):
        counters = layer.get("counters") if isinstance(layer, Mapping) else None
        if isinstance(counters, Mapping):
            for name, count in sorted(counters.items()):
                family.add_metric([layer_name, name], float(count))
    return family


def families(state: State) -> list[Metric]:
    """Every splitlab family of one node `/state` (see the module docstring)."""
    layers = state.get("layers") or {}
    out = node_families(state)
    if "unicast" in layers:
        out += unicast_families(layers["unicast"])
    if "multicast" in layers:
        out += multicast_families(layers["multicast"])
    out.append(layer_counter_family(layers))
    return out


class NodeCollector:
    """A `prometheus_client` collector of the node's state, read from `state()` at every scrape."""

    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        yield from families(self._state())


def registry(state: Callable[[], State]) -> CollectorRegistry:
    """A registry with the node's families and the process collector (`process_*`: CPU, memory, start time)."""
    reg = CollectorRegistry()
    reg.register(NodeCollector(state))
    ProcessCollector(registry=reg)
    return reg


def exposition(reg: CollectorRegistry) -> tuple[bytes, str]:
    """The registry in the Prometheus text format, and its content type."""
    return generate_latest(reg), CONTENT_TYPE_LATEST
