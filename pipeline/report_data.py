"""The plain values the report draws, with no Spark in them: fault periods and the plots' data.

`pipeline.tables` and `pipeline.timeline` compute them in Spark; the plots (`pipeline.plots`, drawn in the
analysis service's plot process, `pipeline.plot_process`) and the message sequence diagram (`pipeline.sequence`)
only read them, so they import this module and not Spark.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INSTANT_FAULTS = ("inject", "restart")  # fault_start without a fault_end


@dataclass(frozen=True)
class FaultPeriod:
    """One fault from its start to its end (its `fault_end`, the next `heal`, or the end of the run); an instant
    (`inject`, `restart`) ends where it starts. `detail` is its `fault_start`'s, with what its `fault_end`
    added (a jammed partition's `jam`: held, released, dropped)."""

    fault_id: str
    kind: str
    start_ts: float
    end_ts: float
    detail: Any

    @property
    def instant(self) -> bool:
        return self.kind in INSTANT_FAULTS


@dataclass
class PlotData:
    """What the report draws: rates per node per bucket, fault periods, heals, a latency histogram, the matrix."""

    t0_ts: float
    bucket_s: float
    nodes: list[str]
    deliveries: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # node -> (t_s, per second)
    xmit_requests: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    resent: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    faults: list[FaultPeriod] = field(default_factory=list)
    heals_ts: list[float] = field(default_factory=list)
    latency_histogram: list[tuple[float, float]] = field(default_factory=list)  # (bin start ms, count)
    latency_percentiles: dict[str, Any] = field(default_factory=dict)
    pairs: list[dict[str, Any]] = field(default_factory=list)
