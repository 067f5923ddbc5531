"""The checks spurious_xmit, sync_handshakes, blocked and resends_without_request on one hand-made history
holding one anomaly for each (`pipeline_fixtures.with_verb_anomalies`): each is found by its check with exact
details, and the parameters move each limit. (The clean history passing them is in test_pipeline_checks.)"""
from __future__ import annotations

import pytest

import pipeline_fixtures as pf
from pipeline_fixtures import spark  # noqa: F401  (the shared session fixture)

from pipeline import api

NEW = {"spurious_xmit", "sync_handshakes", "blocked", "resends_without_request"}
TIGHT = {"spurious_xmit": {"max_spurious": 0}, "blocked": {"max_blocked_ms": 200, "max_total_blocked_ms": 399},
         "resends_without_request": {"max_resends": 3}}
LOOSE = {"spurious_xmit": {"max_spurious": 1, "max_spurious_pct": 34}, "sync_handshakes": {"max_unfinished": 3},
         "blocked": {"max_blocked_ms": 250, "max_total_blocked_ms": 400}, "resends_without_request": {"max_resends": 4}}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return pf.with_verb_anomalies().write(tmp_path_factory.mktemp("verbs") / "r1")


def test_each_anomaly_is_found_by_its_check_with_exact_details(run_dir, spark):  # noqa: F811
    summary = api.analyze(run_dir, spark=spark, report=False, params=TIGHT)
    assert pf.not_ok(summary) == NEW, {n: r.reason for n, r in summary.checks.items()}
    checks = summary.checks

    spurious = checks["spurious_xmit"].details
    assert (spurious["judged_requests"], spurious["spurious_requests"], spurious["spurious_pct"]) == (3, 1, 33.333)
    assert spurious["links"] == [{"requester": "n2", "sender": "n1", "proto": "nakack4", "spurious": 1,
                                  "seqnos": [7]}]

    sync = checks["sync_handshakes"].details
    assert sync["by_kind"] == {"sync": {"finished": 1, "unfinished": 1, "abandoned": 1},
                               "bcast_state": {"finished": 1, "unfinished": 1}}
    assert sorted((e["kind"], e["initiator"], e["other"], e["outcome"], e["resends"]) for e in sync["examples"]) == [
        ("bcast_state", "n1", "n3", "unfinished", 0), ("sync", "n1", "n3", "unfinished", 1),
        ("sync", "n2", "n1", "abandoned", 0)]

    blocked = checks["blocked"].details
    assert (blocked["periods"], blocked["longest_ms"], blocked["total_ms"], blocked["still_blocked"]) == \
        (3, 250.0, 400.0, 1)
    assert blocked["by_sender_ms"] == {"n1 nakack4": 250.0, "n2 unicast3 -> n3": 50.0, "n3 nakack4": 100.0}
    assert "n1 nakack4 blocked 250 ms > 200 ms" in checks["blocked"].reason
    assert "400 ms in all > 399 ms" in checks["blocked"].reason

    resends = checks["resends_without_request"].details
    assert resends["flagged"] == 1 and resends["most_resends_without_request"] == 4
    assert {k: resends["examples"][0][k] for k in ("sender", "receiver", "proto", "seqno", "resends")} == \
        {"sender": "n2", "receiver": "n3", "proto": "unicast3", "seqno": 5, "resends": 4}


def test_limits_are_inclusive_and_default_to_off_except_unfinished_handshakes(run_dir, spark,  # noqa: F811
                                                                              monkeypatch):
    pf.only_checks(monkeypatch, *NEW)
    loose = api.analyze(run_dir, spark=spark, report=False, params=LOOSE)
    assert not pf.not_ok(loose) & NEW, {n: loose.checks[n].reason for n in NEW}
    default = api.analyze(run_dir, spark=spark, report=False)
    assert pf.not_ok(default) & NEW == {"sync_handshakes"}
    assert default.checks["sync_handshakes"].reason.startswith(
        "3 handshake(s) did not finish (2 unfinished, 1 abandoned)")
