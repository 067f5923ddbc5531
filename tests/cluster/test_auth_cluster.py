"""The authenticated wire on real containers (`splitlab up --auth`): two nodes with a key of the run deliver a
unicast workload while a message rule of the NFQUEUE shaper drops the first messages out of their bundle (the shaper
signs the rewritten datagrams again: not one is refused); `splitlab chaos inject` without `--sign` is counted as
`unauthenticated` at the target and reaches no protocol; with `--sign` the same forged UnicastAck reaches the
unicast layer (discarded there, counted: its conn_id is no connection's)."""
from __future__ import annotations

import stat

import pytest

from chaos.cli.main import main as splitlab
from chaos.cluster.authkey import KEY_FILE
from chaos.faults.msgrules import MsgRule, action_spec
from chaos.net.shaper import control as shaper_control
from cluster_wait import wait_for
from node import wire

pytestmark = pytest.mark.splitlab_cluster
COUNT = 300
INJECT = ["chaos", "inject", "--from", "n2", "--to", "n1", "--type", "UnicastAck", "--field", "seqno=5",
          "--field", "conn_id=3"]


def test_an_authenticated_run_delivers_resigns_rewritten_bundles_and_drops_unsigned_injections(splitlab_net):
    run, net = splitlab_net(2, auth=True, node_env={n: {"SPLITLAB_MEMBERSHIP": "none", "SPLITLAB_MULTICAST": "none"}
                                                    for n in ("n1", "n2")})
    assert stat.S_IMODE((run.run_dir / KEY_FILE).stat().st_mode) == 0o600
    n1, n2 = run.client("n1"), run.client("n2")

    # a workload of bundles, some of whose messages the shaper drops: every rewritten datagram is signed again
    net.msg_fault(MsgRule(wire.UnicastData.TYPE, "n1", "n2", **action_spec("drop-first:5")))
    n1.unicast("n2", count=COUNT, size=100, rate=0)
    wait_for(lambda: n2.state()["counters"].get("delivered", 0) >= COUNT, 20, f"n2 delivering {COUNT} messages")
    net.fast()  # the shaper ends, writing its counters
    assert shaper_control.read_stats(run.run_dir, "n1").get("msg_drop") == 5
    assert n2.state()["dropped"].get("unauthenticated", 0) == 0, "a datagram the shaper rewrote lost its tag"

    def acks_discarded() -> int:
        return n1.state()["layers"]["unicast"]["counters"].get("acks_discarded", 0)

    def unauthenticated() -> int:
        return n1.state()["dropped"].get("unauthenticated", 0)

    discarded = acks_discarded()
    assert splitlab([*INJECT, "--run-id", run.run_id]) == 0
    wait_for(lambda: unauthenticated() == 1, 5, "n1 counting the unsigned injection as unauthenticated")
    assert acks_discarded() == discarded  # it reached no protocol

    assert splitlab([*INJECT, "--run-id", run.run_id, "--sign"]) == 0
    wait_for(lambda: acks_discarded() == discarded + 1, 5, "the signed injection reaching n1's unicast layer")
    assert unauthenticated() == 1
