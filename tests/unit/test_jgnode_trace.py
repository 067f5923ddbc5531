"""What the JGroups node's trace makes of the messages crossing the bottom of the real stack (jgnode.trace): the
fate of each arrival from what happened during its pass up, found and missing resends, resends told apart from
first sends, and bounded state. The messages are bytes as JGroups' Message.writeTo writes them (jgnode.wire)."""
from __future__ import annotations

from typing import Any

import pytest

from jgnode import trace as trace_mod
from jgnode import wire as jg
from jgnode.trace import Trace
from node.core import make_payload

A = jg.JgUUID(1, 2)
B = jg.JgUUID(3, 4)


def data(seqno: int, conn_id: int = 5, first: bool = False, msg_id: str | None = None) -> bytes:
    payload = make_payload(msg_id or f"n1.7.{seqno}", 20)
    return jg.encode_message(jg.JgMessage(B, A, 0, payload, (jg.unicast2_header("DATA", seqno=seqno,
                                                                                 conn_id=conn_id, first=first),
                                                              jg.tp_header("run"))))


def control(kind: str, **fields: Any) -> bytes:
    return jg.encode_message(jg.JgMessage(B, A, 0, None, (jg.unicast2_header(kind, **fields), jg.tp_header("run"))))


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self.heard: list[str] = []
        self.trace = Trace("n2", lambda t, f: self.events.append((t, f)), self.heard.append)

    def of(self, type_: str) -> list[dict]:
        return [f for t, f in self.events if t == type_]

    def arrive(self, raw: bytes, *, deliver: tuple[str, ...] = (), send: tuple[bytes, ...] = ()) -> None:
        """One pass up the stack: during it the application gets `deliver` and the stack sends `send`."""
        self.trace.arrived(raw, "n1")
        for out in send:
            self.trace.departing(out, "n1")
        for msg_id in deliver:
            self.trace.delivered(msg_id)
        self.trace.settled()


def test_in_order_delivered_a_gap_buffered_then_delivered_and_a_repeat_a_duplicate():
    r = Recorder()
    r.arrive(data(1, first=True), deliver=("n1.7.1",))
    r.arrive(data(3))
    r.arrive(data(2), deliver=("n1.7.2", "n1.7.3"))
    r.arrive(data(3))
    assert [(e["seqno"], e["action"]) for e in r.of("data_rx")] == [(1, "deliver"), (3, "buffer"), (2, "deliver"),
                                                                    (3, "duplicate")]
    assert r.of("data_rx")[0] == {"proto": "UNICAST2", "from": "n1", "seqno": 1, "conn_id": 5, "first": True,
                                  "action": "deliver"}
    assert r.heard == ["n1"] * 4


def test_a_first_seqno_request_during_the_pass_is_no_conn_then_wrong_conn_after_another_connection():
    r = Recorder()
    r.arrive(data(4, conn_id=9), send=(control("SEND_FIRST_SEQNO", seqno=4),))
    r.arrive(data(1, conn_id=9, first=True), deliver=("n1.7.1",))
    r.arrive(data(2, conn_id=11, msg_id="n1.8.2"), send=(control("SEND_FIRST_SEQNO", seqno=2),))
    assert [e["action"] for e in r.of("data_rx")] == ["no_conn", "deliver", "wrong_conn"]
    assert r.of("resync_tx")[0] == {"proto": "UNICAST2", "peer": "n1", "kind": "first_seqno_req",
                                    "bytes": len(control("SEND_FIRST_SEQNO", seqno=4)), "low": 4}


def test_after_a_first_seqno_request_a_new_window_starts_afresh_as_jgrp1873_needs():
    r = Recorder()
    for seqno in range(1, 22):
        r.arrive(data(seqno, first=seqno == 1), deliver=(f"n1.7.{seqno}",))
    r.arrive(data(22), send=(control("SEND_FIRST_SEQNO", seqno=22),))  # the window was removed meanwhile
    r.arrive(data(1, first=True, msg_id="n1.7.1"), deliver=("n1.7.1",))  # resent first: delivered again
    r.arrive(data(21))  # behind the gap #2..#20 of the new window
    assert [e["action"] for e in r.of("data_rx")][-3:] == ["no_conn", "deliver", "buffer"]


def test_a_nakack_request_names_its_original_sender_once_a_message_told_its_name():
    r = Recorder()
    r.arrive(data(1, first=True), deliver=("n1.7.1",))  # A's address is n1
    req = jg.encode_message(jg.JgMessage(A, B, 0, None, (jg.nakack_header("XMIT_REQ", range=(3, 4), sender=A),
                                                         jg.tp_header("run"))))
    r.trace.departing(req, "n3")
    assert r.of("xmit_req_tx") == [{"proto": "NAKACK", "to": "n1", "seqnos": [3, 4]}]


def test_an_xmit_request_answered_in_its_pass_lists_found_and_missing_and_the_answers_are_resends():
    r = Recorder()
    for seqno in (1, 2, 3):
        r.trace.departing(data(seqno), "n1")
    r.arrive(control("XMIT_REQ", seqno=2, high_seqno=4), send=(data(2), data(3)))
    assert r.of("xmit_req_rx") == [{"proto": "UNICAST2", "from": "n1", "seqnos": [2, 3, 4], "found": [2, 3],
                                    "missing": [4]}]
    tx = r.of("data_tx")
    assert [(e["seqno"], e["resend"], e.get("msg_id")) for e in tx] == [
        (1, False, "n1.7.1"), (2, False, "n1.7.2"), (3, False, "n1.7.3"), (2, True, None), (3, True, None)]


def test_stable_both_ways_and_an_outgoing_request():
    r = Recorder()
    r.trace.departing(control("STABLE", seqno=3, high_seqno=5), "n1")
    r.trace.departing(control("XMIT_REQ", seqno=7, high_seqno=7), "n1")
    r.arrive(control("STABLE", seqno=2, high_seqno=2))
    assert r.of("stable_tx") == [{"proto": "UNICAST2", "to": "n1", "seqno": 3, "high": 5}]
    assert r.of("xmit_req_tx") == [{"proto": "UNICAST2", "to": "n1", "seqnos": [7]}]
    assert r.of("stable_rx") == [{"proto": "UNICAST2", "from": "n1", "seqno": 2, "high": 2, "action": "accepted"}]


def test_the_stacks_own_messages_deliver_in_order_and_what_never_crosses_the_wire_is_left_out():
    r = Recorder()
    view = jg.encode_message(jg.JgMessage(B, A, 0, b"\x01view", (jg.unicast2_header("DATA", seqno=1, conn_id=5,
                                                                                     first=True),)))
    r.arrive(view)  # no application message id: the layer above takes it at once
    r.trace.arrived(data(2), None)  # discovery has not named its sender yet: not heard
    r.trace.settled()
    r.trace.arrived(data(1, first=True), "n2")  # looped back from this node itself
    r.trace.settled()
    r.trace.departing(data(1), "n2")
    assert [e["action"] for e in r.of("data_rx")] == ["deliver", "buffer"] and r.of("data_tx") == []
    assert r.heard == ["n1"]


def test_undecodable_bytes_are_counted_and_keep_the_passes_paired():
    r = Recorder()
    r.trace.arrived(b"\x07garbage", "n1")
    r.arrive(data(1, first=True), deliver=("n1.7.1",))
    r.trace.settled()
    assert r.trace.undecodable == 1 and [e["action"] for e in r.of("data_rx")] == ["deliver"]


def test_a_range_request_lists_a_bounded_number_of_seqnos():
    r = Recorder()
    r.trace.departing(control("XMIT_REQ", seqno=1, high_seqno=10**12), "n1")
    assert len(r.of("xmit_req_tx")[0]["seqnos"]) == trace_mod.MAX_RANGE


def test_buffered_messages_awaiting_delivery_are_bounded(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(trace_mod, "MAX_PENDING", 10)
    r = Recorder()
    r.arrive(data(1, first=True), deliver=("n1.7.1",))
    for seqno in range(3, 50):
        r.arrive(data(seqno))
    assert len(r.trace._pending) == 10
