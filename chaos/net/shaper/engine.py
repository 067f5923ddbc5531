"""The shaper's decisions, pure and seeded: given a packet and the time, what happens to it and when.

For each IPv4/UDP or IPv6/UDP packet toward a shaped peer:
0. a jammed peer (a jammed partition): the packet is held whole (`node.sim.jam.JamQueue`, the oldest dropped
   beyond the cap) and handed back, in the jam's release order, when a reload lifts the jam (`lifted`) or the
   shaper ends (`release_all`); nothing else applies to it;
1. message rules (if any for that peer): the datagram is dissected (splitlab's wire by chaos.wire.dissect, the
   real JGroups 2.12's by jgnode.wire); each message is kept, dropped, duplicated or diverted to a later time by
   the first matching rule; the original packet is rewritten to carry what is kept (a JGroups bundle rebuilt from
   its messages' bytes; a lone JGroups message is the whole datagram), and diverted or duplicated messages become
   packets of their own (`extra`);
2. the link fault of that peer, on what is left of the original: loss, corruption (one bit of the UDP
   payload, checksum made right), the queue's limit, rate (serialisation at `rate_kbit`), delay +- jitter
   (uniform or from iproute2's tables, chaos.net.shaper.disttable), reordering (that share of packets skips the
   delay) and duplication (a copy released with the original). Delay draws are correlated per destination as
   netem correlates them.
Packets diverted by message rules skip step 2.

Each destination's queue holds at most its link's `limit_pkts` (netem's `limit`; `DEFAULT_LIMIT_PKTS` for a peer
that only message rules name): what waits for a later release time (delayed, rate-limited, a duplicate of such a
packet, messages put off by a rule) is counted (`backlog.Backlog`) until that time, and a packet that would wait
in a full queue is dropped and counted as `queue_full`. As in netem's enqueue, the original meets the limit after
loss and corruption and before the rate, so a dropped packet takes no time at the rate; a rate-limited queue's
delay stays within `limit_pkts` packets' serialisation. Every random choice comes from one
`random.Random(seed)`, so a run with the same packets in the same order decides the same way.
"""
from __future__ import annotations

import random
import struct
from collections import Counter
from dataclasses import dataclass, field

from chaos.faults.grudge import DEFAULT_LIMIT_PKTS, LinkFault
from chaos.net.shaper import disttable, ipudp
from chaos.net.shaper.backlog import Backlog
from chaos.faults.msgrules import DROP, DUPLICATE, PASS, RuleBook
from chaos.net.shaper.spec import ShaperSpec
from jgnode import wire as jgwire
from node import wire
from node.errors import WireError
from node.sim.jam import JamQueue, outcome, release_all


@dataclass
class Verdict:
    """`at_s`: when to let the original go (None: drop it); `payload`: the rewritten original (None: as is);
    `extra`: (time, IP packet) pairs to send on the shaper's raw socket."""

    at_s: float | None
    payload: bytes | None = None
    extra: list[tuple[float, bytes]] = field(default_factory=list)


def _jg_type(message: jgwire.JgMessage) -> tuple[int, dict]:
    """A JGroups message's rule type code and fields (`jgnode.wire.classify`)."""
    name, fields = jgwire.classify(message)
    return jgwire.MESSAGE_TYPES[name], fields


class Engine:
    """Decides per packet for one shaper spec; `stats` counts what it did."""

    def __init__(self, spec: ShaperSpec, previous: "Engine | None" = None) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed + spec.generation)
        # the faults that do something, by destination (`empty` is asked once per spec, not once per packet)
        self.links: dict[str, LinkFault] = {ip: f for ip, f in spec.links.items() if not f.empty}
        self.limits_pkts = {ip: f.limit_pkts for ip, f in spec.links.items()}
        self.backlogs: dict[str, Backlog] = {}  # by destination: what waits there (its queue, for the limit)
        self.book = RuleBook(list(spec.rules))
        # the destinations that message rules name, by address (asked once per spec, not once per packet)
        self.rule_dsts = {ip: name for ip, name in spec.names.items() if self.book.for_dst(name)}
        self.busy_until_s: dict[str, float] = {}
        self.draws: dict[str, disttable.Correlated] = {}
        self.stats: Counter[str] = Counter()
        self.jams: dict[str, JamQueue[bytes]] = {}
        self.lifted: list[bytes] = []  # what the jams this spec lifted held, in release order: to send now
        self.last_lift: dict[str, int] = {}  # `jam.outcome` of the jams lifted last (a jammed partition's end)
        if previous is not None:
            self.book.carry_from(previous.book)
            self.busy_until_s = dict(previous.busy_until_s)
            self.backlogs = previous.backlogs  # what the old spec put off still waits, on the shaper's heap
            self.stats = previous.stats
            self.jams = {ip: q for ip, q in previous.jams.items() if ip in spec.jams}
            self.last_lift = previous.last_lift
            self.lifted = self._lift([q for ip, q in sorted(previous.jams.items()) if ip not in spec.jams])
        for ip, jam in spec.jams.items():
            if ip not in self.jams:
                self.jams[ip] = JamQueue(jam.release, jam.cap)

    def release_all(self) -> list[bytes]:
        """What every jam holds, in release order (the shaper is ending: nothing held may be lost)."""
        return self._lift([q for _, q in sorted(self.jams.items())])

    def _lift(self, queues: list[JamQueue[bytes]]) -> list[bytes]:
        """What `queues` hold, in release order, counted; `last_lift` says what they did when there were any."""
        out = release_all(queues, self.rng)
        self.stats["jam_released"] += len(out)
        if queues:
            self.last_lift = {**outcome(queues), "generation": self.spec.generation}
        return out

    @property
    def jammed(self) -> int:
        """Packets the jams hold now."""
        return sum(len(q) for q in self.jams.values())

    def process(self, now_s: float, raw: bytes) -> Verdict:
        pkt = ipudp.parse(raw)
        if pkt is None:
            self.stats["not_udp"] += 1
            return Verdict(now_s)
        self.stats["packets"] += 1
        dst = pkt.dst
        jam = self.jams.get(dst)
        if jam is not None:
            self.stats["jam_held"] += 1
            if jam.hold(raw) is not None:
                self.stats["jam_dropped"] += 1
            return Verdict(None)
        verdict = None
        dst_name = self.rule_dsts.get(dst)
        if dst_name is not None:
            pkt, verdict = self._messages(now_s, pkt, dst_name)
            if verdict.extra:
                verdict.extra = self._queued(now_s, dst, verdict.extra)
            if pkt is None:
                return verdict
        fault = self.links.get(dst)
        if fault is None:
            return verdict or Verdict(now_s)
        return self._link(now_s, pkt, fault, verdict)

    def _messages(self, now_s: float, pkt: ipudp.UdpPacket, dst: str) -> tuple[ipudp.UdpPacket | None, Verdict]:
        """Message rules on one datagram of either wire: splitlab's own (`SL...`, dissected by scapy) or the real
        JGroups 2.12's (`jgnode.wire`; a bundle's messages one by one, a lone message as the whole datagram)."""
        from chaos.wire import dissect  # scapy loads only when a message rule exists (images.AGENT_LAZY_IMPORTS)

        payload = pkt.payload
        if payload.startswith(b"SL"):
            try:
                datagram = dissect.dissect(payload)
            except (struct.error, ValueError, IndexError, TypeError):  # what scapy raises on mangled bytes
                datagram = None
            if datagram is None or datagram.count != len(datagram.messages):
                self.stats["not_dissected"] += 1
                return pkt, Verdict(now_s)
            messages = [(message.type, dissect.fields_of(message)) for message in datagram.messages]
            raws = [bytes(message) for message in datagram.messages]
            head = payload[:wire.HEAD_BYTES + datagram.sender_len]

            def rebuild(keep: list[int]) -> bytes:
                return wire.reseal(self.spec.key, payload, head + len(keep).to_bytes(2, "big")
                                   + b"".join(raws[i] for i in keep))
        elif jgwire.looks_like(payload):
            try:
                jg = jgwire.decode_datagram(payload)
            except WireError:
                self.stats["not_dissected"] += 1
                return pkt, Verdict(now_s)
            messages = [_jg_type(message) for message in jg.messages]

            def rebuild(keep: list[int]) -> bytes:
                return jgwire.rebuild(jg, keep)
        else:
            return pkt, Verdict(now_s)
        kept: list[int] = []
        later: dict[float, list[int]] = {}
        copies: list[int] = []
        changed = False
        for index, (msg_type, fields) in enumerate(messages):
            decision = self.book.decide(now_s, self.spec.node, dst, msg_type, fields)
            if decision == PASS:
                kept.append(index)
                continue
            changed = True
            self.stats[f"msg_{decision if isinstance(decision, str) else 'delayed'}"] += 1
            if decision == DROP:
                continue
            if decision == DUPLICATE:
                kept.append(index)
                copies.append(index)
            else:
                later.setdefault(float(decision), []).append(index)
        if not changed:
            return pkt, Verdict(now_s)

        def packet(keep: list[int]) -> bytes:
            return ipudp.with_payload(pkt, rebuild(keep))

        extra = [(at_s, packet(indices)) for at_s, indices in sorted(later.items())]
        if copies:
            extra.append((now_s, packet(copies)))
        if not kept:
            return None, Verdict(None, extra=extra)
        rewritten = packet(kept)
        return ipudp.parse(rewritten), Verdict(now_s, payload=rewritten, extra=extra)

    def _fits(self, now_s: float, dst: str) -> bool:
        """Whether one more packet fits in `dst`'s queue at `now_s`; counted as `queue_full` when it does not."""
        backlog = self.backlogs.get(dst)
        if backlog is None or backlog.held(now_s) < self.limits_pkts.get(dst, DEFAULT_LIMIT_PKTS):
            return True
        self.stats["queue_full"] += 1
        return False

    def _hold(self, dst: str, at_s: float) -> None:
        """Count a packet waiting in `dst`'s queue until `at_s`."""
        backlog = self.backlogs.get(dst)
        if backlog is None:
            backlog = self.backlogs[dst] = Backlog()
        backlog.hold(at_s)

    def _queued(self, now_s: float, dst: str, extra: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
        """`extra` (packets of its own toward `dst`) less those that would wait in a full queue; the others that
        wait are counted in it."""
        kept = []
        for at_s, data in extra:
            if at_s > now_s:
                if not self._fits(now_s, dst):
                    continue
                self._hold(dst, at_s)
            kept.append((at_s, data))
        return kept

    def _delay_draw(self, dst: str, corr_pct: float) -> float:
        """A uniform draw in [0, 1) for the delay toward `dst`, correlated with the last as netem does."""
        if dst not in self.draws:
            self.draws[dst] = disttable.Correlated(self.rng, corr_pct)
        return self.draws[dst].draw()

    def _link(self, now_s: float, pkt: ipudp.UdpPacket, fault: LinkFault, verdict: Verdict | None) -> Verdict:
        """The link fault on `pkt`, after the message rules' `verdict` (None: they had none for it)."""
        rng = self.rng
        dst = pkt.dst
        if fault.loss_pct and rng.random() * 100 < fault.loss_pct:
            self.stats["lost"] += 1
            return Verdict(None, extra=verdict.extra if verdict else [])
        payload = verdict.payload if verdict else None
        if fault.corrupt_pct and rng.random() * 100 < fault.corrupt_pct:
            payload = ipudp.flip_bit(pkt, rng)
            self.stats["corrupted"] += 1
        if not self._fits(now_s, dst):  # netem's `limit`: a full queue drops what arrives, before the rate
            return Verdict(None, extra=verdict.extra if verdict else [])
        at_s = now_s
        if fault.rate_kbit:
            start_s = max(now_s, self.busy_until_s.get(dst, 0.0))
            at_s = start_s + len(pkt.raw) * 8 / (fault.rate_kbit * 1000)
            self.busy_until_s[dst] = at_s
        if fault.reorder_pct and rng.random() * 100 < fault.reorder_pct:
            self.stats["reordered"] += 1
        elif fault.delay_ms or fault.jitter_ms:
            u = self._delay_draw(dst, fault.delay_corr_pct) if fault.jitter_ms else 0.0
            at_s += disttable.draw_delay_ms(fault.delay_ms, fault.jitter_ms, fault.distribution, u) / 1000
            self.stats["delayed"] += 1
        if at_s > now_s:
            self._hold(dst, at_s)
        extra = list(verdict.extra) if verdict else []
        if fault.duplicate_pct and rng.random() * 100 < fault.duplicate_pct:
            extra += self._queued(now_s, dst, [(at_s, payload if payload is not None else pkt.raw)])
            self.stats["duplicated"] += 1
        return Verdict(at_s, payload=payload, extra=extra)
