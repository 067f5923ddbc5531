"""The message sequence diagram of an analysed run: its window's events read with Spark, then `pipeline.sequence`.

The window is the one asked for (`DiagramOptions.window_s`) or the default one around the first finding. The
protocol events from `MATCH_MARGIN_S` before it to as long after it come to the driver, at most
`MAX_READ_EVENTS` of them (the nearest to the window's anchor; the diagram says how many more there were), with
every `view` event up to its end and each node's data address (for the capture, read when the run has one).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pyspark.sql import functions as F

from pipeline import sequence_wire
from pipeline.sequence import (MATCH_MARGIN_S, MESSAGE_EVENT_TYPES, Diagram, DiagramOptions, asked_window, build,
                               default_window)
from pipeline.sequence_findings import findings_of
from pipeline.tables import Tables

MAX_READ_EVENTS = 50_000
COLUMNS = ("type", "node", "ts", "seq", "to", "from", "peer", "proto", "seqno", "conn_id", "resend", "action",
           "seqnos", "kind", "gen")


def diagram(tables: Tables, run_dir: Path, details: Mapping[str, Mapping[str, Any]],
            options: DiagramOptions) -> Diagram:
    """The diagram of the run behind `tables`; `details` are the checks' details by check name."""
    findings = findings_of(details)
    first_ts, last_ts = tables.first_ts, tables.last_ts
    window = (asked_window(options.window_s, first_ts) if options.window_s is not None
              else default_window(findings, tables.fault_periods, first_ts, last_ts))
    lo_ts, hi_ts = window.start_ts - MATCH_MARGIN_S, window.end_ts + MATCH_MARGIN_S
    around = tables.of_type(*MESSAGE_EVENT_TYPES).filter(F.col("ts").between(lo_ts, hi_ts)).select(*COLUMNS)
    rows = around.limit(MAX_READ_EVENTS + 1).collect()  # a window that fits is read in one job, uncounted
    total = len(rows)
    if total > MAX_READ_EVENTS:
        total = around.count()
        rows = around.orderBy(F.abs(F.col("ts") - F.lit(window.anchor_ts))).limit(MAX_READ_EVENTS).collect()
    events = [r.asDict() for r in rows]
    views = [r.asDict() for r in tables.of_type("view").filter(F.col("ts") <= hi_ts)
             .select("node", "ts", "seq", "members").collect()]
    capture = sequence_wire.capture_path(run_dir)
    wire_ends = []
    if capture is not None:
        node_of_ip = {e["data_ip"]: e["node"] for e in tables.walked("node_start") if e["data_ip"]}
        wire_ends = sequence_wire.captured_ends(capture, node_of_ip, lo_ts, hi_ts)
    return build(events, window, nodes=tables.nodes, t0_ts=first_ts, views=views, faults=tables.fault_periods,
                 heals_ts=tables.heal_times, findings=findings, wire_ends=wire_ends, max_arrows=options.max_arrows,
                 not_read=total - len(events), capture=str(capture.relative_to(run_dir)) if capture else None)
