"""The message ids that application payloads carry (node/core.py: `make_payload`, `payload_msg_id`): the id read
back is the id the payload carries, whether `payload_msg_id` decodes it or takes it from the cache of the last
payload made, and the cases the cache must not answer are decoded."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from node.core import make_payload, payload_msg_id

IDS = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=40)


def uncached(payload: bytes) -> bytes:
    """An equal payload that is another object (`bytes(payload)` and `payload[:]` give the same object back)."""
    return bytes(bytearray(payload))


@given(IDS, st.integers(0, 200))
def test_a_made_payload_carries_its_id_cached_or_decoded(msg_id: str, size: int) -> None:
    payload = make_payload(msg_id, size)
    assert len(payload) >= size
    assert payload_msg_id(payload) == msg_id  # the last one made: the cache
    copy = uncached(payload)
    assert copy is not payload and payload_msg_id(copy) == msg_id  # decoded


def test_an_earlier_payload_is_decoded_after_a_later_one_was_made() -> None:
    first = make_payload("n1.7.1", 64)
    second = make_payload("n1.7.2", 64)
    assert (payload_msg_id(first), payload_msg_id(second)) == ("n1.7.1", "n1.7.2")


def test_an_id_with_a_nul_reads_back_as_what_the_payload_carries() -> None:
    """The payload carries the id up to its first NUL: the cache must not answer the whole id."""
    assert payload_msg_id(make_payload("a\0b", 10)) == "a"


def test_an_empty_id_is_no_id_even_just_after_it_was_made() -> None:
    """`make_payload("", 0)` is b"\\0", an object CPython shares with every one-byte b"\\0": no id, as decoded."""
    assert payload_msg_id(make_payload("", 0)) is None
    assert payload_msg_id(b"\0") is None
    assert payload_msg_id(b"") is None


def test_a_payload_not_made_here_has_no_id() -> None:
    make_payload("n1.7.3", 16)
    assert payload_msg_id(b"no separator") is None
    assert payload_msg_id(b"\xff\xfe\0padding") is None
