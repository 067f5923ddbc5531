"""The shaper's pure parts: IPv4/UDP bytes, message rules and the seeded per-packet engine."""
import random
import socket
import statistics
import struct

import pytest

from chaos.faults.grudge import LinkFault
from chaos.net.shaper import ipudp
from chaos.net.shaper.engine import Engine
from chaos.faults.msgrules import DROP, DUPLICATE, PASS, MsgRule, RuleBook, action_spec, parse_action
from chaos.net.shaper.spec import ShaperSpec, derive_seed
from node import wire
from node.errors import UsageError

A, B, C = "10.9.0.2", "10.9.0.3", "10.9.0.4"
CID = wire.cluster_id_of("r")
NAMES = {A: "n1", B: "n2", C: "n3"}


def udp(payload: bytes, dst: str = B) -> bytes:
    return ipudp.build(A, dst, 7100, 7100, payload)


def test_ipv4_build_parse_and_checksums():
    raw = udp(b"hello")
    pkt = ipudp.parse(raw)
    assert (pkt.src, pkt.dst, pkt.sport, pkt.dport, pkt.payload) == (A, B, 7100, 7100, b"hello")
    assert ipudp.checksum(raw[:20]) == 0  # a right IP header sums to zero
    pseudo = socket.inet_aton(A) + socket.inet_aton(B) + struct.pack("!BBH", 0, 17, len(raw) - 20)
    assert ipudp.checksum(pseudo + raw[20:]) in (0, 0xFFFF)
    flipped = ipudp.parse(ipudp.flip_bit(pkt, random.Random(1)))
    assert flipped.payload != b"hello" and len(flipped.payload) == 5
    assert sum(bin(x ^ y).count("1") for x, y in zip(flipped.payload, b"hello")) == 1
    assert ipudp.checksum(flipped.raw[:20]) == 0
    assert ipudp.parse(b"\x60" + b"\0" * 40) is None  # IPv6 is not ours


def test_parse_action():
    assert parse_action("delay:200") == ("delay", 200.0, 0)
    assert parse_action("drop-first:3") == ("drop-first", 0.0, 3)
    assert parse_action("duplicate") == ("duplicate", 0.0, 0)
    for bad, fragment in (("delay", "needs a time"), ("drop-nth:1.5", "whole count"), ("explode", "malformed"),
                          ("drop:3", "takes no argument")):
        with pytest.raises(UsageError, match=fragment):
            parse_action(bad)
    with pytest.raises(UsageError, match="count >= 1"):
        MsgRule(type=1, src="n1", dst="n2", action="drop-nth", n=0)


def test_rulebook_actions_and_matching():
    book = RuleBook([MsgRule(17, "n2", "n1", "drop-first", n=2, conn_id=4),
                     MsgRule(16, "n2", "n1", "drop-nth", n=2),
                     MsgRule(1, "n2", "n1", "hold", ms=100),
                     MsgRule(2, "n2", "n1", "duplicate")])
    ack = {"seqno": 1, "conn_id": 4}
    assert [book.decide(0, "n2", "n1", 17, ack) for _ in range(3)] == [DROP, DROP, PASS]
    assert book.decide(0, "n2", "n1", 17, {"conn_id": 5}) == PASS  # other conn_id
    assert book.decide(0, "n2", "n3", 17, ack) == PASS  # other receiver
    assert [book.decide(0, "n2", "n1", 16, {}) for _ in range(3)] == [PASS, DROP, PASS]
    assert book.decide(1.0, "n2", "n1", 1, {}) == pytest.approx(1.1)
    assert book.decide(1.05, "n2", "n1", 1, {}) == pytest.approx(1.1)  # held until the same release
    assert book.decide(1.2, "n2", "n1", 1, {}) == PASS  # spent
    assert book.decide(0, "n2", "n1", 2, {}) == DUPLICATE
    assert book.counters() == [3, 3, 3, 1]


def test_action_spec_of_the_new_actions():
    assert action_spec("drop-every:3") == {"action": "drop-every", "n": 3}
    assert action_spec("drop-range:4-9") == {"action": "drop-range", "seqno_lo": 4, "seqno_hi": 9}
    assert action_spec("hold:250.5") == {"action": "hold", "ms": 250.5}
    for bad, fragment in (("drop-range:4", "two whole seqnos"), ("drop-range:a-b", "malformed"),
                          ("drop-every:2-3", "takes one number"), ("delay:1.2.3", "needs a time"),
                          ("drop-every", "whole count")):
        with pytest.raises(UsageError, match=fragment):
            action_spec(bad)
    with pytest.raises(UsageError, match="drop-range has two seqnos"):
        parse_action("drop-range:1-2")  # the three-value form cannot carry it
    with pytest.raises(UsageError, match="0 <= A <= B"):
        MsgRule(type=16, src="n1", dst="n2", **action_spec("drop-range:5-3"))


def test_rulebook_drop_every_drop_range_and_the_first_flag():
    data = [{"seqno": s, "conn_id": 7, "first": s == 1} for s in range(1, 11)]
    every = RuleBook([MsgRule(16, "n1", "n2", first=False, **action_spec("drop-every:3"))])
    # seqno 1 (first) does not match; the 3rd, 6th and 9th matches are seqnos 4, 7, 10
    assert [m["seqno"] for m in data if every.decide(0, "n1", "n2", 16, m) == DROP] == [4, 7, 10]
    assert every.counters() == [9]
    ranged = RuleBook([MsgRule(16, "n1", "n2", **action_spec("drop-range:3-5")),
                       MsgRule(16, "n1", "n2", "drop-nth", n=1)])
    decisions = [ranged.decide(0, "n1", "n2", 16, m) for m in data]
    # 3..5 dropped by the range; what lies outside falls through: the second rule drops its first match, seqno 1
    assert [m["seqno"] for m, d in zip(data, decisions) if d == DROP] == [1, 3, 4, 5]
    assert ranged.decide(0, "n1", "n2", 17, {"seqno": 4}) == PASS  # another type
    first = RuleBook([MsgRule(16, "n1", "n2", "drop", first=True)])
    assert [m["seqno"] for m in data if first.decide(0, "n1", "n2", 16, m) == DROP] == [1]
    assert first.decide(0, "n1", "n2", 16, {"seqno": 1}) == PASS  # a message without the flag never matches


def spec(**kw):
    base = dict(run_id="r", node="n1", seed=5, names=NAMES)
    base.update(kw)
    return ShaperSpec(**base)


def test_spec_json_round_trip_and_destinations():
    s = spec(links={B: LinkFault(delay_ms=10)}, rules=[MsgRule(1, "n1", "n3", "drop")])
    again = ShaperSpec.from_json(s.to_json())
    assert again == s and again.destinations == [B, C]
    assert derive_seed(1, "x") == derive_seed(1, "x") != derive_seed(2, "x")


def test_engine_delay_jitter_loss_are_seeded_and_close_to_asked():
    fault = LinkFault(delay_ms=20, jitter_ms=5, loss_pct=10)
    runs = []
    for _ in range(2):
        engine = Engine(spec(links={B: fault}))
        runs.append([engine.process(float(i), udp(b"x" * 10)) for i in range(5000)])
    assert [v.at_s for v in runs[0]] == [v.at_s for v in runs[1]]  # same seed, same decisions
    kept = [v for v in runs[0] if v.at_s is not None]
    assert abs(100 * (1 - len(kept) / 5000) - 10) < 1.5
    delays_ms = [(v.at_s - i) * 1000 for i, v in enumerate(runs[0]) if v.at_s is not None]
    assert abs(statistics.fmean(delays_ms) - 20) < 0.3 and 15 <= min(delays_ms) and max(delays_ms) <= 25


def test_engine_duplicate_corrupt_reorder_rate():
    engine = Engine(spec(links={B: LinkFault(delay_ms=10, duplicate_pct=100, corrupt_pct=100)}))
    v = engine.process(0.0, udp(b"abc"))
    assert v.at_s == pytest.approx(0.01) and v.payload is not None and ipudp.parse(v.payload).payload != b"abc"
    assert v.extra == [(v.at_s, v.payload)]
    engine = Engine(spec(links={B: LinkFault(delay_ms=10, reorder_pct=100)}))
    assert engine.process(0.0, udp(b"abc")).at_s == 0.0  # skips the delay: overtakes delayed ones
    engine = Engine(spec(links={B: LinkFault(rate_kbit=8)}))  # 1 byte per ms
    size = len(udp(b"x" * 72))  # 100 bytes -> 100 ms each
    times = [engine.process(0.0, udp(b"x" * 72)).at_s for _ in range(3)]
    assert times == pytest.approx([size / 1000, 2 * size / 1000, 3 * size / 1000])
    assert Engine(spec(links={B: LinkFault(delay_ms=10)})).process(0.0, udp(b"x", dst=C)).at_s == 0.0  # unshaped


def test_engine_message_rules_rewrite_the_datagram():
    rules = [MsgRule(1, "n1", "n2", "drop"), MsgRule(2, "n1", "n2", "delay", ms=50)]
    engine = Engine(spec(rules=rules))
    data = wire.encode_datagram(CID, "n1", [wire.Heartbeat(1), wire.Pong(2), wire.Ping(3)])
    v = engine.process(0.0, udp(data))
    assert v.at_s == 0.0
    assert wire.decode_datagram(ipudp.parse(v.payload).payload, CID) == ("n1", [wire.Pong(2)])
    ((at_s, later),) = v.extra
    assert at_s == pytest.approx(0.05)
    assert wire.decode_datagram(ipudp.parse(later).payload, CID) == ("n1", [wire.Ping(3)])
    only_hb = engine.process(0.0, udp(wire.encode_datagram(CID, "n1", [wire.Heartbeat(2)])))
    assert only_hb.at_s is None and only_hb.extra == []  # nothing left: the packet is dropped
    untouched = udp(wire.encode_datagram(CID, "n1", [wire.Pong(1)]))
    assert engine.process(0.0, untouched).payload is None
    assert engine.process(0.0, udp(b"not a datagram")).at_s == 0.0


def test_engine_reload_keeps_rule_counters():
    rules = [MsgRule(1, "n1", "n2", "drop-first", n=1)]
    engine = Engine(spec(rules=rules))
    hb = udp(wire.encode_datagram(CID, "n1", [wire.Heartbeat(1)]))
    assert engine.process(0.0, hb).at_s is None
    engine = Engine(spec(rules=rules, generation=2), previous=engine)
    assert engine.process(0.0, hb).at_s == 0.0  # the first one was already dropped


def delays_of(fault: LinkFault, count: int = 20_000) -> list[float]:
    engine = Engine(spec(links={B: fault}))
    return [(engine.process(float(i), udp(b"x")).at_s - i) * 1000 for i in range(count)]


def test_engine_draws_delays_from_iproute2s_tables_with_the_asked_mean_and_spread():
    uniform = delays_of(LinkFault(delay_ms=50, jitter_ms=10))
    normal = delays_of(LinkFault(delay_ms=50, jitter_ms=10, distribution="normal"))
    pareto = delays_of(LinkFault(delay_ms=50, jitter_ms=10, distribution="pareto"))
    assert 40 <= min(uniform) and max(uniform) <= 60  # uniform: within delay +- jitter
    assert abs(statistics.fmean(normal) - 50) < 0.5 and abs(statistics.stdev(normal) - 10) < 0.5
    assert max(normal) > 75  # a normal table reaches beyond 2.5 sigma, uniform never does
    assert statistics.median(pareto) < statistics.fmean(pareto)  # heavy right tail
    assert abs(statistics.fmean(pareto) - 50) < 1.5


def test_engine_correlates_delay_as_netem_does():
    steady = delays_of(LinkFault(delay_ms=50, jitter_ms=10, delay_corr_pct=90), count=5000)
    fresh = delays_of(LinkFault(delay_ms=50, jitter_ms=10), count=5000)

    def mean_step(xs: list[float]) -> float:
        return statistics.fmean(abs(b - a) for a, b in zip(xs, xs[1:]))

    assert mean_step(steady) < mean_step(fresh) / 3  # each delay stays close to the last


def test_distribution_tables_come_from_iproute2_and_a_missing_one_is_a_clear_error(monkeypatch):
    from chaos.net.shaper import disttable
    from node.errors import EnvironmentProblem

    normal = disttable.table("normal")
    assert len(normal) == 4096 and abs(statistics.fmean(normal)) < 50
    assert abs(statistics.pstdev(normal) - disttable.DIST_SCALE) < 200  # mean 0, sigma 1, scaled by 8192
    monkeypatch.setattr(disttable, "TABLE_DIRS", ("/nonexistent",))
    with pytest.raises(EnvironmentProblem, match=r"no delay distribution table nosuch.dist in /nonexistent"):
        disttable.table("nosuch")


def test_engine_matches_the_first_flag_and_seqno_range_of_dissected_unicast_data():
    rules = [MsgRule(wire.UnicastData.TYPE, "n1", "n2", "drop", first=True),
             MsgRule(wire.UnicastData.TYPE, "n1", "n2", **action_spec("drop-range:3-4"))]
    engine = Engine(spec(rules=rules))
    msgs = [wire.UnicastData(s, 7, s == 1, b"p") for s in range(1, 6)]
    v = engine.process(0.0, udp(wire.encode_datagram(CID, "n1", msgs)))
    _, kept = wire.decode_datagram(ipudp.parse(v.payload).payload, CID)
    assert [m.seqno for m in kept] == [2, 5]
    assert spec(rules=rules) == ShaperSpec.from_json(spec(rules=rules).to_json())  # the new fields travel
