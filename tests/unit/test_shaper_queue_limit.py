"""The shaper's queue limit (netem's `limit`), on the pure engine in virtual time: a rate-limited flood keeps
about rate * time + limit packets and drops the rest as `queue_full`, as netem would; the limit is 1000 unless a
fault says otherwise, per destination; delay alone and messages put off by a rule are bounded the same way; a
reload keeps what waits; and `limit_pkts` is validated where a link fault is written (text, scenario files).
One test floods the real shaper process behind real iptables rules with plain UDP sockets, in a network namespace
of its own (skipped without root)."""
from __future__ import annotations

import bisect
import os
import shutil

import pytest

from bench import shaper_netns
from chaos.faults.grudge import DEFAULT_LIMIT_PKTS, LinkFault, parse_link_fault, parse_matrix
from chaos.faults.msgrules import MsgRule
from chaos.harness.load import load_text
from chaos.net.shaper.engine import Engine
from node import wire
from node.errors import UsageError
from test_chaos_shaper_engine import CID, B, C, spec, udp
from test_scenario_validation import GOOD, broken, problems

PAYLOAD_BYTES = shaper_netns.PAYLOAD_BYTES  # 1000
PACKET_BITS = shaper_netns.packet_bits()  # what the rate counts: the IP packet, 1,028 bytes
OFFERED_BPS = 5_000_000
RATE_KBIT = 2000


def flood(engine: Engine, seconds: float, bps: float = OFFERED_BPS, dsts: tuple[str, ...] = (B,)) -> dict:
    """Offer `bps` of 1000-byte datagrams toward each of `dsts` for `seconds` of virtual time; per destination
    the release times of what passes, and the longest wait."""
    interval_s = PAYLOAD_BYTES * 8 / bps
    count = round(seconds / interval_s)
    out = {dst: {"offered": count, "passed": [], "max_wait_s": 0.0} for dst in dsts}
    for i in range(count):
        now_s = i * interval_s
        for dst in dsts:
            verdict = engine.process(now_s, udp(b"x" * PAYLOAD_BYTES, dst=dst))
            if verdict.at_s is not None:
                out[dst]["passed"].append(verdict.at_s)
                out[dst]["max_wait_s"] = max(out[dst]["max_wait_s"], verdict.at_s - now_s)
    return out


def netem_would_pass(seconds: float, limit_pkts: int) -> float:
    """What netem's rate and limit let through of a longer flood: the rate's worth, plus a full queue."""
    return seconds * RATE_KBIT * 1000 / PACKET_BITS + limit_pkts


def test_a_rate_limited_flood_keeps_rate_times_time_plus_the_limit_and_counts_the_rest_as_queue_full():
    """2 Mbit/s asked, 5 Mbit/s offered for 6 s: 3,750 datagrams, of which netem keeps ~2,460 and drops ~1,290."""
    engine = Engine(spec(links={B: LinkFault(rate_kbit=RATE_KBIT)}))
    got = flood(engine, 6.0)[B]
    passed = len(got["passed"])
    assert got["offered"] == 3750
    assert abs(passed - netem_would_pass(6.0, DEFAULT_LIMIT_PKTS)) <= 2, passed
    assert engine.stats["queue_full"] == 3750 - passed
    # the queue's delay stays within a full queue's serialisation (one packet more: the one being sent)
    assert got["max_wait_s"] <= (DEFAULT_LIMIT_PKTS + 1) * PACKET_BITS / (RATE_KBIT * 1000)
    assert got["passed"] == sorted(got["passed"])  # the rate sends them in order


def test_the_default_limit_is_netems_1000_and_a_faults_limit_pkts_holds_per_destination():
    assert DEFAULT_LIMIT_PKTS == 1000 and LinkFault().limit_pkts == 1000
    engine = Engine(spec(links={B: LinkFault(rate_kbit=RATE_KBIT, limit_pkts=300),
                                C: LinkFault(rate_kbit=RATE_KBIT)}))
    got = flood(engine, 4.0, dsts=(B, C))
    assert abs(len(got[B]["passed"]) - netem_would_pass(4.0, 300)) <= 2
    assert abs(len(got[C]["passed"]) - netem_would_pass(4.0, 1000)) <= 2
    assert engine.stats["queue_full"] == 2 * got[B]["offered"] - len(got[B]["passed"]) - len(got[C]["passed"])


def most_in_flight(arrivals: list[tuple[float, list[float]]]) -> int:
    """The most packets waiting at an arrival, from (arrival time, release times of what it let wait), in time
    order: what arrived before and is released after it (a fixed delay: release times only grow)."""
    release_s: list[float] = []
    most = 0
    for now_s, released_s in arrivals:
        most = max(most, len(release_s) - bisect.bisect_right(release_s, now_s))
        release_s += released_s
    return most


@pytest.mark.parametrize("limit_pkts,interval_ms", [(500, 1.0), (DEFAULT_LIMIT_PKTS, 0.5)])
def test_delay_alone_holds_at_most_the_limit_in_flight(limit_pkts, interval_ms):
    """1 s of delay and a packet every `interval_ms`: twice the limit would wait; the queue keeps the limit."""
    engine = Engine(spec(links={B: LinkFault(delay_ms=1000, limit_pkts=limit_pkts)}))
    arrivals = []
    for i in range(round(3000 / interval_ms)):
        now_s = i * interval_ms / 1000
        at_s = engine.process(now_s, udp(b"x")).at_s
        arrivals.append((now_s, [] if at_s is None else [at_s]))
    assert most_in_flight(arrivals + [(3.0, [])]) == limit_pkts
    passed = sum(len(r) for _, r in arrivals)
    assert engine.stats["queue_full"] == len(arrivals) - passed > 0.3 * len(arrivals)


def test_packets_that_leave_at_once_are_never_dropped_for_the_limit():
    engine = Engine(spec(links={B: LinkFault(loss_pct=1, limit_pkts=1)}))
    verdicts = [engine.process(0.0, udp(b"x")) for _ in range(1000)]
    assert engine.stats["queue_full"] == 0 and sum(v.at_s == 0.0 for v in verdicts) == 1000 - engine.stats["lost"]


def test_duplicates_wait_in_the_same_queue():
    engine = Engine(spec(links={B: LinkFault(delay_ms=100, duplicate_pct=100, limit_pkts=5)}))
    verdicts = [engine.process(0.0, udp(b"x")) for _ in range(4)]
    # original 1 + copy 1, 2 + copy 2, 3 + no room for copy 3, then 4: full
    assert [(v.at_s is not None, len(v.extra)) for v in verdicts] == [(True, 1), (True, 1), (True, 0), (False, 0)]
    assert engine.stats["queue_full"] == 2


def test_messages_a_rule_puts_off_wait_in_the_destinations_queue():
    """A heartbeat put off by 1 s, one every 0.5 ms: without a link fault the destination's queue holds the
    default limit; the datagrams whose only message is dropped for the limit are gone entirely."""
    engine = Engine(spec(rules=[MsgRule(wire.Heartbeat.TYPE, "n1", "n2", "delay", ms=1000)]))
    arrivals = []
    for i in range(3000):
        now_s = i * 0.0005
        verdict = engine.process(now_s, udp(wire.encode_datagram(CID, "n1", [wire.Heartbeat(i)])))
        assert verdict.at_s is None  # nothing is left of the original
        arrivals.append((now_s, [at_s for at_s, _ in verdict.extra]))
    assert most_in_flight(arrivals + [(1.5, [])]) == DEFAULT_LIMIT_PKTS
    passed = sum(len(r) for _, r in arrivals)
    assert engine.stats["queue_full"] == len(arrivals) - passed > 0


def test_a_reload_keeps_what_waits_and_takes_the_new_limit():
    fault = LinkFault(delay_ms=1000, limit_pkts=3)
    engine = Engine(spec(links={B: fault}))
    assert [engine.process(0.0, udp(b"x")).at_s for _ in range(4)] == [1.0, 1.0, 1.0, None]
    engine = Engine(spec(links={B: fault}, generation=2), previous=engine)
    assert engine.process(0.5, udp(b"x")).at_s is None  # still full: the three wait until 1.0
    engine = Engine(spec(links={B: LinkFault(delay_ms=1000, limit_pkts=4)}, generation=3), previous=engine)
    assert engine.process(0.5, udp(b"x")).at_s == 1.5
    assert engine.process(1.0, udp(b"x")).at_s == 2.0  # the first three have left
    assert engine.stats["queue_full"] == 2


@pytest.mark.parametrize("text", ["limit_pkts=0", "limit_pkts=-5", "limit_pkts=1.5", "limit_pkts=lots",
                                  "limit_pkts=", "limit_pkts=100001"])
def test_limit_pkts_must_be_an_integer_of_at_least_one(text):
    with pytest.raises(UsageError, match=r"^limit_pkts must be an integer in 1\.\.100000 \(the packets a link's "
                                         r"queue holds\), got "):
        parse_link_fault("rate_kbit=2000," + text)
    for bad in (0, True, 2.0, "500"):
        with pytest.raises(UsageError, match="limit_pkts must be an integer"):
            LinkFault(rate_kbit=1, limit_pkts=bad)


def test_limit_pkts_is_read_from_the_shape_text_and_a_limit_alone_shapes_nothing():
    (fault,) = parse_matrix("n1->n2:rate_kbit=2000,limit_pkts=500", ["n1", "n2"]).values()
    assert fault == LinkFault(rate_kbit=2000, limit_pkts=500)
    assert fault.as_dict() == {"rate_kbit": 2000, "limit_pkts": 500}
    assert LinkFault(limit_pkts=500).empty and not fault.empty
    assert LinkFault(delay_ms=5).merged(LinkFault(loss_pct=1)).limit_pkts == 1000  # a default does not override
    assert LinkFault(delay_ms=5, limit_pkts=50).merged(LinkFault(loss_pct=1)).limit_pkts == 50


def test_scenario_files_take_limit_pkts_in_slow_and_shape_and_refuse_a_bad_one():
    slow = broken("    heal:\n", "    heal:\n  - at_s: 3\n    slow: {delay_ms: 20, limit_pkts: 500}\n"
                  "  - at_s: 4\n    shape: 'n1->n2:rate_kbit=2000,limit_pkts=50'\n", GOOD)
    assert [s.action for s in load_text(slow, "s.yaml").scenario.steps][-2:] == ["slow", "shape"]
    (line,) = problems(slow.replace("limit_pkts: 500", "limit_pkts: 0"))
    assert line.startswith("s.yaml:15: steps[3].slow.limit_pkts: "), line
    (line,) = problems(slow.replace("limit_pkts: 500", "limit_pkts: 2.5"))
    assert line.startswith("s.yaml:15: steps[3].slow.limit_pkts: "), line
    (line,) = problems(slow.replace("limit_pkts=50", "limit_pkts=0.5"))
    assert "limit_pkts must be an integer in 1..100000" in line, line


KERNEL_LIMIT_PKTS = 100  # a full queue drains in 0.4 s at 2 Mbit/s: the test stays short
in_namespace = pytest.mark.skipif(os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "ip", "iptables")),
                                  reason="needs root, unshare, ip and iptables: a network namespace of its own")


@in_namespace
def test_in_a_real_namespace_a_flood_gets_the_rates_worth_plus_one_full_queue_and_the_rest_is_queue_full():
    """5 Mbit/s of plain UDP datagrams (1,028-byte IP packets) offered for 2 s to the real shaper through
    rate_kbit=2000,limit_pkts=100: what arrives is what netem would let through (the rate's worth over the time
    they were sent, plus one full queue), not all ~1,200 late; the shaper's `queue_full` is exactly what did not
    arrive, and no packet waited longer than a full queue takes."""
    got = shaper_netns.in_own_namespace({"rate_kbit": RATE_KBIT, "limit_pkts": KERNEL_LIMIT_PKTS},
                                        offered_kbit=OFFERED_BPS / 1000, seconds=2.0, settle_ms=800)
    would = netem_would_pass(got["send_s"], KERNEL_LIMIT_PKTS)  # ~586 of 1,250
    assert abs(got["received"] - would) <= 0.05 * would and got["sent"] > 2 * would, (got, would)
    assert got["queue_full"] == got["sent"] - got["received"] and got["packets"] == got["sent"], got
    assert got["duplicates"] == 0 and got["reordered"] == 0 and got["queue"] == {}, got
    full_queue_ms = (KERNEL_LIMIT_PKTS + 1) * PACKET_BITS / RATE_KBIT
    assert got["max_delay_ms"] < full_queue_ms + 100, got
