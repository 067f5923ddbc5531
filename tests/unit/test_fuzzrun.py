"""The fuzz driver's pure parts (chaos.fuzz.record, chaos.fuzz.run, chaos.fuzz.shrink, chaos.fuzz.campaign, chaos.wire.inject):
records that replay byte for byte (also from the header alone), selections, retargeting to another run, counter
deltas, stuck streams, culprits, delta debugging, the fragmentation of large datagrams, refusals of foreign
addresses, and usage errors with exit code 2."""
from __future__ import annotations

import json

import pytest
from scapy.layers.inet import IP, UDP, defragment

from chaos.cli.main import main as splitlab
from chaos.fuzz import gen as fuzzgen, record as fuzzrecord, run as fuzzrun, shrink as fuzzshrink
from chaos.wire import inject
from chaos.wire.probe import Endpoint
from chaos.net.shaper import ipudp
from node import wire
from node.errors import UsageError, WireError
from node.unicast.connid import first_conn_id, next_generation
from test_fuzzgen import CTX

HEADER = {"run_id": CTX.run_id, "seed": 3, "count": 150, "targets": ["n1", "n2"],
          "mutations": list(fuzzgen.MUTATIONS), "spoof_pct": fuzzgen.SPOOF_PCT, "context": CTX.as_dict()}


def generated(count: int = 150) -> list[fuzzgen.Case]:
    return list(fuzzgen.generate(3, count, CTX, ["n1", "n2"]))


def test_a_record_replays_the_same_datagrams_and_a_header_alone_regenerates_them(tmp_path):
    recorder = fuzzrecord.Recorder(tmp_path, "3", HEADER)
    for case in generated():
        recorder.write(case, ipudp.build("10.0.0.1", "10.0.0.2", 7100, 7100, case.data))
    recorder.close()
    header, cases, count = fuzzrecord.load_replay(recorder.jsonl_path)
    assert header["seed"] == 3 and count == 150 and list(cases) == generated()
    pcap = fuzzrecord.capture.read_pcap(recorder.pcap_path)
    assert [ipudp.parse(pkt).payload for _, pkt in pcap] == [c.data for c in generated()]
    header_only = fuzzrecord.Recorder(tmp_path / "h", "3", HEADER, lines=False)
    header_only.close()
    assert header_only.pcap_path is None
    _, cases, count = fuzzrecord.load_replay(header_only.jsonl_path)
    assert count == 150 and list(cases) == generated()


def test_a_foreign_or_missing_file_is_a_usage_error(tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"kind": "something-else"}) + "\n")
    for path in (other, tmp_path / "missing.jsonl"):
        with pytest.raises(UsageError):
            fuzzrecord.load_replay(path)


def test_select_takes_indexes_and_ranges():
    picked = [c.index for c in fuzzrecord.select(generated(), "3,10-12,149")]
    assert picked == [3, 10, 11, 12, 149]
    assert len(list(fuzzrecord.select(generated(), None))) == 150
    with pytest.raises(UsageError, match="--select"):
        list(fuzzrecord.select(generated(), "a-b"))


def test_retarget_rewrites_the_recorded_cluster_id_only():
    old, new = wire.cluster_id_of(CTX.run_id), wire.cluster_id_of("run-new")
    moved = list(fuzzrecord.retarget(generated(), CTX.run_id, "run-new"))
    for before, after in zip(generated(), moved):
        if before.data[3:7] == old.to_bytes(4, "big"):
            assert after.data == before.data[:3] + new.to_bytes(4, "big") + before.data[7:]
        else:  # foreign on purpose, or cut before the cluster id
            assert after.data == before.data
    assert sum(a.data != b.data for a, b in zip(generated(), moved)) > 100


def test_counter_deltas_by_reason_and_layer():
    before = {"dropped": {"truncated": 2}, "counters": {"datagrams_received": 10},
              "layers": {"unicast": {"counters": {"acks_discarded": 1}}}}
    after = {"dropped": {"truncated": 7, "absurd": 3}, "counters": {"datagrams_received": 30},
             "layers": {"unicast": {"counters": {"acks_discarded": 1}}, "multicast": {"counters": {"skipped": 9}}}}
    drops, layers = fuzzrun.counter_deltas(before, after)
    assert drops == {"absurd": 3, "truncated": 5}
    assert layers == {"runtime": {"datagrams_received": 20}, "multicast": {"skipped": 9}}


def _mstate(sent: int, windows: dict[str, int], buffered: tuple[int, int] = (0, 0)) -> dict:
    """A member that sent up to `sent`, with a window per peer at `low`, holding `buffered` (count, highest)."""
    count, highest = buffered
    return {"layers": {"multicast": {"send": {"highest_sent": sent}, "windows": {
        p: {"low": low, "highest_received": max(low, highest), "buffered": count,
            "counters": {"skipped": 5} if low > 100 else {}} for p, low in windows.items()}}}}


def test_stuck_streams_name_the_sender_receiver_and_where_each_stands():
    states = {"n1": _mstate(103, {"n2": 100}), "n2": _mstate(100, {"n1": 16387})}
    (stream,) = fuzzrun.stuck_streams(states)
    assert (stream["sender"], stream["receiver"], stream["layer"]) == ("n1", "n2", "multicast")
    assert "n2 delivered up to 16387 (skipped 5), n1 sent up to 103" in stream["detail"]
    states["n2"]["layers"]["multicast"]["windows"]["n1"]["low"] = 103
    assert fuzzrun.stuck_streams(states) == []


@pytest.mark.parametrize("forged, caught_up, ahead, ok", [(True, True, 1, True), (False, True, 1, False),
                                                           (True, False, 1, False), (True, True, 0, False)])
def test_after_forgeries_messages_short_of_caught_up_streams_are_counted_as_taken(monkeypatch, forged: bool,
                                                                                 caught_up: bool, ahead: int,
                                                                                 ok: bool):
    """Two members, one message short at n2: after well-formed forgeries, with every workload sent and every
    stream caught up, the check passes and counts it `taken_by_forgeries` if n2's window was ahead of n1 when the
    workload began (a forged message delivered in n1's name); without forgeries, with a stream behind, or with no
    window ahead, it fails."""
    names = ["n1", "n2"]

    def state(node: str, delivered: int, sent: int, low: int) -> dict:
        peer = names[1 - names.index(node)]
        return {"counters": {"delivered": delivered}, "view": {"members": names}, "workloads": [{"done": True}],
                "layers": {"liveness": {peer: {"heard": True}}, **_mstate(sent, {peer: low})["layers"]}}

    before = {"n1": state("n1", 0, 2, 2), "n2": state("n2", 0, 2, 2 + ahead)}
    after = {"n1": state("n1", 2, 3, 3), "n2": state("n2", 1, 3, 3 if caught_up else 2)}
    calls = iter([before] + [after] * 3)
    monkeypatch.setattr(fuzzrun, "_states_of", lambda cluster, nodes: next(calls))

    class Client:
        def unicast(self, *args, **kwargs) -> None: ...
        def multicast(self, *args, **kwargs) -> None: ...

    cluster = type("C", (), {"names": names, "client": lambda self, node: Client()})()
    settings = fuzzrun.Settings(targets=names, workload_count=1, deliver_timeout_s=0.0, forged=forged)
    result = fuzzrun.check_delivery(cluster, settings, lambda _: None)
    assert result["ok"] is ok, result
    assert result.get("taken_by_forgeries") == (1 if forged and caught_up else None), result
    if forged and caught_up:
        assert result["forged_ahead"] == ahead


def test_streams_count_the_seqnos_their_receivers_hold_above_what_the_sender_sent():
    """Delivered above the sender's highest (7), and buffered above it (at most as many as are buffered: 2 of the
    seqnos up to 120), but nothing a receiver holds at or below it."""
    states = {"n1": _mstate(103, {"n2": 95}, buffered=(1, 98)), "n2": _mstate(100, {"n1": 110}, buffered=(2, 120))}
    ahead = {(s["sender"], s["receiver"]): s["ahead"] for s in fuzzrun._streams(states)}
    assert ahead == {("n1", "n2"): 7 + 2, ("n2", "n1"): 0}


def test_a_unicast_window_on_another_generation_of_the_senders_stream_counts_as_ahead():
    """A forged SYNC-OK that answers a receiver's SYNC moves its window to its (low, conn_id): here an earlier
    generation of n1's stream, at 50,101 while n1 sent up to 100. The window follows n1's stream (n1's messages
    are below it): 50,001 seqnos ahead. A window of another stream holds none of n1's seqnos."""
    conn = first_conn_id(7)
    newer = next_generation(next_generation(conn))

    def states(recv_conn: int) -> dict:
        send = {"conn_id": newer, "highest_sent": 100, "unacked": 0}
        recv = {"conn_id": recv_conn, "highest_delivered": 50_101, "highest_received": 50_101, "buffered": 0}
        return {"n1": {"layers": {"unicast": {"peers": {"n2": {"send": send}}}}},
                "n2": {"layers": {"unicast": {"peers": {"n1": {"recv": recv}}}}}}

    (stream,) = fuzzrun._streams(states(next_generation(conn)))
    assert (stream["layer"], stream["ahead"], stream["stuck"]) == ("unicast", 50_001, False)
    (stream,) = fuzzrun._streams(states(first_conn_id(8)))
    assert stream["ahead"] == 0


def test_delivery_culprits_are_the_well_formed_datagrams_of_the_stuck_stream(tmp_path):
    recorder = fuzzrecord.Recorder(tmp_path, "3", HEADER)
    for case in generated(400):
        recorder.write(case, b"")
    recorder.close()
    stream = {"sender": "n2", "receiver": "n1", "layer": "multicast", "detail": "n2->n1 multicast"}
    (culprits,) = fuzzrun.delivery_culprits(recorder.jsonl_path, {"streams": [stream]}, ["n1", "n2", "n3"],
                                            CTX.run_id)
    assert culprits.cases and culprits.target == "n1" and culprits.check == "delivery"
    for case in culprits.cases:
        sender, _, messages = wire.decode_datagram_from(case.data, CTX.cluster_id)
        assert case.target == "n1" and sender == "n2" and any(48 <= m.TYPE < 80 for m in messages)


def test_decoded_shows_messages_or_the_reason_of_the_refusal():
    good = next(c for c in generated() if c.mutation == "valid")
    bad = next(c for c in generated() if c.mutation == "truncated")
    assert fuzzrecord.decoded(good, CTX.cluster_id).startswith(f"from '{good.src}' incarnation 0: ")
    assert fuzzrecord.decoded(bad, CTX.cluster_id).startswith("rejected by node.wire: bad datagram (truncated)")
    assert "; scapy reads: <SL  magic=b'SL'" in fuzzrecord.decoded(bad, CTX.cluster_id)


def test_large_datagrams_leave_as_fragments_that_reassemble():
    payload = bytes(range(256)) * 200
    pkt = ipudp.build("10.0.0.1", "10.0.0.2", 7100, 7100, payload)
    pieces = inject.fragment(pkt)
    assert len(pieces) == 35 and all(len(p) <= inject.MTU_BYTES for p in pieces)
    assert len({IP(p).id for p in pieces}) == 1
    (whole,) = defragment([IP(p) for p in pieces])
    assert bytes(whole[UDP].payload) == payload
    small = ipudp.build("10.0.0.1", "10.0.0.2", 7100, 7100, b"x")
    assert inject.fragment(small) == [small]


def test_the_injector_refuses_addresses_outside_the_run_before_opening_anything():
    eps = {"n1": Endpoint("n1", 1, "10.0.0.1"), "n2": Endpoint("n2", 2, "10.0.0.2")}
    with inject.Injector(eps) as injector:
        with pytest.raises(UsageError, match="between data addresses of this run"):
            injector.send_packet("n1", ipudp.build("10.0.0.1", "8.8.8.8", 7100, 7100, b"x"))
        with pytest.raises(UsageError, match="between data addresses of this run"):
            injector.send_packet("n1", ipudp.build("192.0.2.7", "10.0.0.2", 7100, 7100, b"x"))
        with pytest.raises(UsageError, match="not a node of this run"):
            injector.packet("n1", "n9", b"x")
        assert injector._socks == {}


@pytest.mark.parametrize("argv, fragment", [
    (["--count", "0"], "--count must be at least 1"),
    (["--rate", "-1"], "--rate must be >= 0"),
    (["--mutations", "valid,nonsense"], "unknown mutation class(es) nonsense"),
    (["--select", "1-3"], "--select needs --replay FILE"),
    (["--spoof-pct", "101"], "--spoof-pct must be within 0..100"),
])
def test_bad_usage_exits_2_with_one_line(argv, fragment, capsys):
    assert splitlab(["fuzz", *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.startswith("splitlab fuzz: error:")


def test_a_node_that_stopped_answering_blames_every_well_formed_datagram_in_a_members_name(tmp_path):
    recorder = fuzzrecord.Recorder(tmp_path, "3", HEADER)
    for case in generated(400):
        recorder.write(case, b"")
    recorder.close()
    (culprits,) = fuzzrun.delivery_culprits(recorder.jsonl_path, {"gone": "n2", "detail": "n2 exited"},
                                            ["n1", "n2", "n3"], "run-other")
    expected = []
    for case in fuzzrecord.retarget(generated(400), CTX.run_id, "run-other"):
        try:
            sender = wire.decode_datagram_from(case.data, wire.cluster_id_of("run-other"))[0]
        except WireError:
            continue
        if sender in ("n1", "n2", "n3"):
            expected.append(case)
    assert culprits.cases == expected and len(expected) > 100 and culprits.symptom == "n2 exited"
    assert {c.target for c in expected} == {"n1", "n2"}  # a broken peer can break the node in turn


@pytest.mark.parametrize("needed", [{37}, {3, 90}, {0, 50, 99}])
def test_ddmin_finds_the_datagrams_that_break_only_together(needed):
    calls = []

    def breaks(subset):
        calls.append(len(subset))
        return needed <= set(subset)

    found, minimal = fuzzshrink.ddmin(list(range(100)), breaks, max_trials=500)
    assert set(found) == needed and minimal
    assert len(calls) < 150


def test_ddmin_stops_after_its_trials_with_a_smaller_set_that_still_breaks():
    calls = []

    def breaks(subset):
        calls.append(subset)
        return {1, 2} <= set(subset)

    found, minimal = fuzzshrink.ddmin(list(range(1000)), breaks, max_trials=4)
    assert not minimal and len(calls) == 4 and {1, 2} <= set(found) and len(found) == 63


def test_the_fuzzer_refuses_a_run_on_other_hosts_naming_them(tmp_path):
    from chaos.cluster.model import Cluster, NodeInfo

    nodes = [NodeInfo("n1", "c1", "10.77.0.2", "10.78.0.2", 11, host="host1"),
             NodeInfo("n2", "c2", "10.77.0.3", "10.78.0.3", 12, host="host2")]
    cluster = Cluster("261124-000000-abcd", tmp_path, "token", nodes)
    with pytest.raises(UsageError, match="nodes on host1, host2: the fuzzer sends from sockets of this process"):
        fuzzrun.check_targets(cluster, fuzzrun.Settings(targets=["n1"]))
    fuzzrun.check_targets(Cluster("261124-000000-abcd", tmp_path, "token",
                                  [NodeInfo("n1", "c1", "10.77.0.2", "10.78.0.2", 11)]), fuzzrun.Settings(["n1"]))


class _FakeClock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds


def _counts(per_poll):
    """read_received giving each member's cumulative count, polls in order (None: a member does not answer)."""
    totals = iter(per_poll)
    return lambda: next(totals)


def test_settling_waits_until_every_member_has_worked_off_its_backlog():
    clock = _FakeClock()
    # n3 still reads forged datagrams its socket buffered for two intervals; then only heartbeats
    polls = [{"n1": 0, "n3": 0}, {"n1": 2, "n3": 4000}, {"n1": 4, "n3": 6000}, {"n1": 6, "n3": 6010}]
    quiet, waited_s, rates = fuzzrun.wait_until_quiet(_counts(polls), 30.0, clock=clock, sleep=clock.sleep)
    assert quiet and waited_s == pytest.approx(1.5)
    assert rates == {"n1": 4.0, "n3": 20.0}


def test_settling_gives_up_at_its_timeout_and_when_a_member_stops_answering():
    clock = _FakeClock()
    busy = ({"n1": 1000 * i} for i in range(100))
    quiet, waited_s, rates = fuzzrun.wait_until_quiet(lambda: next(busy), 2.0, clock=clock, sleep=clock.sleep)
    assert not quiet and waited_s == pytest.approx(2.0) and rates == {"n1": 2000.0}
    clock = _FakeClock()
    polls = [{"n1": 0}, {"n1": 5000}, None]
    quiet, waited_s, _ = fuzzrun.wait_until_quiet(_counts(polls), 30.0, clock=clock, sleep=clock.sleep)
    assert not quiet and waited_s == pytest.approx(1.0)
