"""splitlab's pytest plugin on real containers: `splitlab_net` gives a Net bound to a fresh cluster that applies
a one-way cut (asymmetric hearing) and heals at teardown."""
from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.splitlab_cluster


def test_splitlab_net_binds_a_net_to_its_cluster(splitlab_net) -> None:
    cluster, net = splitlab_net(2, seed=3)
    assert net.cluster.run_id == cluster.run_id and net.seed == 3
    net.partition("n2<-n1")
    deadline = time.monotonic() + 5
    while "n1" in cluster.client("n2").hears():
        assert time.monotonic() < deadline, "n2 still hears n1 5 s after the one-way cut"
        time.sleep(0.25)
    assert "n2" in cluster.client("n1").hears()
    assert net.ledger.outstanding(), "the cut must be in the ledger, so the fixture's heal has something to undo"
