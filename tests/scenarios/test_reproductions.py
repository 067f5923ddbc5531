"""The seeds' network-split bugs on real containers, each scenario under all its variants at once: the legacy
variant shows the bug (its expectations name the checks that must fail) and the fixed one passes. Each test
also asserts the bug's own signature in the analysis, so a scenario that stops reproducing fails here.

JGRP-1873 has its own module (test_jgrp1873.py); the measured reproduction rate is in bench/bench_repro.py.
"""
from __future__ import annotations

import json

import pytest

from scenario_helpers import held

pytestmark = pytest.mark.splitlab_cluster


def failing(result) -> set[str]:
    return {name for name, r in result.summary.checks.items() if r.status == "fail"} | \
        {o.check for o in result.verdict.outcomes if o.actual == "fail"}


def test_unicast2_s6_lost_first_message_strands_unicast2_not_unicast3(run_variants) -> None:
    runs = run_variants("unicast2_s6")
    legacy, fixed = runs["legacy"], runs["fixed"]
    assert legacy.verdict.held and fixed.verdict.held, held(runs)
    # n2 discarded #2..#10 of the new connection as below its old window, acked them, and asks for them forever
    missing = legacy.summary.checks["delivery"].details["missing"]
    assert missing == 10, held(runs)
    examples = legacy.summary.checks["endless_retransmission"].details["examples"]
    assert {e["seqno"] for e in examples} == set(range(2, 11)), examples
    assert fixed.summary.checks["retransmission"].details["sync"]["sync_handshake"]["messages"] >= 2


def test_unicast1_motivation_and_s9_asymmetric_split(run_variants) -> None:
    runs = run_variants("unicast1_motivation")
    assert all(r.verdict.held for r in runs.values()), held(runs)
    pairs = {(p["sender"], p["receiver"]): p["missing"]
             for p in runs["legacy"].summary.checks["delivery"].details["pairs"]}
    # B stores A's #25.. and never delivers them; A discards B's new #1..#6 (it expects #7)
    assert pairs == {("n1", "n2"): 10, ("n2", "n1"): 6}, pairs
    assert runs["unicast2"].summary.checks["retransmission"].details["sync"]["first_seqno_recovery"]["messages"] > 0
    assert runs["fixed"].summary.checks["retransmission"].details["sync"]["sync_handshake"]["messages"] > 0


def test_unicast2_s4_s5_unilateral_closes(run_variants) -> None:
    runs = run_variants("unicast2_s4_s5")
    assert all(r.verdict.held for r in runs.values()), held(runs)
    pairs = {(p["sender"], p["receiver"]): p["missing"]
             for p in runs["legacy"].summary.checks["delivery"].details["pairs"]}
    assert pairs == {("n1", "n2"): 10, ("n3", "n2"): 10}, pairs   # #4 and #5 both fail without conn ids
    for variant in ("unicast2", "fixed"):
        assert failing(runs[variant]) == set(), (variant, held(runs))


def test_unicast2_s8_overlapping_partitions_a_alone(run_variants) -> None:
    runs = run_variants("unicast2_s8")
    assert all(r.verdict.held for r in runs.values()), held(runs)
    assert runs["legacy"].summary.checks["delivery"].details["missing"] >= 10, held(runs)
    for variant in ("unicast2", "fixed"):
        assert {"delivery", "duplicates", "fifo"}.isdisjoint(failing(runs[variant])), (variant, held(runs))


def sent_at_timeline_end(result, node: str) -> int:
    """Messages `node`'s workloads had sent when the timeline ended (before the runner's final heal)."""
    state = json.loads((result.run_dir / "timeline_end_state.json").read_text())[node]
    return sum(w["sent"] for w in state["workloads"])


def test_nakack4_blocked_sender_released_by_a_view_change(run_variants) -> None:
    runs = run_variants("nakack4_blocked_sender")
    legacy, fixed = runs["legacy"], runs["fixed"]
    assert legacy.verdict.held and fixed.verdict.held, held(runs)
    # at the end of the timeline (the final heal then starts n3 again, whose new life releases n1 in both)
    assert sent_at_timeline_end(legacy, "n1") < 400 == sent_at_timeline_end(fixed, "n1"), held(runs)
    assert fixed.summary.counts["msgs_sent"] == 400, held(runs)
    # the gms variant excluded the dead member with a view
    views = fixed.summary.checks["views"].details.get("final_views", {})
    assert views, fixed.summary.checks["views"].reason


def test_tipc_broadcast_link_race_only_without_the_sync(run_variants) -> None:
    runs = run_variants("tipc_bcast_race")
    legacy, fixed = runs["legacy"], runs["fixed"]
    assert legacy.verdict.held and fixed.verdict.held, held(runs)
    links = legacy.summary.checks["stale_link"].details["links"]
    assert any(link["requester"] == "n2" for link in links), links   # n2 started at a released seqno
    assert fixed.summary.checks["stale_link"].details["stale_requests"] == 0


def test_short_conn_close_timeout_delivers_twice_long_one_once(run_variants) -> None:
    runs = run_variants("conn_close_duplicates")
    legacy, fixed = runs["legacy"], runs["fixed"]
    assert legacy.verdict.held and fixed.verdict.held, held(runs)
    assert legacy.summary.checks["duplicates"].details["extra_deliveries"] >= 10, held(runs)
    assert legacy.summary.checks["retransmission"].details["sync"]["sync_handshake"]["messages"] > 0
    assert fixed.summary.checks["retransmission"].details["sync"] == {}


def test_jgrp1874_resync_traffic_sync_handshake_far_below_first_seqno_recovery(run_variants) -> None:
    runs = run_variants("jgrp1874")
    legacy, fixed = runs["legacy"], runs["fixed"]
    assert legacy.verdict.held and fixed.verdict.held, held(runs)
    old = legacy.summary.checks["retransmission"].details["sync"]["first_seqno_recovery"]
    new = fixed.summary.checks["retransmission"].details["sync"]["sync_handshake"]
    assert old["messages"] >= 10 * new["messages"], (old, new)
    assert old["bytes"] >= 10 * new["bytes"], (old, new)
