"""`splitlab top`: the nodes' live metrics and the run's fault matrix in the terminal, refreshed every second.

A `Frame` is what one refresh saw: every node's `/metrics` (chaos.live.nodes) and the fault matrix
(chaos.live.faultmatrix), read at one moment. `render(frame)` draws it (pure: the unit tests call it on made-up
frames); `watch` redraws a frame every `period_s` in a rich `Live` until Ctrl-C, `--once` prints one. The nodes
are looked up again every few seconds, so a restarted node (a new container address) is followed; a node that does
not answer, metrics that do not parse, or a run whose containers went are shown as such.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from chaos.cluster import lifecycle
from chaos.cluster.model import Cluster
from chaos.faults.grudge import EVERY_LINK
from chaos.live.faultmatrix import FaultLink, Matrix, read_matrix
from chaos.live.nodes import NodeMetrics, scrape_cluster
from node.errors import SplitlabError

PERIOD_S = 1.0
RELOAD_S = 5.0
NODE_COLUMNS = ("node", "incarnation", "view", "hears", "app sent", "delivered", "retx asked", "retx sent",
                "drops", "window fill", "status")
FAULT_COLUMNS = ("fault", "kind", "link", "detail", "since", "verified")


@dataclass
class Frame:
    """What one refresh saw."""

    run_id: str
    at_ts: float
    nodes: list[NodeMetrics] = field(default_factory=list)
    matrix: Matrix = field(default_factory=Matrix)
    problem: str | None = None  # the run itself could not be looked up (its last known nodes are shown)


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _sum(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _view(m: NodeMetrics) -> str:
    view = m.first("splitlab_node_view_id")
    if view is None:
        return "-"
    members = m.total("splitlab_node_view_members")
    return f"{view[0].get('coordinator', '?')}#{view[1]:.0f} ({_count(members)})"


def _hears(m: NodeMetrics) -> str:
    heard = m.by_label("splitlab_node_peer_heard", "peer")
    if not heard:
        return "-"
    return f"{sum(1 for v in heard.values() if v >= 1)}/{len(heard)}"


def _drops(m: NodeMetrics) -> str:
    reasons: dict[str, float] = {}
    for name in ("splitlab_node_dropped_datagrams_total", "splitlab_unicast_dropped_messages_total",
                 "splitlab_multicast_dropped_messages_total"):
        for reason, value in m.by_label(name, "reason").items():
            reasons[reason] = reasons.get(reason, 0.0) + value
    total = sum(reasons.values())
    if not total:
        return "0" if reasons or m.samples else "-"
    worst = max(reasons, key=lambda r: reasons[r])
    return f"{total:,.0f} ({worst} {reasons[worst]:,.0f})"


def _window_fill(m: NodeMetrics) -> Text:
    """The fullest send window, in percent of its capacity (red while a window blocks its sender)."""
    fills = []
    for layer, key in (("unicast", "peer"), ("multicast", "")):
        unacked = m.by_label(f"splitlab_{layer}_send_window_unacked_messages", key)
        capacity = m.by_label(f"splitlab_{layer}_send_window_capacity_messages", key)
        fills += [100.0 * unacked[k] / capacity[k] for k in unacked if capacity.get(k)]
    blocked = _sum(m.total("splitlab_unicast_send_window_blocked"), m.total("splitlab_multicast_send_window_blocked"))
    if not fills:
        return Text("-")
    return Text(f"{max(fills):.1f} %", style="bold red" if blocked else "")


def node_row(m: NodeMetrics) -> list[RenderableType]:
    """One node's cells, in `NODE_COLUMNS` order."""
    if m.error is not None:
        return [m.node, *["-"] * (len(NODE_COLUMNS) - 2), Text(m.error, style="red")]
    incarnation = m.total("splitlab_node_incarnation")
    return [
        m.node, "-" if incarnation is None else f"{incarnation:.0f}", _view(m), _hears(m),
        _count(m.total("splitlab_node_app_sent_messages_total")),
        _count(m.total("splitlab_node_app_delivered_messages_total")),
        _count(m.total("splitlab_unicast_xmit_requests_sent_total", "splitlab_multicast_xmit_requests_sent_total")),
        _count(m.total("splitlab_unicast_retransmitted_messages_total",
                       "splitlab_multicast_retransmitted_messages_total")),
        _drops(m), _window_fill(m), Text("ok", style="green"),
    ]


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def fault_row(link: FaultLink, now_ts: float) -> list[RenderableType]:
    """One link of one fault, in `FAULT_COLUMNS` order."""
    where = f"{link.src} (node)" if link.dst == EVERY_LINK else f"{link.src} -> {link.dst}"
    since = f"{datetime.fromtimestamp(link.since_ts):%H:%M:%S} ({_ago(now_ts - link.since_ts)})"
    verified = (Text(f"yes (+{(link.effective_ts - link.since_ts) * 1000:.0f} ms)", style="green")
                if link.verified else Text("no", style="yellow"))
    return [link.fault_id, link.kind, where, link.detail, since, verified]


def render(frame: Frame) -> RenderableType:
    """The frame: a title, the nodes' table, the fault matrix and what could not be read."""
    title = Text(f"splitlab top  run {frame.run_id}  {datetime.fromtimestamp(frame.at_ts):%H:%M:%S}  "
                 "(Ctrl-C quits)", style="bold")
    nodes = Table(title="nodes", title_justify="left")
    for column in NODE_COLUMNS:
        nodes.add_column(column, justify="right" if column not in ("node", "view", "drops", "status") else "left")
    for m in frame.nodes:
        nodes.add_row(*node_row(m))
    parts: list[RenderableType] = [title, nodes]
    if frame.matrix.links:
        faults = Table(title="fault matrix", title_justify="left")
        for column in FAULT_COLUMNS:
            faults.add_column(column)
        for link in frame.matrix.links:
            faults.add_row(*fault_row(link, frame.at_ts))
        parts.append(faults)
    else:
        parts.append(Text("fault matrix: no fault in force"))
    for problem in ([frame.problem] if frame.problem else []) + frame.matrix.problems:
        parts.append(Text(f"! {problem}", style="yellow"))
    return Group(*parts)


class Watcher:
    """Takes frames of one run, looking its nodes up again every `reload_s` (a restarted node has a new
    address; on many hosts a lookup is an SSH round to each host, too much for every second)."""

    def __init__(self, run_id: str, load: Callable[[str], Cluster] = lifecycle.load,
                 scrape: Callable[[Cluster], list[NodeMetrics]] = scrape_cluster, reload_s: float = RELOAD_S) -> None:
        self.run_id = run_id
        self._load = load
        self._scrape = scrape
        self.reload_s = reload_s
        self.cluster = load(run_id)  # the first lookup must work: a run that is not there is bad input
        self._loaded_at = time.monotonic()
        self._problem: str | None = None

    def frame(self) -> Frame:
        if time.monotonic() - self._loaded_at >= self.reload_s:
            self._loaded_at = time.monotonic()
            try:
                self.cluster = self._load(self.run_id)
                self._problem = None
            except SplitlabError as exc:
                self._problem = f"run {self.run_id}: {exc.message.splitlines()[0]} (its last known nodes are shown)"
        problem = self._problem
        return Frame(self.run_id, time.time(), self._scrape(self.cluster), read_matrix(self.cluster.run_dir),
                     problem)


def watch(watcher: Watcher, console: Console, *, once: bool = False, period_s: float = PERIOD_S) -> int:
    """Draw frames of `watcher` every `period_s` until Ctrl-C (0), or one frame with `once`."""
    if once:
        console.print(render(watcher.frame()))
        return 0
    try:
        with Live(render(watcher.frame()), console=console, auto_refresh=False, screen=False) as live:
            next_at = time.monotonic() + period_s
            while True:
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at = max(next_at + period_s, time.monotonic())
                live.update(render(watcher.frame()), refresh=True)
    except KeyboardInterrupt:
        return 0
