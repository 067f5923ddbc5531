"""Self-stabilisation on real containers: `splitlab chaos inject` forges, from n1's address, a `first` unicast
to n2 whose connection id compares newer than n1's real one. n2 replaces its window for n1 with it; n1's real
stream then compares older. Before issue 33, n2 dropped every later message of n1 as `wrong_conn` for good; now
n2 asks n1 (SYNC, rate-limited), n1's SYNC-OK names its stream, and n2's old window comes back: every new unicast
of n1 is delivered, once, within a few retransmit intervals plus one sync timeout."""
from __future__ import annotations

import pytest

from chaos.cli.main import main as splitlab
from cluster_wait import wait_for
from node.unicast.config import UnicastConfig
from node.unicast.connid import GEN_BITS, STREAM_MAX, first_conn_id

pytestmark = pytest.mark.splitlab_cluster
BEFORE, AFTER = 50, 200
# what the property promises after the forger stops: a few retransmit intervals plus one sync timeout
BOUND_S = (5 * UnicastConfig().xmit_interval_ms + UnicastConfig().sync_timeout_ms) / 1000 + 2.0  # + the sends


def test_a_forged_first_message_with_a_newer_conn_id_no_longer_silences_its_sender(splitlab_up):
    run = splitlab_up(2)
    n1, n2 = run.client("n1"), run.client("n2")

    def delivered() -> int:
        return n2.state()["counters"].get("delivered", 0)

    def recv_n1() -> dict:
        return n2.state()["layers"]["unicast"]["peers"]["n1"]["recv"]

    n1.unicast("n2", count=BEFORE, size=100, rate=0)
    wait_for(lambda: delivered() >= BEFORE, 20, f"n2 delivering n1's first {BEFORE} unicasts")
    real = recv_n1()["conn_id"]
    forged = first_conn_id(((real >> GEN_BITS) + 7) & STREAM_MAX)  # a newer stream in serial-number order
    assert splitlab(["chaos", "inject", "--run-id", run.run_id, "--from", "n1", "--to", "n2", "--type",
                     "UnicastData", "--field", "seqno=1", "--field", f"conn_id={forged}", "--field", "first=1"]) == 0
    wait_for(lambda: recv_n1()["conn_id"] == forged, 5, "n2 taking the forged first message's window")

    before = delivered()
    n1.unicast("n2", count=AFTER, size=100, rate=0)
    wait_for(lambda: delivered() - before >= AFTER, BOUND_S,
             f"n2 delivering n1's {AFTER} new unicasts after the forgery (state: {n2.state()['layers']['unicast']})")
    window = recv_n1()
    assert window["conn_id"] >> GEN_BITS == real >> GEN_BITS, window  # n1's own stream again
    assert delivered() - before == AFTER, "a new unicast was delivered twice"
    counters = n2.state()["layers"]["unicast"]["counters"]
    assert counters.get("windows_restored") == 1 and counters.get("wrong_conn", 0) >= 1, counters
