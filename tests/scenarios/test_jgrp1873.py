"""JGRP-1873 on real containers (scenarios/jgrp1873.yaml): under unicast2 the receiver asks forever for
messages the sender purged on a stale STABLE, delivers one twice and never the last; under unicast3 the same
schedule delivers everything once."""
from __future__ import annotations

import pytest

from scenario_helpers import held

pytestmark = pytest.mark.splitlab_cluster


def test_jgrp1873_endless_retransmission_under_unicast2_clean_under_unicast3(run_variants) -> None:
    runs = run_variants("jgrp1873")
    legacy, fixed = runs["legacy"], runs["fixed"]
    assert legacy.verdict.held and fixed.verdict.held, held(runs)
    # the signature: n2 asks n1 again and again for seqnos n1 says it no longer has
    endless = legacy.summary.checks["endless_retransmission"].details
    assert endless["examples"], held(runs)
    worst = endless["examples"][0]
    assert (worst["requester"], worst["sender"], worst["proto"]) == ("n2", "n1", "unicast2"), worst
    assert worst["sender_reported_missing"] >= 10, worst
    assert legacy.summary.checks["retransmission"].details["sync"]["first_seqno_recovery"]["messages"] >= 1
    # unicast3 needed no resync at all: the receiver kept its window (CLOSING) across the asymmetric split
    assert fixed.summary.checks["retransmission"].details["sync"] == {}, fixed.summary.checks["retransmission"]
    assert fixed.summary.counts["missing_deliveries"] == 0
