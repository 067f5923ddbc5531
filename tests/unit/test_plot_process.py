"""The analysis service's plot process (pipeline.plot_process): it draws the same plots as this process does,
a process that died is replaced (found dead before a draw or dying in one: the draw is made in a new process; its
second process dead too: an EnvironmentProblem, and the next draw succeeds), and close() leaves no process behind
(a killed service's: tests/unit/test_analysis_service.py)."""
from __future__ import annotations

import os
import signal

import pytest

from node.errors import EnvironmentProblem
from pipeline.plot_process import PlotProcess, draw_plots
from pipeline.report_data import FaultPeriod, PlotData
from pipeline.standalone import alive

pytest.importorskip("pipeline.plots", reason="the report's plots need matplotlib")

T0 = 1_700_000_000.0
DATA = PlotData(t0_ts=T0, bucket_s=1.0, nodes=["n1", "n2"],
                deliveries={"n1": [(0.0, 5.0), (1.0, 7.0)], "n2": [(0.0, 2.0), (1.0, 0.0)]},
                faults=[FaultPeriod("p1", "partition", T0 + 0.2, T0 + 0.8, {})], heals_ts=[T0 + 0.8],
                latency_histogram=[(1.0, 3.0), (2.0, 1.0)], latency_percentiles={"p50_ms": 1.0},
                pairs=[{"sender": "n1", "receiver": "n2", "expected": 4, "delivered": 3}])


@pytest.fixture
def plotter():
    made = PlotProcess()
    try:
        yield made
    finally:
        made.close()


def test_the_process_draws_what_this_one_draws_in_another_process(plotter):
    images = plotter.draw(DATA)()
    assert images == draw_plots(DATA)
    assert len(images) == 4 and all(images.values())
    assert plotter.pid() != os.getpid()


def test_a_process_found_dead_is_replaced_and_the_draw_succeeds(plotter):
    first = plotter.pid()
    assert first > 1  # (a pid of 0 would signal our own process group)
    os.kill(first, signal.SIGKILL)
    while alive(first):
        os.sched_yield()
    assert plotter.draw(DATA)() == draw_plots(DATA)
    assert plotter.pid() not in (first, os.getpid())


def test_a_process_dead_during_a_draw_draws_again_in_a_new_one(plotter):
    first = plotter.pid()
    assert first > 1  # (a pid of 0 would signal our own process group)
    pending = plotter.draw(DATA)
    os.kill(first, signal.SIGKILL)
    assert pending() == draw_plots(DATA)
    assert plotter.pid() not in (first, os.getpid())


def test_a_draw_whose_second_process_dies_too_is_an_environment_problem_and_the_next_draws(plotter):
    with pytest.raises(EnvironmentProblem, match="plot process ended twice"):
        plotter._submit(os._exit, 1)()  # every process it runs in ends at once
    assert plotter.draw(DATA)() == draw_plots(DATA)


def test_close_ends_the_process(plotter):
    pid = plotter.pid()
    plotter.close()
    assert not alive(pid)
