"""The report's plots, drawn with matplotlib's object API (no pyplot state) and returned as base64 PNG text.

Plots: delivery rate over time per node with fault periods shaded and instant faults (inject, restart) and
heals marked as lines, the latency distribution with its percentiles, retransmissions over time, and the
sender x receiver delivery heat map.
"""
from __future__ import annotations

import base64
import io

from node.errors import EnvironmentProblem
from pipeline.report_data import PlotData

try:
    from matplotlib.figure import Figure
except ImportError as exc:  # matplotlib is an optional dependency of the report only
    raise EnvironmentProblem("the HTML report needs matplotlib, which is not installed",
                             hint="pip install matplotlib") from exc

WIDTH_IN = 9.0
HEIGHT_IN = 3.6
DPI = 100
FAULT_COLOURS = {"partition": "#d62728", "kill": "#7f7f7f", "pause": "#8c564b", "slow": "#ff7f0e",
                 "flaky": "#bcbd22", "shape": "#e377c2", "msg_fault": "#9467bd", "inject": "#17becf",
                 "restart": "#393b79"}


# the margins of the fixed-size plots, as fractions of the figure (room for the tick labels and the axis labels):
# drawn with these, not fitted (`bbox_inches="tight"` draws a figure twice, 0.2 of the report's 0.6 s of plots)
MARGINS = {"left": 0.1, "right": 0.985, "bottom": 0.14, "top": 0.92}


def _png(fig: Figure, fitted: bool = False) -> str:
    """The figure as base64 PNG text; `fitted`: cropped to what was drawn (a figure whose labels vary in size)."""
    buf = io.BytesIO()
    if fitted:
        fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    else:
        fig.subplots_adjust(**MARGINS)
        fig.savefig(buf, format="png", dpi=DPI)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _shade_faults(ax, data: PlotData) -> None:
    labelled: set[str] = set()
    for period in data.faults:
        colour = FAULT_COLOURS.get(period.kind, "#aaaaaa")
        label = f"fault: {period.kind}" if period.kind not in labelled else None
        labelled.add(period.kind)
        if period.instant:  # inject, restart: a moment, not a state the run stays in
            ax.axvline(period.start_ts - data.t0_ts, color=colour, linestyle=":", linewidth=1.5, label=label)
        else:
            ax.axvspan(period.start_ts - data.t0_ts, period.end_ts - data.t0_ts, color=colour, alpha=0.15,
                       label=label)
    for i, heal_ts in enumerate(data.heals_ts):
        ax.axvline(heal_ts - data.t0_ts, color="#2ca02c", linestyle="--", linewidth=1,
                   label="heal" if i == 0 else None)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#777777")


def _rate_plot(data: PlotData, series: dict[str, list[tuple[float, float]]], title: str, ylabel: str) -> str:
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN))
    ax = fig.add_subplot()
    for node in sorted(series):
        points = series[node]
        ax.step([p[0] for p in points], [p[1] for p in points], where="post", label=node, linewidth=1.2,
                alpha=0.85)
    if not series:
        _empty(ax, "no events")
    _shade_faults(ax, data)
    ax.set_title(title)
    ax.set_xlabel(f"time since first event (s); buckets of {data.bucket_s:g} s")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if series or data.faults or data.heals_ts:
        ax.legend(loc="upper right", fontsize="small", ncol=2)
    return _png(fig)


def delivery_rate(data: PlotData) -> str:
    return _rate_plot(data, data.deliveries, "Delivery rate per receiving node", "deliveries / s")


def retransmissions(data: PlotData) -> str:
    series = {f"{node} xmit req": points for node, points in data.xmit_requests.items()}
    series.update({f"{node} resent": points for node, points in data.resent.items()})
    return _rate_plot(data, series, "Retransmission requests and resent messages per node", "events / s")


def latency_distribution(data: PlotData) -> str:
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN))
    ax = fig.add_subplot()
    hist = data.latency_histogram
    if hist:
        xs = [h[0] for h in hist]
        width = xs[1] - xs[0] if len(xs) > 1 else 1.0
        ax.bar(xs, [h[1] for h in hist], width=width, align="edge", color="#1f77b4", alpha=0.8)
        marked = [(key, colour, data.latency_percentiles.get(key))
                  for key, colour in (("p50_ms", "#2ca02c"), ("p95_ms", "#ff7f0e"), ("p99_ms", "#d62728"))]
        for key, colour, value in marked:
            if value is not None:
                ax.axvline(value, color=colour, linestyle="--", label=f"{key[:-3]} {value:.1f} ms")
        if any(value is not None for _, _, value in marked):
            ax.legend(loc="upper right", fontsize="small")
    else:
        _empty(ax, "no deliveries")
    ax.set_title("Send -> deliver latency")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("deliveries")
    ax.grid(alpha=0.3)
    return _png(fig)


def delivery_heatmap(data: PlotData) -> str:
    names = sorted({p["sender"] for p in data.pairs} | {p["receiver"] for p in data.pairs} | set(data.nodes))
    index = {n: i for i, n in enumerate(names)}
    size = max(len(names), 1)
    fig = Figure(figsize=(min(2 + 0.8 * size, WIDTH_IN), min(1.5 + 0.7 * size, WIDTH_IN)))
    ax = fig.add_subplot()
    matrix = [[float("nan")] * size for _ in range(size)]
    for p in data.pairs:
        if p["expected"]:
            matrix[index[p["sender"]]][index[p["receiver"]]] = p["delivered"] / p["expected"]
    image = ax.imshow(matrix, cmap="RdYlGn", vmin=0.0, vmax=1.0)
    for p in data.pairs:
        ax.text(index[p["receiver"]], index[p["sender"]], f"{p['delivered']}/{p['expected']}", ha="center",
                va="center", fontsize="small")
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("receiver")
    ax.set_ylabel("sender")
    ax.set_title("Delivered / expected")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return _png(fig, fitted=True)  # its size and its labels follow the nodes' names


def all_plots(data: PlotData) -> dict[str, str]:
    """Title -> base64 PNG, in report order."""
    return {
        "Delivery rate over time": delivery_rate(data),
        "Latency distribution": latency_distribution(data),
        "Retransmissions over time": retransmissions(data),
        "Delivery heat map (sender x receiver)": delivery_heatmap(data),
    }
