"""Fault periods in the report (pipeline.tables.periods_of, pipeline.plots): a fault lasts until its fault_end,
the next heal or the run's end; an instant fault (restart, inject) has no fault_end and ends where it starts, so
the plot draws it as a line, not as a shaded span reaching the next heal or the end of the run."""
from __future__ import annotations

import warnings

import pytest

from pipeline.report_data import PlotData
from pipeline.tables import periods_of

T0 = 1_700_000_000.0
END = T0 + 60


def _event(type_: str, at_s: float, fault_id: str | None = None, kind: str | None = None) -> dict:
    return {"type": type_, "fault_id": fault_id, "kind": kind, "detail": '{"node": "n2"}', "at_ts": T0 + at_s}


EVENTS = [
    _event("fault_start", 5, "p1", "partition"),
    _event("fault_start", 8, "k1", "kill"),
    _event("fault_end", 9, "k1", "kill"),
    _event("fault_start", 9.5, "r1", "restart"),  # the restart after the kill k1 (started again at 9)
    _event("fault_start", 12, "i1", "inject"),
    _event("heal", 20),
    _event("fault_start", 30, "s1", "slow"),  # never ended: lasts to the end of the run
    _event("fault_start", 40, "r2", "restart"),  # no heal after it: still an instant
]


def test_instants_end_where_they_start_and_spans_at_their_end():
    periods = {p.fault_id: p for p in periods_of(EVENTS, END)}
    assert {f: (p.start_ts - T0, p.end_ts - T0, p.instant) for f, p in periods.items()} == {
        "p1": (5, 20, False), "k1": (8, 9, False), "r1": (9.5, 9.5, True), "i1": (12, 12, True),
        "s1": (30, 60, False), "r2": (40, 40, True)}
    assert periods["r1"].detail == {"node": "n2"}
    assert [p.fault_id for p in periods_of(EVENTS, END)] == ["p1", "k1", "r1", "i1", "s1", "r2"]


def test_what_a_fault_end_adds_joins_its_start_detail():
    start = dict(_event("fault_start", 1, "j1", "partition"), detail='{"grudge": {"n2": ["n1"]}, "mode": "jam"}')
    end = dict(_event("fault_end", 4, "j1", "partition"), detail='{"jam": {"held": 9, "released": 7, "dropped": 2}}')
    plain = dict(_event("fault_end", 6, "p2", "partition"), detail=None)
    (jam, other) = periods_of([start, end, _event("fault_start", 5, "p2", "partition"), plain], END)
    assert jam.detail == {"grudge": {"n2": ["n1"]}, "mode": "jam", "jam": {"held": 9, "released": 7, "dropped": 2}}
    assert (jam.end_ts - T0, other.detail) == (4, {"node": "n2"})


def test_the_plot_draws_instants_as_lines_and_spans_as_shaded_areas():
    plots = pytest.importorskip("pipeline.plots", reason="the report's plots need matplotlib")
    from matplotlib.figure import Figure

    data = PlotData(t0_ts=T0, bucket_s=1.0, nodes=["n1", "n2"], faults=periods_of(EVENTS, END), heals_ts=[T0 + 20])
    ax = Figure().add_subplot()
    plots._shade_faults(ax, data)
    spans = sorted(tuple(round(x, 3) for x in (p.get_x(), p.get_x() + p.get_width())) for p in ax.patches)
    assert spans == [(5, 20), (8, 9), (30, 60)]
    assert sorted(float(line.get_xdata()[0]) for line in ax.lines) == [9.5, 12, 20, 40]
    labelled = sorted((float(line.get_xdata()[0]), line.get_label()) for line in ax.lines
                      if not line.get_label().startswith("_"))  # one legend entry per kind
    assert labelled == [(9.5, "fault: restart"), (12, "fault: inject"), (20, "heal")]


@pytest.mark.parametrize("percentiles", [{}, {"p50_ms": None, "p95_ms": None, "p99_ms": None}])
def test_a_latency_plot_without_percentiles_draws_quietly(percentiles):
    plots = pytest.importorskip("pipeline.plots", reason="the report's plots need matplotlib")
    data = PlotData(t0_ts=T0, bucket_s=1.0, nodes=["n1"], latency_histogram=[(1.0, 3.0), (2.0, 1.0)],
                    latency_percentiles=percentiles)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "No artists with labels found to put in legend" included
        assert plots.latency_distribution(data)


@pytest.mark.parametrize("draw", ["delivery_rate", "retransmissions", "latency_distribution"])
def test_a_fixed_size_plot_keeps_its_labels_inside_the_figure(draw, monkeypatch):
    """The rate and latency plots are drawn with fixed margins (`plots.MARGINS`), not fitted: with six-digit tick
    labels and a full legend nothing the figure draws may fall outside it."""
    plots = pytest.importorskip("pipeline.plots", reason="the report's plots need matplotlib")
    figures = []
    png = plots._png
    monkeypatch.setattr(plots, "_png", lambda fig, fitted=False: (figures.append(fig), png(fig, fitted))[1])
    series = {f"n{i}": [(t * 10.0, 999_999.0 * (t % 2)) for t in range(50)] for i in range(1, 9)}
    data = PlotData(t0_ts=T0, bucket_s=10.0, nodes=sorted(series), deliveries=series, xmit_requests=series,
                    resent=series, faults=periods_of(EVENTS, END), heals_ts=[T0 + 20],
                    latency_histogram=[(float(ms), 999_999.0) for ms in range(0, 200_000, 20_000)],
                    latency_percentiles={"p50_ms": 1.0, "p95_ms": 3.0, "p99_ms": 5.0})
    assert getattr(plots, draw)(data)
    (fig,) = figures
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    drawn = fig.get_tightbbox(FigureCanvasAgg(fig).get_renderer())
    inside = fig.bbox_inches
    assert (drawn.x0 >= inside.x0 and drawn.y0 >= inside.y0 and drawn.x1 <= inside.x1 and drawn.y1 <= inside.y1), \
        (draw, drawn, inside)
