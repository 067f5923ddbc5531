"""Property tests of the wire codec (`node.wire`): whatever bytes arrive, decoding raises only `WireError`.

- Arbitrary bytes, bytes behind a valid header, and valid datagrams mutated (bytes flipped, set to 0x00/0xFF,
  fields overwritten with their maximum, truncated, extended, cut out) fed to `decode_datagram_from` either decode
  or raise `node.errors.WireError` -- never struct.error, ValueError, UnicodeDecodeError, IndexError,
  MemoryError, ... -- within a CPU budget; what does decode re-encodes to the very same bytes (one encoding per
  datagram, so the node and the dissector cannot disagree about what a datagram says).
- Valid datagrams of every registered message type, with fields at their boundaries (0, 1, the maximum of the
  field's struct width, the longest names and lists the wire allows), bundled several to a datagram, round-trip:
  `decode(encode(x)) == x`.
"""
from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from test_property_harness import (EVENT_CPU_BUDGET_S, HOSTILE_SETTINGS, U32_MAX, U64_MAX, Edges, cpu_budget,
                                   memory_cap, message_strategy)

from node.errors import WireError
from node.wire import (HEAD_BYTES, MAGIC, MAX_SENDER_BYTES, MAX_VIEW_MEMBERS, VERSION, Message,
                       decode_datagram_from, encode_datagram, message_types)

CLUSTER_ID = 0x5EED5EED
NAMES = ("n1", "a", "\u00f1" * 32, "z" * MAX_SENDER_BYTES, "\u20ac", "n\x00x")  # 1..64 utf-8 bytes, odd bytes
EDGES = Edges(src="n1", names=NAMES, seqnos=(2**63 - 1, 2**63), conn_ids=(1 << 12, U32_MAX >> 1),
              view_ns=(2**63,), ids=(2**32,),
              member_lists=(NAMES, tuple("m%d" % i for i in range(MAX_VIEW_MEMBERS))))
EXAMPLES = 300


def any_message() -> st.SearchStrategy[Message]:
    return st.sampled_from(sorted(message_types().values(), key=lambda c: c.TYPE)).flatmap(
        lambda cls: message_strategy(cls, EDGES))


def datagrams() -> st.SearchStrategy[tuple[str, int, list[Message]]]:
    return st.tuples(st.sampled_from(NAMES), st.sampled_from([0, 1, U64_MAX]) | st.integers(0, U64_MAX),
                     st.lists(any_message(), min_size=1, max_size=4))


def encodable(sender: str, messages: list[Message], incarnation: int) -> bytes | None:
    """The datagram, or None when these messages together exceed the datagram size (encode refuses them)."""
    try:
        return encode_datagram(CLUSTER_ID, sender, messages, incarnation)
    except ValueError as exc:
        if "exceeds" in str(exc):
            return None
        raise


def decode_only_wire_errors(data: bytes, cluster_id: int | None) -> tuple[str, int, list[Message]] | None:
    """Decode `data`; None for a WireError (any other exception fails the test), within the CPU budget."""
    with memory_cap(), cpu_budget(EVENT_CPU_BUDGET_S, f"decoding {len(data)} bytes"):
        try:
            return decode_datagram_from(data, cluster_id)
        except WireError as exc:
            assert exc.reason and isinstance(exc.reason, str)
            return None


def check_canonical(data: bytes, decoded: tuple[str, int, list[Message]] | None, cluster_id: int | None) -> None:
    if decoded is None:
        return
    sender, incarnation, messages = decoded
    cid = struct.unpack_from("!I", data, 3)[0] if cluster_id is None else cluster_id
    again = encode_datagram(cid, sender, messages, incarnation)
    assert again == data, f"{data.hex()} decodes to {decoded!r}, which encodes as {again.hex()}"


@settings(max_examples=EXAMPLES, **HOSTILE_SETTINGS)
@given(datagram=datagrams())
def test_valid_datagrams_round_trip(datagram: tuple[str, int, list[Message]]) -> None:
    sender, incarnation, messages = datagram
    data = encodable(sender, messages, incarnation)
    if data is None:
        return
    assert decode_datagram_from(data, CLUSTER_ID) == (sender, incarnation, messages)
    assert decode_datagram_from(data, None) == (sender, incarnation, messages)


HEADER = struct.pack("!2sBIQB", MAGIC, VERSION, CLUSTER_ID, 1, 2) + b"n1"


@settings(max_examples=EXAMPLES, **HOSTILE_SETTINGS)
@given(data=st.one_of(st.binary(max_size=256),
                      st.binary(max_size=512).map(lambda tail: HEADER + tail),
                      st.binary(max_size=512).map(lambda tail: HEADER + b"\x00\x01" + tail)),
       any_cluster=st.booleans())
def test_arbitrary_bytes_raise_only_wire_error(data: bytes, any_cluster: bool) -> None:
    cluster_id = None if any_cluster else CLUSTER_ID
    check_canonical(data, decode_only_wire_errors(data, cluster_id), cluster_id)


MUTATIONS = ("flip", "zero", "max", "max16", "max32", "max64", "truncate", "insert", "delete", "append")


def mutate(data: bytes, kind: str, at: int, blob: bytes) -> bytes:
    """`data` with one mutation of `kind` at offset `at` (taken modulo the length)."""
    at = at % (len(data) + 1)
    widths = {"max16": 2, "max32": 4, "max64": 8}
    if kind == "flip" and at < len(data):
        return data[:at] + bytes([data[at] ^ (blob[0] if blob else 0x80)]) + data[at + 1:]
    if kind in ("zero", "max") and at < len(data):
        return data[:at] + (b"\x00" if kind == "zero" else b"\xff") + data[at + 1:]
    if kind in widths:
        return data[:at] + b"\xff" * widths[kind] + data[at + widths[kind]:]
    if kind == "truncate":
        return data[:at]
    if kind == "insert":
        return data[:at] + blob + data[at:]
    if kind == "delete":
        return data[:at] + data[at + max(1, len(blob)):]
    return data + blob


@settings(max_examples=EXAMPLES * 2, **HOSTILE_SETTINGS)
@given(datagram=datagrams(),
       mutations=st.lists(st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 1 << 16), st.binary(max_size=16)),
                          min_size=1, max_size=3),
       any_cluster=st.booleans())
def test_mutated_datagrams_raise_only_wire_error(datagram: tuple[str, int, list[Message]],
                                                 mutations: list[tuple[str, int, bytes]], any_cluster: bool) -> None:
    sender, incarnation, messages = datagram
    data = encodable(sender, messages, incarnation)
    if data is None:
        return
    for kind, at, blob in mutations:
        # aim half of them past the header, where the message heads and bodies are
        data = mutate(data, kind, at if at % 2 else HEAD_BYTES + at, blob)
    cluster_id = None if any_cluster else CLUSTER_ID
    check_canonical(data, decode_only_wire_errors(data, cluster_id), cluster_id)


def test_the_mutations_reach_every_kind_of_wire_error() -> None:
    """The mutation test is not vacuous: its mutations produce each decode failure reason."""
    base = encode_datagram(CLUSTER_ID, "n1", one_of_each(), 7)
    reasons = set()
    for kind in MUTATIONS:
        for at in range(len(base) + 1):
            try:
                decode_datagram_from(mutate(base, kind, at, b"\x05\x07"), CLUSTER_ID)
            except WireError as exc:
                reasons.add(exc.reason)
    assert {"truncated", "absurd", "foreign", "version", "unknown-type"} <= reasons


def one_of_each() -> list[Message]:
    """The simplest message of every registered type."""
    from hypothesis import find
    return [find(message_strategy(cls, EDGES), lambda m: True) for cls in message_types().values()]
