"""Connection ids: a 20-bit stream number and a 12-bit sync generation in one 32-bit id, and their order.

    conn_id = stream << 12 | generation

A *stream* is one send connection's sequence of seqnos (from its first=true message on). A new send connection
takes the next stream number with generation 0; a unicast3 SYNC gives the same stream the next generation, so
the receiver can tell from SYNC-OK(low, conn_id) alone whether its window follows that stream (keep what it
delivered) or belongs to another one (start again at low), without a field the wire format does not have.

Stream numbers come from one counter per protocol instance (seeded from `UnicastConfig.conn_id_start`, which a
runtime derives from its boot time with `conn_id_start_from_boot`), so later streams of one life compare newer
in serial-number order (RFC 1982); a receiver uses that order to drop a delayed message of an older connection
of the same life instead of restarting its window. Across lives the order means nothing (two lives within one
4.096 s stream tick start with the same id, a clock stepped back or the wrapping id space make the new life's
ids compare older): a receiver learns of a new life from the datagram header (node.incarnation) and starts
fresh entries for it (unicast3.py), as JGroups does for the new address of a restarted member.
conn_id 0 is never allocated: on the wire it means "no connection id".
"""
from __future__ import annotations

GEN_BITS = 12
STREAM_BITS = 20
GEN_MASK = (1 << GEN_BITS) - 1
STREAM_MAX = (1 << STREAM_BITS) - 1
CONN_ID_MAX = 0xFFFFFFFF


def conn_id_start_from_boot(boot_ms: int) -> int:
    """The first connection id of a life that booted at `boot_ms` (unix ms): a real clock's value, in 1..2**31-1."""
    return boot_ms & 0x7FFFFFFF or 1


def stream_start(conn_id_start: int) -> int:
    """The first stream number for a configured first connection id (its stream part; never 0)."""
    return (conn_id_start >> GEN_BITS) & STREAM_MAX or 1


def next_stream(stream: int) -> int:
    """The stream number after `stream`, wrapping from STREAM_MAX to 1 (0 is reserved)."""
    return 1 if stream >= STREAM_MAX else stream + 1


def first_conn_id(stream: int) -> int:
    """The id of a stream's first connection (generation 0)."""
    return stream << GEN_BITS


def next_generation(conn_id: int) -> int:
    """The id a sync gives the same stream: the next generation, wrapping from GEN_MASK to 1."""
    gen = conn_id & GEN_MASK
    return (conn_id & ~GEN_MASK) | (1 if gen >= GEN_MASK else gen + 1)


def same_stream(a: int, b: int) -> bool:
    return a >> GEN_BITS == b >> GEN_BITS


def _serial_older(a: int, b: int, bits: int) -> bool:
    mask = (1 << bits) - 1
    return a != b and ((b - a) & mask) < (1 << (bits - 1))


def conn_older(a: int, b: int) -> bool:
    """True when id `a` was allocated before id `b`: an older stream, or an earlier sync of the same stream."""
    if not same_stream(a, b):
        return _serial_older(a >> GEN_BITS, b >> GEN_BITS, STREAM_BITS)
    return _serial_older(a & GEN_MASK, b & GEN_MASK, GEN_BITS)
