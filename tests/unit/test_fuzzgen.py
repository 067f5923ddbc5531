"""The fuzz generator (chaos.fuzz.gen): one seed gives the same datagrams, every registered message type and every
mutation class is generated, every field meets its boundary values, window edges come from the target's state,
and node.wire decodes exactly the datagrams meant to be well-formed and rejects the others with WireError only."""
from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.fuzz import gen as fuzzgen
from node import wire
from node.errors import WireError

MEMBERS = ("n1", "n2", "n3")
BOOT = 1_795_433_132_131
STATE_N1 = {  # the shape of a node's /state, trimmed to what the generator reads
    "node": "n1", "boot": BOOT, "view": {"view_id": ["n1", 4], "members": list(MEMBERS)},
    "layers": {
        "unicast": {"config": {"window_capacity": 50_000}, "peers": {
            "n2": {"send": {"conn_id": 136_802_304, "low": 5, "highest_sent": 9, "unacked": 4},
                   "recv": {"conn_id": 4_242, "highest_delivered": 17, "highest_received": 20}},
            "n3": {"send": None, "recv": {"conn_id": 77, "highest_delivered": 0, "highest_received": 0}}}},
        "multicast": {"config": {"capacity": 16_384},
                      "send": {"low": 3, "highest_sent": 103, "acks": {"n2": 3, "n3": 100}},
                      "windows": {"n2": {"low": 100, "highest_received": 102},
                                  "n3": {"low": 0, "highest_received": 0}}}}}


def make_context(run_id: str = "run-fuzz") -> fuzzgen.Context:
    n1 = fuzzgen.target_view(STATE_N1)
    n2 = fuzzgen.TargetView("n2", boot=BOOT + 5, view_coord="n1", view_n=4, ucast_capacity=50_000,
                            mcast_capacity=16_384, mcast_tx_low=0, mcast_tx_high=0)
    return fuzzgen.Context(run_id, MEMBERS, (n1, n2), {"n1": BOOT, "n2": BOOT + 5, "n3": BOOT + 9})


CTX = make_context()
CID = CTX.cluster_id


def cases(seed: int = 1, count: int = 1000, **kw) -> list[fuzzgen.Case]:
    return list(fuzzgen.generate(seed, count, CTX, **kw))


def decode(case: fuzzgen.Case):
    """node.wire's verdict on a case: the decoded triple, or the WireError (any other exception propagates)."""
    try:
        return wire.decode_datagram_from(case.data, CID)
    except WireError as exc:
        return exc


def test_one_seed_gives_the_same_datagrams_and_another_seed_others():
    first, again, other = cases(5, 300), cases(5, 300), cases(6, 300)
    assert first == again
    assert [c.data for c in first] != [c.data for c in other]
    assert cases(5, 40) == first[:40]  # a shorter run is a prefix: --count does not change earlier datagrams


def test_the_context_decides_window_values_so_it_is_part_of_the_seed():
    moved = fuzzgen.Context(CTX.run_id, MEMBERS, (fuzzgen.TargetView("n1", view_n=99), CTX.targets[1]), CTX.boots)
    assert [c.data for c in fuzzgen.generate(5, 300, moved)] != [c.data for c in cases(5, 300)]


def test_every_registered_message_type_has_a_layout_and_is_generated_well_formed():
    registered = {cls.__name__ for cls in wire.message_types().values()}
    assert set(fuzzgen.layouts()) == set(wire.message_types())
    valid_types = Counter(t for c in cases(2, 1000) if c.mutation == "valid" for t in c.types)
    assert set(valid_types) == registered


def test_every_mutation_class_appears_in_every_twenty_datagrams():
    generated = cases(3, 200)
    for start in range(0, 200, 20):
        assert {c.mutation for c in generated[start:start + 20]} == set(fuzzgen.MUTATIONS)


def test_every_field_of_every_type_meets_its_boundary_values():
    wanted = {f"{wire.message_types()[code].__name__}.{f.name}" for code, layout in fuzzgen.layouts().items()
              for f in layout}
    boundary = [c for c in cases(4, 6000) if c.mutation == "boundary"]
    assert {re.match(r"(\w+\.\w+)", c.detail).group(1) for c in boundary} == wanted
    assert any(c.detail.startswith("BcastState.low_seqno=18446744073709551615 (max of u64)") for c in boundary)
    assert any(c.detail.startswith("UnicastAck.conn_id=0 (0 of u32)") for c in boundary)


def test_mutated_datagrams_are_rejected_with_wire_error_and_the_rest_decode_to_the_same_bytes(monkeypatch):
    # node.wire decodes seqno lists longer than its encoder sends (as many as a datagram holds): lift the
    # encoder's limit so that those re-encode too
    for cls in (wire.UnicastXmitReq, wire.Nakack4XmitReq):
        monkeypatch.setattr(cls, "MAX_SEQNOS", 0xFFFF)
    by_class = Counter()
    for case in cases(7, 3000):
        verdict = decode(case)
        if case.well_formed:
            assert not isinstance(verdict, WireError), (case.detail, verdict)
            sender, incarnation, messages = verdict
            assert wire.encode_datagram(CID, sender, messages, incarnation) == case.data, case.detail
        else:
            assert isinstance(verdict, WireError), case.detail
            by_class[case.mutation] += 1
    for mutation in ("boundary", "unknown_type", "truncated", "oversized", "bad_count", "header"):
        assert by_class[mutation] > 0, mutation


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**63), count=st.integers(min_value=1, max_value=120))
def test_any_seed_is_deterministic_and_only_ever_yields_wire_error_for_bad_datagrams(seed, count):
    generated = list(fuzzgen.generate(seed, count, CTX))
    assert generated == list(fuzzgen.generate(seed, count, CTX))
    for case in generated:
        verdict = decode(case)  # any exception other than WireError fails the test here
        assert isinstance(verdict, WireError) != case.well_formed, (seed, case.index, case.detail)
        assert len(case.data) <= wire.MAX_DATAGRAM_BYTES


def test_window_edges_come_from_the_targets_state():
    gen = fuzzgen.Generator(1, CTX)
    code = {cls.__name__: c for c, cls in wire.message_types().items()}
    # n1's receive entry for n2's unicasts: delivered 17, received 20, capacity 50000
    assert gen.edges(code["UnicastData"], 8, "n1", "n2") == [16, 17, 18, 19, 20, 21, 50_016, 50_017, 50_018]
    # n1's send entry toward n2: low 5, highest sent 9
    assert gen.edges(code["UnicastAck"], 8, "n1", "n2") == [4, 5, 6, 8, 9, 10, 50_004, 50_005, 50_006]
    # n1's multicast window for n2: low 100, highest received 102, capacity 16384
    assert gen.edges(code["BcastState"], 8, "n1", "n2") == [99, 100, 101, 102, 103, 16_483, 16_484, 16_485]
    assert gen.edges(code["ViewMsg"], 8, "n1", "n3") == [3, 4, 5]
    assert 4_242 in gen.conn_ids("n1", "n2") and 136_802_305 in gen.conn_ids("n1", "n2")


def test_window_edge_and_conn_id_datagrams_carry_those_values():
    gen = fuzzgen.Generator(9, CTX)
    checked = Counter()
    for case in gen.cases(1500):
        if case.mutation not in ("window_edge", "conn_id"):
            continue
        (msg,) = wire.decode_datagram_from(case.data, CID)[2]
        field = re.match(r"\w+\.(\w+)", case.detail).group(1)
        value = getattr(msg, "n" if field == "n" else field)
        if case.mutation == "conn_id":
            assert value in gen.conn_ids(case.target, case.src), case.detail
        else:
            edges = gen.edges(msg.TYPE, 8, case.target, case.src)
            assert set(value if isinstance(value, tuple) else [value]) <= set(edges), case.detail
        checked[case.mutation] += 1
    assert checked["window_edge"] > 50 and checked["conn_id"] > 30


def test_sources_are_members_and_a_share_is_spoofed_from_another_namespace():
    generated = cases(11, 2000)
    for case in generated:
        assert case.target in ("n1", "n2") and case.src in MEMBERS and case.via in MEMBERS
        assert case.src != case.target and case.via != case.target
    spoofed = sum(c.via != c.src for c in generated) / len(generated)
    assert 0.2 < spoofed < 0.4
    assert not any(c.via != c.src for c in cases(11, 500, spoof_pct=0))


def test_targets_and_mutations_can_be_narrowed():
    narrowed = list(fuzzgen.generate(1, 300, CTX, targets=["n2"], mutations=("truncated", "header")))
    assert {c.target for c in narrowed} == {"n2"} and {c.mutation for c in narrowed} == {"truncated", "header"}
    with pytest.raises(ValueError, match="mutation classes"):
        fuzzgen.Generator(1, CTX, mutations=("nonsense",))


def test_target_view_reads_the_windows_of_a_state_document():
    view = CTX.target("n1")
    assert (view.boot, view.view_coord, view.view_n, view.ucast_capacity, view.mcast_capacity) == \
        (BOOT, "n1", 4, 50_000, 16_384)
    assert view.peers["n2"] == fuzzgen.PeerWindows(ucast_rx_conn=4_242, ucast_rx_low=17, ucast_rx_high=20,
                                                   ucast_tx_conn=136_802_304, ucast_tx_low=5, ucast_tx_high=9,
                                                   mcast_rx_low=100, mcast_rx_high=102, mcast_ack=3)
    assert view.peers["n3"].ucast_tx_conn is None and view.peers["n3"].mcast_ack == 100
    bare = fuzzgen.target_view({"node": "n9", "layers": {}})  # a node without unicast/multicast layers
    assert bare.peers == {} and bare.view_n == 0


def test_the_context_survives_json_so_a_record_can_regenerate():
    import json

    assert fuzzgen.Context.from_dict(json.loads(json.dumps(CTX.as_dict()))) == CTX


def test_cases_survive_their_record():
    for case in cases(12, 200):
        assert fuzzgen.Case.from_record(case.as_record()) == case


def test_only_the_seeded_generator_draws_no_global_randomness_or_clock(monkeypatch):
    import random
    import time

    def forbidden(*_args, **_kwargs):
        raise AssertionError("fuzzgen drew from the global random module or the clock")

    for name in ("random", "randrange", "randint", "choice", "shuffle", "randbytes", "getrandbits"):
        monkeypatch.setattr(random, name, forbidden)
    for name in ("time", "monotonic"):
        monkeypatch.setattr(time, name, forbidden)
    assert len(list(fuzzgen.generate(21, 300, CTX))) == 300
