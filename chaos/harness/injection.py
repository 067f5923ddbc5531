"""What an `inject` step sends, the same on containers and in the simulator: the datagram's bytes, with a
`conn_id` read from the target's live unicast connection when the step asks for `current`, `previous` or
`next`, and a `payload` (text, sent as UTF-8 bytes) for UnicastData and Nakack4Msg.

The live connection is the target's (`to`) entry for the sender (`from`) in its unicast layer's state (the
control API's `/state` on containers, the layer object in the simulator): the receive entry for messages the
receiving side of a connection handles (UnicastData, UnicastClose, UnicastSyncOk), the send entry for those
the sending side handles (UnicastAck, UnicastStable, UnicastXmitReq, UnicastSyncAck). `previous` and `next`
are the first ids of the stream before and after the live one's (`node.unicast.connid`): an id that compares
older, and the id the sender's next new connection takes.

Messages with a payload are built with the node's own codec (`node.wire`); the others with the scapy
dissector (`chaos.wire.inject.message`), which also takes out-of-range values.
"""
from __future__ import annotations

from typing import Any, Mapping

from chaos.harness.errors import StepError
from node import wire
from node.errors import UsageError
from node.unicast.connid import GEN_BITS, STREAM_MAX, first_conn_id, next_stream

PAYLOAD_TYPES = {wire.UnicastData.TYPE: "UnicastData", wire.Nakack4Msg.TYPE: "Nakack4Msg"}
RECV_SIDE = (wire.UnicastData.TYPE, wire.UnicastClose.TYPE, wire.UnicastSyncOk.TYPE)
SEND_SIDE = (wire.UnicastAck.TYPE, wire.UnicastStable.TYPE, wire.UnicastXmitReq.TYPE, wire.UnicastSyncAck.TYPE)


def conn_side(code: int) -> str | None:
    """Which entry of the target holds the connection a message of type `code` is about: "recv", "send", or
    None (not a unicast message with a conn_id)."""
    if code in RECV_SIDE:
        return "recv"
    if code in SEND_SIDE:
        return "send"
    return None


def relative_conn_id(unicast_state: Mapping[str, Any], target: str, peer: str, code: int, which: str) -> int:
    """The conn_id `which` (current, previous, next) of `target`'s connection with `peer` that a message of
    type `code` is about, from the unicast layer's state. Raises `StepError` when there is no live connection."""
    side = conn_side(code)
    if side is None:
        raise UsageError(f"message type {code} carries no unicast conn_id")
    entry = ((unicast_state.get("peers") or {}).get(peer) or {}).get(side)
    current = entry.get("conn_id") if entry else None
    if not current:
        proto = unicast_state.get("proto", "the unicast layer")
        toward = "from" if side == "recv" else "to"
        raise StepError(f"inject conn_id {which}: {target} has no {side} connection {toward} {peer} in {proto} "
                        "(not opened yet, removed, or a protocol without connection ids)",
                        hint=f"send a workload between {peer} and {target} before the inject step")
    if which == "current":
        return int(current)
    stream = int(current) >> GEN_BITS
    if which == "next":
        return first_conn_id(next_stream(stream))
    return first_conn_id(STREAM_MAX if stream <= 1 else stream - 1)


def wire_message(code: int, fields: Mapping[str, int], payload: str) -> wire.Message:
    """A UnicastData or Nakack4Msg with `fields` (missing ones 0) and `payload`. Raises `UsageError` for other
    types, unknown fields or values the codec cannot carry."""
    if code not in PAYLOAD_TYPES:
        raise UsageError(f"a payload goes with {', '.join(PAYLOAD_TYPES.values())}, not type {code}")
    cls = wire.message_types()[code]
    names = [n for n in wire.field_names(cls) if n != "payload"]
    unknown = sorted(set(fields) - set(names))
    if unknown:
        raise UsageError(f"{cls.__name__} has no field(s) {', '.join(unknown)}; fields: {', '.join(names)}")
    values: dict[str, Any] = {n: fields.get(n, 0) for n in names}
    if "first" in values:
        if values["first"] not in (0, 1):
            raise UsageError(f"{cls.__name__} first must be 0 or 1, got {values['first']}")
        values["first"] = bool(values["first"])
    msg = cls(**values, payload=payload.encode("utf-8"))
    try:
        wire.encode_message(msg)
    except (ValueError, OverflowError) as exc:  # struct.error is a ValueError
        raise UsageError(f"{cls.__name__} cannot carry {dict(fields)}: {exc}") from None
    return msg


def datagram(cluster_id: int, sender: str, code: int, fields: Mapping[str, int], payload: str | None) -> bytes:
    """The bytes of the datagram an inject step sends (incarnation 0: the sender's current life)."""
    if payload is not None or code in PAYLOAD_TYPES:
        return wire.encode_datagram(cluster_id, sender, [wire_message(code, fields, payload or "")])
    from chaos.wire import dissect, inject

    return dissect.build(cluster_id, sender, [inject.message(str(code), **fields)])
