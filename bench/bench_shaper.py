"""The NFQUEUE shaper's rate and its queue limit, measured from outside with plain UDP probes in a network namespace
of its own (bench.shaper_netns: the real shaper process behind the controller's queue chain): the rate it delivers
against the `rate_kbit` asked at 1, 10 and 100 Mbit/s, offered twice that (ratio delivered/asked: 1.00x is exact),
and the growth of its RSS over a 60 s flood at twice a 10 Mbit/s rate (ratio: RSS after / before; the note says what an
unbounded queue would hold by the flood's end, offered minus the rate's worth: 70 MB). The queue holds at most
`limit_pkts` (1000: about 1 MB of such packets), so the growth stays flat however long the flood."""
from __future__ import annotations

from bench import shaper_netns
from chaos.faults.grudge import DEFAULT_LIMIT_PKTS
from chaos.net.backends import capabilities

# rate asked -> datagram payload: at most ~3k datagrams/s offered, what the probes' Python sender keeps paced on a
# loaded machine (the namespace's loopback carries 8 KB datagrams whole)
RATES_KBIT = {1_000: 1000, 10_000: 1000, 100_000: 8000}
FLOOD_RATE_KBIT = 10_000
OVERLOAD = 2.0  # offered / asked
MB = 1 << 20


def _rate_name(rate_kbit: int) -> str:
    return f"shaper delivered rate at rate_kbit={rate_kbit}"


def _memory_name(seconds: float) -> str:
    return f"shaper RSS growth over a {seconds:g} s flood at 2x rate_kbit={FLOOD_RATE_KBIT}"


def _rate_row(rate_kbit: int, payload_bytes: int, seconds: float) -> dict:
    got = shaper_netns.in_own_namespace({"rate_kbit": rate_kbit}, offered_kbit=OVERLOAD * rate_kbit, seconds=seconds,
                                        payload_bytes=payload_bytes)
    bits = shaper_netns.packet_bits(payload_bytes)
    delivered_kbit = got["received"] * bits / got["span_s"] / 1000 if got["span_s"] else 0.0
    offered_kbit = got["sent"] * bits / got["send_s"] / 1000
    return {"name": _rate_name(rate_kbit), "value": delivered_kbit, "unit": "kbit/s", "baseline": float(rate_kbit),
            "ratio": delivered_kbit / rate_kbit, "better": "higher",
            "note": f"offered {offered_kbit:.0f} kbit/s for {got['send_s']:.1f} s ({got['sent']} datagrams, "
                    f"{bits // 8} B packets), {got['received']} arrived, {got['queue_full']} dropped at the queue "
                    f"limit; delivered = arrived / (first send to last arrival); baseline: the rate asked"}


def _memory_row(seconds: float) -> dict:
    offered_kbit = OVERLOAD * FLOOD_RATE_KBIT
    got = shaper_netns.in_own_namespace({"rate_kbit": FLOOD_RATE_KBIT}, offered_kbit=offered_kbit, seconds=seconds)
    before_mb, after_mb = got["rss_before_kb"] / 1024, got["rss_after_kb"] / 1024
    bits = shaper_netns.packet_bits()
    excess_pkts = got["sent"] - got["send_s"] * FLOOD_RATE_KBIT * 1000 / bits
    return {"name": _memory_name(seconds), "value": after_mb - before_mb, "unit": "MB", "baseline": before_mb,
            "ratio": after_mb / before_mb, "better": "lower",
            "note": f"RSS {before_mb:.1f} -> {after_mb:.1f} MB (ratio: after / before; baseline: its RSS before the "
                    f"flood); {got['sent']} datagrams offered at {offered_kbit:.0f} kbit/s, {got['queue_full']} "
                    f"dropped at the queue limit ({DEFAULT_LIMIT_PKTS} packets, "
                    f"{DEFAULT_LIMIT_PKTS * bits / 8 / MB:.1f} MB); an unbounded queue would hold "
                    f"{excess_pkts * bits / 8 / MB:.0f} MB by the end (offered minus the rate's worth)"}


def run(quick: bool) -> list[dict]:
    rate_s, flood_s = (2.0, 10.0) if quick else (5.0, 60.0)
    ok, detail = capabilities()["nfqueue"]
    if not ok:
        return [{"name": name, "value": None, "unit": unit, "baseline": None, "ratio": None, "better": better,
                 "note": f"not available here: {detail}"}
                for name, unit, better in [*((_rate_name(r), "kbit/s", "higher") for r in RATES_KBIT),
                                           (_memory_name(flood_s), "MB", "lower")]]
    rows = [_rate_row(rate_kbit, payload_bytes, rate_s) for rate_kbit, payload_bytes in RATES_KBIT.items()]
    return rows + [_memory_row(flood_s)]
