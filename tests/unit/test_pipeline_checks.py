"""Pipeline checks on hand-made histories: the clean run passes everything; each anomaly is found by exactly the
check that should find it; thresholds come from parameters; a crashing check gives `unknown`."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame

import pipeline_fixtures as pf
from pipeline_fixtures import analyzed, spark  # noqa: F401  (shared fixtures)

from pipeline import api
from pipeline.checks import CHECKS
from pipeline.checks.base import Check, Verdict, run_check
from pipeline.tables import Tables


def test_clean_history_passes_every_check(analyzed):  # noqa: F811
    summary = analyzed(pf.clean_scenario)

    assert pf.statuses(summary) == {c.name: "ok" for c in CHECKS}, {n: r.reason for n, r in summary.checks.items()}
    assert summary.exit_code == 0
    delivery = summary.checks["delivery"].details
    # 3 senders x 2 receivers x 3 in phase A and 3 in phase C, 2 unicasts before and 1 during the partition,
    # n1's multicast during the partition expected at n2 only (n3's view then lacked n1)
    assert (delivery["expected"], delivery["missing"]) == (28, 0)
    retrans = summary.checks["retransmission"].details
    assert retrans["xmit_requests"] == 1 and retrans["resent_messages"] == 2 and retrans["resent_bytes"] == 150
    assert retrans["sync"]["sync_handshake"]["messages"] == 3
    assert summary.checks["heal_recovery"].details["recovery_s"] == pytest.approx(0.051, abs=1e-3)
    assert summary.checks["views"].details["converge_s"] == pytest.approx(0.45, abs=1e-3)
    written = json.loads((Path(summary.run_dir) / "report" / "summary.json").read_text())
    assert written["status"] == "ok" and written["run_id"] == "fixture-run"
    assert written["counts"]["msgs_sent"] == 16
    assert written["counts"]["msgs_sent_by_kind"] == {"multicast": 13, "unicast": 3}


def test_a_check_answers_unknown_where_a_node_does_not_record_what_it_reads(analyzed):  # noqa: F811
    summary = analyzed(pf.with_declared_records)
    unknown = {name for name, status in pf.statuses(summary).items() if status == "unknown"}
    # n2 records no window_full / resync_timeout / bcast_state: these two cannot judge the run ...
    assert unknown == {"blocked", "sync_handshakes"}, {n: r.reason for n, r in summary.checks.items()}
    assert summary.checks["blocked"].reason == ("n2 (jgroups) does not record window_full, window_unblocked, which "
                                                "this check reads (NODE_CONTRACT.md)")
    # ... while the checks fed by what it records judge it as before
    assert {name: status for name, status in pf.statuses(summary).items() if name not in unknown} == \
        {c.name: "ok" for c in CHECKS if c.name not in unknown}


ANOMALIES = [
    (pf.with_lost_message, "delivery"),
    (pf.with_duplicate, "duplicates"),
    (pf.with_reordering, "fifo"),
    (pf.with_endless_retransmission, "endless_retransmission"),
    (pf.with_stale_link, "stale_link"),
    (pf.with_late_convergence, "views"),
    (pf.with_split_views, "views"),
    (pf.with_slow_recovery, "heal_recovery"),
]


@pytest.mark.parametrize("build, check", ANOMALIES, ids=[b.__name__ for b, _ in ANOMALIES])
def test_each_anomaly_is_found_by_exactly_its_check(build, check, analyzed):  # noqa: F811
    summary = analyzed(build)

    assert pf.not_ok(summary) == {check}, {n: r.reason for n, r in summary.checks.items()}
    assert summary.checks[check].status == "fail"
    assert summary.status == "fail" and summary.exit_code == 1


def test_lost_message_is_named(analyzed):  # noqa: F811
    lost = pf.with_lost_message().find("app_send", node="n1")[-1].fields["msg_id"]
    details = analyzed(pf.with_lost_message).checks["delivery"].details

    assert details["missing"] == 1
    assert [(m["msg_id"], m["receiver"]) for m in details["missing_msgs"]] == [(lost, "n3")]
    assert {(p["sender"], p["receiver"]): p["missing"] for p in details["pairs"]}[("n1", "n3")] == 1
    assert details["missing_msgs"][0]["fate"] == "never_arrived" and details["missing_fates"] == {"never_arrived": 1}


def test_the_fates_of_missing_deliveries_are_kept_only_when_some_are_missing(tmp_path, spark, monkeypatch):  # noqa: F811
    """`Tables.missing_fates` is a kept frame, whose keeping costs its planning even when nothing reads it: the
    delivery check asks for it only when a delivery is missing."""
    asked: list[Tables] = []
    kept = Tables.__dict__["missing_fates"].func
    fates = functools.cached_property(lambda tables: (asked.append(tables), kept(tables))[1])
    fates.__set_name__(Tables, "missing_fates")
    monkeypatch.setattr(Tables, "missing_fates", fates)

    clean = api.analyze(pf.clean_scenario().write(tmp_path / "clean"), spark=spark, report=False)
    assert clean.checks["delivery"].details["missing"] == 0 and asked == []
    lost = api.analyze(pf.with_lost_message().write(tmp_path / "lost"), spark=spark, report=False)
    assert lost.checks["delivery"].details["missing_fates"] == {"never_arrived": 1} and len(asked) == 1


@pytest.mark.parametrize("results, collects", [
    ({"blocked": ("ok", "periods", 3), "sync_handshakes": ("fail", "handshakes", 5)}, 2),
    ({"spurious_xmit": ("ok", "spurious_requests", 1)}, 3),
    ({"delivery": ("ok", "unexpected_deliveries", 0)}, 3),
])
def test_the_checks_ask_spark_once_for_what_they_walk_and_once_each_for_their_counts(tmp_path, spark,  # noqa: F811
                                                                                      monkeypatch, results, collects):
    """A Spark job costs about 0.1 s of the driver's CPU whatever it reads: the events the checks walk on the driver
    (the controller's, window states, handshakes) come in one job for all of them (`Tables.walked`), and the
    spurious_xmit check's counts in one, and the delivery check's pairs and unexpected deliveries in one. Asked here:
    the reader's statistics, the walked events (the heal times need them first), then each check's counts."""
    pf.only_checks(monkeypatch, *results)
    asked: list[DataFrame] = []
    collect = DataFrame.collect
    monkeypatch.setattr(DataFrame, "collect", lambda df: (asked.append(df), collect(df))[1])
    summary = api.analyze(pf.with_verb_anomalies().write(tmp_path / "run"), spark=spark, report=False)
    for name, (status, key, value) in results.items():
        assert (summary.checks[name].status, summary.checks[name].details[key]) == (status, value), name
    assert len(asked) == collects


@pytest.mark.parametrize("action, fate", [("below_window", "discarded (below_window)"),
                                          ("wrong_conn", "discarded (wrong_conn)"), ("buffer", "buffered")])
def test_a_missing_message_says_what_became_of_it_at_the_receiver(tmp_path, spark, monkeypatch, action,  # noqa: F811
                                                                  fate):
    pf.only_checks(monkeypatch, "delivery")
    scenario = pf.with_missing_at_the_receiver(action)
    summary = api.analyze(scenario.write(tmp_path / "run"), spark=spark, report=False)
    delivery = summary.checks["delivery"]
    assert delivery.status == "fail"
    [missing] = delivery.details["missing_msgs"]
    assert (missing["msg_id"], missing["seqno"], missing["resends"]) == (scenario.victim, 4, 1)
    assert delivery.details["missing_fates"] == {fate: 1}
    assert f"1 {fate}" in delivery.reason, delivery.reason


def test_endless_retransmission_names_the_seqno(analyzed):  # noqa: F811
    details = analyzed(pf.with_endless_retransmission).checks["endless_retransmission"].details

    assert details["flagged"] == 1
    example = details["examples"][0]
    assert (example["requester"], example["sender"], example["proto"], example["seqno"]) == ("n3", "n2", "unicast3", 9)
    assert example["requests"] == 25


def test_parameters_move_the_limits(tmp_path, spark):  # noqa: F811
    run_dir = pf.with_endless_retransmission().write(tmp_path / "r1")
    summary = api.analyze(run_dir, spark=spark, report=False, params={
        "endless_retransmission": {"min_requests": 26},
        "latency": {"max_p99_ms": 100}, "retransmission": {"max_resent_messages": 1},
        "views": {"max_converge_s": 0.1}})

    assert pf.not_ok(summary) == {"latency", "retransmission", "views"}
    assert summary.checks["endless_retransmission"].params["min_requests"] == 26


def test_a_scenarios_own_heal_of_its_partition_counts_as_the_heal(tmp_path, spark, monkeypatch):  # noqa: F811
    """No `heal` event (the scenario healed its partition itself; the runner's final heal found nothing left):
    the partition's fault_end is the heal, and an injected packet (an instant) does not hold it open."""
    pf.only_checks(monkeypatch, "heal_recovery", "views")
    scenario = pf.clean_scenario()
    scenario.events = [e for e in scenario.events if e.type != "heal"]
    scenario.add("controller", 2.0, "fault_start", fault_id="i1", kind="inject", detail={"from": "n1", "to": "n2"},
                 applied_ts=pf.T0_TS + 2.0, effective_ts=None)
    summary = api.analyze(scenario.write(tmp_path / "r1"), spark=spark, report=False)
    heal = summary.checks["heal_recovery"].details
    assert heal["heals"] == 1 and heal["heal_ts"] == pytest.approx(pf.T0_TS + pf.HEAL_EFFECTIVE_S)
    assert heal["recovery_s"] == pytest.approx(0.051, abs=1e-3)
    assert summary.checks["views"].details["converge_s"] == pytest.approx(0.45, abs=1e-3)


def test_a_multicast_sent_before_its_sender_installs_the_merged_view_is_not_expected(tmp_path, spark,  # noqa: F811
                                                                                     monkeypatch):
    """n1 installs the merged view at 3.48, n3 only at 3.5: what n3 multicasts at 3.49 (still in its own view)
    is not for n1, although n1's view then already holds n3."""
    pf.only_checks(monkeypatch, "delivery")
    scenario = pf.clean_scenario()
    (merged_at_n1,) = scenario.find("view", node="n1", view_id=["n1", 3])
    merged_at_n1.t_s = 3.48
    boundary = scenario.multicast("n3", 3.49, {}, seqno=99)
    summary = api.analyze(scenario.write(tmp_path / "r1"), spark=spark, report=False)
    assert summary.checks["delivery"].status == "ok", summary.checks["delivery"].reason
    assert boundary not in {m["msg_id"] for m in summary.checks["delivery"].details["missing_msgs"]}


def test_without_view_events_a_multicast_is_for_every_other_node(tmp_path, spark, monkeypatch):  # noqa: F811
    """No view in the history: every other node that wrote events should deliver a multicast."""
    pf.only_checks(monkeypatch, "delivery", "views")
    scenario = pf.clean_scenario()
    scenario.events = [e for e in scenario.events if e.type == "node_start"]
    scenario.multicast("n1", 1.0, {"n2": 1.01}, seqno=1)
    summary = api.analyze(scenario.write(tmp_path / "r1"), spark=spark, report=False)
    delivery = summary.checks["delivery"].details
    assert (delivery["expected"], delivery["missing"]) == (2, 1)
    assert [(m["sender"], m["receiver"]) for m in delivery["missing_msgs"]] == [("n1", "n3")]
    assert summary.checks["views"].status == "unknown"


def test_the_sync_traffic_limit_bounds_resync_messages_and_bytes(tmp_path, spark, monkeypatch):  # noqa: F811
    pf.only_checks(monkeypatch, "retransmission")
    run_dir = pf.clean_scenario().write(tmp_path / "r1")
    tight = api.analyze(run_dir, spark=spark, report=False, params={"retransmission": {"max_sync_messages": 2}})
    assert tight.checks["retransmission"].status == "fail"
    assert "3 sync messages > 2" in tight.checks["retransmission"].reason
    sync_bytes = tight.checks["retransmission"].details["sync"]["sync_handshake"]["bytes"]
    exact = api.analyze(run_dir, spark=spark, report=False,
                        params={"retransmission": {"max_sync_messages": 3, "max_sync_bytes": sync_bytes}})
    assert exact.checks["retransmission"].status == "ok"
    below = api.analyze(run_dir, spark=spark, report=False,
                        params={"retransmission": {"max_sync_bytes": sync_bytes - 1}})
    assert f"{sync_bytes} sync bytes > {sync_bytes - 1}" in below.checks["retransmission"].reason


def test_a_crashing_check_gives_unknown_not_a_crash(tmp_path, spark, monkeypatch):  # noqa: F811
    def explode(ctx, params):
        raise ZeroDivisionError("boom")

    broken = Check(name="broken", summary="always raises", defaults={}, func=explode)
    monkeypatch.setattr(api, "CHECKS", CHECKS + (broken,))
    summary = api.analyze(pf.clean_scenario().write(tmp_path / "r1"), spark=spark, report=False)

    assert summary.checks["broken"].status == "unknown"
    assert "ZeroDivisionError: boom" in summary.checks["broken"].reason
    assert pf.not_ok(summary) == {"broken"}
    assert summary.status == "unknown" and summary.exit_code == 1


def test_run_check_reports_an_invalid_status_as_unknown():
    check = Check(name="odd", summary="", defaults={}, func=lambda ctx, params: Verdict("maybe", "?"))
    result = run_check(check, ctx=None, params={})
    assert result.status == "unknown" and "maybe" in result.reason
