"""The seeds' bugs in the real JGroups 2.12.2 (scenarios/jgroups/, node kind `jgroups`) on real containers:
JGRP-1873 reproduced in the real UNICAST2 by protocol-aware faults on JGroups' own wire, and the UNICAST2 design
document's motivating bug absent from the real code (a negative control). Each asserts the mechanism's signature
in the real nodes' history, not only the verdict."""
from __future__ import annotations

import pytest

from scenario_helpers import held

pytestmark = pytest.mark.splitlab_cluster


def test_jgrp1873_in_the_real_unicast2_asks_forever_for_what_a_stale_stable_purged(run_variants) -> None:
    runs = run_variants("jgroups/jgrp1873")
    real = runs["unicast2"]
    assert real.verdict.held, held(runs)
    assert real.summary.checks["delivery"].status == "fail"
    endless = real.summary.checks["endless_retransmission"].details
    worst = endless["examples"][0]
    assert (worst["requester"], worst["sender"], worst["proto"]) == ("n2", "n1", "UNICAST2"), worst
    assert worst["sender_reported_missing"] >= 3, worst  # 2.12.2's UNICAST2: "not found in retransmission table"
    # B asked for the first seqno once the window was gone: the resync path the bug runs through
    assert real.summary.checks["retransmission"].details["sync"]["first_seqno_recovery"]["messages"] >= 1


def test_the_unicast2_design_motivation_does_not_exist_in_the_real_unicast2(run_variants) -> None:
    runs = run_variants("jgroups/unicast2_motivation", ["unicast2"])
    real = runs["unicast2"]
    assert real.verdict.held, held(runs)
    assert real.summary.counts["missing_deliveries"] == 0 and real.summary.counts["deliveries"] == 40
    # the new window was opened by a first-seqno request, as 2.12.2's UNICAST2 does since conn_ids (2.8.0)
    assert real.summary.checks["retransmission"].details["sync"]["first_seqno_recovery"]["messages"] >= 1
