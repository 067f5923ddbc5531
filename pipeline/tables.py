"""Derived tables of one run (sends, deliveries, expectations, views, faults, xmit requests), built once.

`Tables` wraps the validated events and builds each derived table on first use; the ones several checks share
are kept (`pipeline.kept`). Small tables (faults, final views) come back to the driver as plain Python values.
Column names carry units: `*_ts` are unix seconds, `*_ms` milliseconds, `*_bytes` bytes.
"""
from __future__ import annotations

import json
import threading
from typing import Any, Callable, Generic, TypeVar, overload

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pipeline.reader import CONTROLLER, History
from pipeline.report_data import INSTANT_FAULTS, FaultPeriod

MSG_ID_PATTERN = r"^(.+)\.(\d+)\.(\d+)$"
# data_rx actions that mean "the message arrived and was kept" (ends a retransmission request)
RECEIVED_ACTIONS = ("deliver", "buffer")
SYNC_KINDS = ("sync", "sync_ok", "sync_ack")  # the SYNC handshake's resync_tx kinds (unicast3)
# The events checks walk one by one on the driver (`Tables.walked`): lifecycle, the controller's faults, send-window
# states and the handshakes' messages (resync_tx of the SYNC handshake only; bcast_state_* of a generation, not
# discarded). Few per run, and one job brings them all: a job costs some 0.1 s of the driver's CPU whatever it reads
# (planning, code generation, task serialisation), and the checks asked for them in four.
WALKED_TYPES = ("node_start", "fault_start", "fault_end", "heal", "window_full", "window_unblocked", "resync_tx",
                "resync_timeout", "bcast_state_tx", "bcast_state_rx")
WALKED_COLUMNS = ("type", "node", "ts", "seq", "peer", "proto", "kind", "gen", "side", "fault_id", "detail",
                  "data_ip")


def periods_of(controller_events: list[dict[str, Any]], last_ts: float) -> list[FaultPeriod]:
    """The faults of `controller_events` (oldest first, with `at_ts`) with their periods, by start: a fault ends
    at its `fault_end`, else at the next `heal` (which ends every fault still open), else at the run's end
    (`last_ts`); an instant fault opens nothing and ends where it starts."""
    open_faults: dict[str, dict[str, Any]] = {}
    periods: list[FaultPeriod] = []

    def period(start: dict[str, Any], end_ts: float, end: dict[str, Any] | None = None) -> FaultPeriod:
        detail = _json_or_text(start["detail"])
        added = _json_or_text(end.get("detail")) if end is not None else None
        if isinstance(detail, dict) and isinstance(added, dict):
            detail = {**detail, **added}
        return FaultPeriod(fault_id=start["fault_id"], kind=start["kind"] or "?", start_ts=start["at_ts"],
                           end_ts=end_ts, detail=detail)

    for event in controller_events:
        if event["type"] == "fault_start" and event["kind"] in INSTANT_FAULTS:
            periods.append(period(event, event["at_ts"]))
        elif event["type"] == "fault_start":
            open_faults[event["fault_id"]] = event
        elif event["type"] == "fault_end" and event["fault_id"] in open_faults:
            periods.append(period(open_faults.pop(event["fault_id"]), event["at_ts"], event))
        elif event["type"] == "heal":
            periods += [period(start, event["at_ts"]) for start in open_faults.values()]
            open_faults.clear()
    periods += [period(start, max(last_ts, start["at_ts"])) for start in open_faults.values()]
    return sorted(periods, key=lambda p: (p.start_ts, p.fault_id))


T = TypeVar("T")


class shared(Generic[T]):
    """A table of `Tables` built once, by the first thread that asks for it: the checks run in threads, and those
    that share a table wait while one builds it. (functools.cached_property locked like this up to Python 3.11,
    undocumented, and with one lock for every instance; this lock is the instance's.)"""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> "shared[T]": ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> "T | shared[T]":
        if instance is None:
            return self
        built = instance.__dict__
        if self.name not in built:
            with built.setdefault(f"_{self.name}_lock", threading.Lock()):  # (setdefault is atomic)
                if self.name not in built:
                    built[self.name] = self.func(instance)
        return built[self.name]


def event_time() -> Any:
    """Controller events: when the fault took effect if probed, else when it was applied, else the event time."""
    return F.coalesce(F.col("effective_ts"), F.col("applied_ts"), F.col("ts"))


def length_or_zero(column: str) -> Any:
    """Length of an array column, 0 for null."""
    return F.when(F.col(column).isNotNull(), F.size(column)).otherwise(0)


class Tables:
    """The derived tables of one run over the reader's validated events."""

    def __init__(self, spark: SparkSession, history: History) -> None:
        self.spark = spark
        self.events = history.events
        self.history = history.stats
        self._read = history

    def _keep(self, df: DataFrame) -> DataFrame:
        return self._read.kept.keep(df)

    def prepare(self) -> None:
        """Read the events walked on the driver (one job), which most checks read first. The frames several checks
        share are built by the first check that asks (`shared`), beside the checks that need none of them: built
        here, before the checks, they kept one core of two idle for a fifth of a warm analysis (15k events, three
        runs of 18 in turns in one JVM: median 2.60 -> 2.36 s, 2.40 -> 2.21 s to the verdict; 4.10 -> 3.81 s with
        the report, 2026-11-30)."""
        _ = (self.fault_periods, self.heal_times)

    def release(self) -> None:
        """Free every table kept for the analysis, and the events (`pipeline.kept`)."""
        self._read.release()

    def of_type(self, *types: str) -> DataFrame:
        return self.events.filter(F.col("type").isin(*types))

    # --- run facts -----------------------------------------------------------------------------------------
    @property
    def nodes(self) -> list[str]:
        return self.history.nodes

    @property
    def first_ts(self) -> float:
        return self.history.first_ts or 0.0

    @property
    def last_ts(self) -> float:
        return self.history.last_ts or 0.0

    # --- application -----------------------------------------------------------------------------------------
    @shared
    def sends(self) -> DataFrame:
        """One row per message id: `msg_id, sender, kind, to, size_bytes, send_ts` (first send if repeated)."""
        return (self.of_type("app_send")
                .groupBy("msg_id")
                .agg(F.min(F.struct("ts", "node", "kind", "to", "size")).alias("s"))
                .select("msg_id", F.col("s.node").alias("sender"), F.col("s.kind").alias("kind"),
                        F.col("s.to").alias("to"), F.col("s.size").alias("size_bytes"),
                        F.col("s.ts").alias("send_ts")))

    @shared
    def first_deliveries(self) -> DataFrame:
        """One row per (receiver, msg_id): `sender, kind, deliver_ts, deliver_seq` of the first delivery, `copies`."""
        return self._keep(
            self.of_type("app_deliver")
            .groupBy(F.col("node").alias("receiver"), "msg_id")
            .agg(F.min(F.struct("ts", "seq", "from", "kind")).alias("d"), F.count(F.lit(1)).alias("copies"))
            .select("receiver", "msg_id", F.col("d.from").alias("sender"), F.col("d.kind").alias("kind"),
                    F.col("d.ts").alias("deliver_ts"), F.col("d.seq").alias("deliver_seq"), "copies"))

    # --- membership -------------------------------------------------------------------------------------------
    @shared
    def views(self) -> DataFrame:
        """Installed views: `node, ts, seq, view_id` ("coord:n"), `members`, `until_ts` (next view there, or null)."""
        order = Window.partitionBy("node").orderBy("ts", "seq")
        return self._keep(
            self.of_type("view")
            .select("node", "ts", "seq", F.concat_ws(":", "view_id").alias("view_id"), "members")
            .withColumn("until_ts", F.lead("ts").over(order)))

    @property
    def has_views(self) -> bool:
        """Any view installed in the run: the reader counted them (no job)."""
        return self.history.events_by_type.get("view", 0) > 0

    # --- expectations ----------------------------------------------------------------------------------------
    @shared
    def expected(self) -> DataFrame:
        """Who should deliver what: `msg_id, sender, receiver, kind, send_ts`.

        Unicast: the target. Multicast: every other node whose own view in force at send time (by the receiver's
        history) contains the sender, and which the sender's view in force then contains (a node that has no
        view yet counts as holding everyone); with no view events in the run, every other node.
        """
        sends = self.sends
        unicast = (sends.filter((F.col("kind") == "unicast") & (F.col("to") != F.col("sender")))
                   .select("msg_id", "sender", F.col("to").alias("receiver"), "kind", "send_ts"))
        multicast = sends.filter(F.col("kind") == "multicast").alias("m")
        if self.has_views:
            views = self.views.select(F.col("node").alias("receiver"), F.col("ts").alias("from_ts"),
                                      "until_ts", "members").alias("v")
            cond = ((F.col("v.receiver") != F.col("m.sender"))
                    & (F.col("v.from_ts") <= F.col("m.send_ts"))
                    & (F.col("v.until_ts").isNull() | (F.col("m.send_ts") < F.col("v.until_ts")))
                    & F.expr("array_contains(v.members, m.sender)"))
            group = (multicast.join(F.broadcast(views), cond, "inner")
                     .select("m.msg_id", "m.sender", "v.receiver", "m.kind", "m.send_ts"))
            # ... and the sender's own view then holds the receiver: a message sent just before the sender
            # installed the view that adds r is not for r, even if r installed that view a moment earlier
            sender_views = self.views.select(F.col("node").alias("s_node"), F.col("ts").alias("s_from_ts"),
                                             F.col("until_ts").alias("s_until_ts"), F.col("members").alias("s_members"))
            excludes = ((F.col("s_node") == F.col("sender")) & (F.col("s_from_ts") <= F.col("send_ts"))
                        & (F.col("s_until_ts").isNull() | (F.col("send_ts") < F.col("s_until_ts")))
                        & ~F.expr("array_contains(s_members, receiver)"))
            group = group.join(F.broadcast(sender_views), excludes, "left_anti")
        else:
            receivers = self.spark.createDataFrame([(n,) for n in self.nodes], "receiver string").alias("v")
            group = (multicast.join(F.broadcast(receivers), F.col("v.receiver") != F.col("m.sender"), "inner")
                     .select("m.msg_id", "m.sender", "v.receiver", "m.kind", "m.send_ts"))
        return unicast.unionByName(group)

    @shared
    def delivery_facts(self) -> DataFrame:
        """`expected` with the first delivery: `deliver_ts, copies, delivered` (bool), `latency_ms`."""
        first = self.first_deliveries.select("receiver", "msg_id", "deliver_ts", "copies")
        return self._keep(
            self.expected.join(first, ["msg_id", "receiver"], "left")
            .withColumn("delivered", F.col("deliver_ts").isNotNull())
            .withColumn("copies", F.coalesce(F.col("copies"), F.lit(0)))
            .withColumn("latency_ms", (F.col("deliver_ts") - F.col("send_ts")) * 1000.0))

    @shared
    def missing_fates(self) -> DataFrame:
        """What became of every expected delivery that was not made, at its receiver: `msg_id, sender, receiver,
        kind, send_ts, seqno, fate, reasons, resends`.

        The sender's `data_tx` that carries the message id gives its seqno; the receiver's `data_rx` events of
        that seqno from that sender after it was sent say what happened there. `fate`: `not_sent` (the protocol
        never transmitted it), `never_arrived` (no data_rx of its seqno), `buffered` (kept behind a gap and never
        delivered), `discarded` (it arrived and was dropped: `reasons` are the data_rx actions, e.g.
        below_window, wrong_conn, no_conn, outside_window), `taken_not_delivered` (the layer delivered it but the
        application's delivery is not in the history). `resends` counts the sender's retransmissions of
        that seqno to the receiver (or to the group).
        """
        missing = (self.delivery_facts.filter(~F.col("delivered"))
                   .select("msg_id", "sender", "receiver", "kind", "send_ts"))
        tx = (self.of_type("data_tx").filter(F.col("msg_id").isNotNull())
              .groupBy("msg_id", F.col("node").alias("sender"))
              .agg(F.min(F.struct("ts", "seqno", "proto")).alias("t"))
              .select("msg_id", "sender", F.col("t.seqno").alias("seqno"), F.col("t.proto").alias("proto"),
                      F.col("t.ts").alias("tx_ts")))
        sent = missing.join(tx, ["msg_id", "sender"], "left").alias("m")
        rx = (self.of_type("data_rx")
              .select(F.col("node").alias("r_receiver"), F.col("from").alias("r_sender"),
                      F.col("proto").alias("r_proto"),
                      F.col("seqno").alias("r_seqno"), "action", F.col("ts").alias("r_ts")))
        at_receiver = ((F.col("receiver") == F.col("r_receiver")) & (F.col("sender") == F.col("r_sender"))
                       & (F.col("proto") == F.col("r_proto")) & (F.col("seqno") == F.col("r_seqno"))
                       & (F.col("r_ts") >= F.col("tx_ts")))
        resent = (self.of_type("data_tx").filter(F.col("resend"))
                  .select(F.col("node").alias("x_sender"), F.col("to").alias("x_to"), F.col("proto").alias("x_proto"),
                          F.col("seqno").alias("x_seqno"), F.col("ts").alias("x_ts")))
        to_receiver = ((F.col("sender") == F.col("x_sender")) & (F.col("proto") == F.col("x_proto"))
                       & (F.col("seqno") == F.col("x_seqno")) & (F.col("x_ts") >= F.col("tx_ts"))
                       & ((F.col("x_to") == F.col("receiver")) | (F.col("x_to") == "*")))
        keys = ["msg_id", "sender", "receiver", "kind", "send_ts", "seqno"]
        actions = (sent.join(rx, at_receiver, "left").groupBy(*keys)
                   .agg(F.array_sort(F.collect_set("action")).alias("actions")))
        resends = sent.join(resent, to_receiver, "inner").groupBy("msg_id", "receiver").agg(
            F.count(F.lit(1)).alias("resends"))
        kept = F.array(*(F.lit(a) for a in RECEIVED_ACTIONS))
        reasons = F.array_except("actions", kept)
        fate = (F.when(F.col("seqno").isNull(), "not_sent")
                .when(F.size("actions") == 0, "never_arrived")
                .when(F.array_contains("actions", "buffer"), "buffered")
                .when(F.size(reasons) > 0, "discarded")
                .otherwise("taken_not_delivered"))
        # kept: the delivery check reads it twice (the first missing, the counts by fate), and its joins are the
        # costliest plan of a failing run's analysis (kept, a 539-event run's delivery check took 0.45 s, was 0.8 s)
        return self._keep(actions.join(resends, ["msg_id", "receiver"], "left")
                          .withColumn("resends", F.coalesce(F.col("resends"), F.lit(0)))
                          .withColumn("fate", fate)
                          .withColumn("reasons", reasons)
                          .drop("actions"))

    # --- retransmission ----------------------------------------------------------------------------------------
    @shared
    def xmit_requests(self) -> DataFrame:
        """Per (requester, sender, proto, seqno): `requests`, `first_ts`, `last_ts`, `received` (arrived later)."""
        asked = (self.of_type("xmit_req_tx")
                 .select(F.col("node").alias("requester"), F.col("to").alias("sender"), "proto",
                         F.explode("seqnos").alias("seqno"), "ts")
                 .groupBy("requester", "sender", "proto", "seqno")
                 .agg(F.count(F.lit(1)).alias("requests"), F.min("ts").alias("first_ts"),
                      F.max("ts").alias("last_ts")))
        # the last arrival of each seqno: it came after the first request exactly when the last one did (one
        # equi-join; a join on `r_ts >= first_ts` and a second join to mark the rows took twice as long to plan)
        got = (self.of_type("data_rx").filter(F.col("action").isin(*RECEIVED_ACTIONS))
               .groupBy(F.col("node").alias("requester"), F.col("from").alias("sender"), "proto", "seqno")
               .agg(F.max("ts").alias("last_rx_ts")))
        return self._keep(
            asked.join(got, ["requester", "sender", "proto", "seqno"], "left")
            .select("requester", "sender", "proto", "seqno", "requests", "first_ts", "last_ts",
                    F.coalesce(F.col("last_rx_ts") >= F.col("first_ts"), F.lit(False)).alias("received")))

    @shared
    def reported_missing(self) -> DataFrame:
        """Per (requester, sender, proto, seqno): how often the sender answered "missing" (no longer held)."""
        return (self.of_type("xmit_req_rx")
                .select(F.col("from").alias("requester"), F.col("node").alias("sender"), "proto",
                        F.explode("missing").alias("seqno"))
                .groupBy("requester", "sender", "proto", "seqno")
                .agg(F.count(F.lit(1)).alias("missing_replies")))

    # --- events walked on the driver ---------------------------------------------------------------------------
    @shared
    def walked_events(self) -> list[dict[str, Any]]:
        """Every event of `WALKED_TYPES` (`WALKED_COLUMNS` and `at_ts`, see `event_time`), ordered by (ts, node,
        seq): one job."""
        rows = (self.of_type(*WALKED_TYPES)
                .filter((F.col("type") != "resync_tx") | F.col("kind").isin(*SYNC_KINDS))
                .filter(~F.col("type").startswith("bcast_state") | ((F.col("gen") > 0) & F.col("action").isNull()))
                .select(*WALKED_COLUMNS, event_time().alias("at_ts")).collect())
        return sorted((r.asDict() for r in rows), key=lambda e: (e["ts"], e["node"], e["seq"]))

    def walked(self, *types: str) -> list[dict[str, Any]]:
        """The walked events (`walked_events`) of `types` (each one of `WALKED_TYPES`), ordered by (ts, node, seq)."""
        unknown = set(types) - set(WALKED_TYPES)
        if unknown:
            raise ValueError(f"not walked on the driver: {', '.join(sorted(unknown))} (WALKED_TYPES)")
        return [e for e in self.walked_events if e["type"] in types]

    # --- controller -------------------------------------------------------------------------------------------
    @shared
    def controller_events(self) -> list[dict[str, Any]]:
        """The controller's fault, heal and workload events, oldest first, with `at_ts` (see `event_time`)."""
        return sorted((e for e in self.walked("fault_start", "fault_end", "heal") if e["node"] == CONTROLLER),
                      key=lambda e: (e["at_ts"], e["ts"], e["seq"]))

    @shared
    def heal_times(self) -> list[float]:
        """When the network became whole again: every `heal` event, and every `fault_end` that ended the last
        fault still open (a scenario's own `heal` of its partition, `fast`, `resume`, `start`). Instant faults
        (`inject`, `restart`) open nothing."""
        open_ids: set[str] = set()
        times: list[float] = []
        for event in self.controller_events:
            if event["type"] == "fault_start" and event["kind"] not in INSTANT_FAULTS:
                open_ids.add(event["fault_id"])
            elif event["type"] == "fault_end" and event["fault_id"] in open_ids:
                open_ids.discard(event["fault_id"])
                if not open_ids:
                    times.append(event["at_ts"])
            elif event["type"] == "heal":
                open_ids.clear()
                times.append(event["at_ts"])
        return times

    @shared
    def fault_periods(self) -> list[FaultPeriod]:
        """Faults with their periods (`periods_of`)."""
        return periods_of(self.controller_events, self.last_ts)


def _json_or_text(value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value
