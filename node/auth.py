"""The key of the authenticated wire (`splitlab up --auth`) and the tag it makes: HMAC-SHA256 (stdlib `hmac`),
truncated to `TAG_BYTES` (16: 128 bits, as TLS and IPsec truncate theirs).

A run's key is `KEY_BYTES` random bytes from `secrets`, given to every node as `AUTH_KEY_ENV` in hex. `WireKey`
hashes the key's inner and outer pads (RFC 2104) once, with hashlib's SHA-256, and copies those two states per
datagram: one HMAC per datagram, never per message, about 1.3 us for a small datagram and 6 us for an 8 KiB
bundle here. That is what `hmac`'s own pure-Python HMAC does; its OpenSSL object (`hmac.new(...).copy()`) took
2.3 us for the small datagram. A unit test checks the tags against `hmac.digest`. Where the tag sits in a
datagram, and which datagrams carry one, is the codec's (`node.wire`: `sign`, `check_tag`).
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Any

from node.errors import ConfigError

AUTH_KEY_ENV = "SPLITLAB_AUTH_KEY"
KEY_BYTES = 32
MIN_KEY_BYTES = 16
TAG_BYTES = 16
_BLOCK_BYTES = 64  # SHA-256's block: a longer key is hashed first, a shorter one padded with zeros (RFC 2104)
_IPAD, _OPAD = 0x36, 0x5C


@dataclass(frozen=True)
class WireKey:
    """A run's key; `tag(data)` is the tag of `data`, `matches(data)` whether `data` ends with its own tag. Its
    repr never shows the key."""

    raw: bytes = field(repr=False)
    _inner: Any = field(init=False, repr=False, compare=False)  # SHA-256 state after the key's inner pad
    _outer: Any = field(init=False, repr=False, compare=False)  # ... after its outer pad

    def __post_init__(self) -> None:
        if len(self.raw) < MIN_KEY_BYTES:
            raise ConfigError(f"an authentication key needs at least {MIN_KEY_BYTES} bytes, got {len(self.raw)}")
        block = (self.raw if len(self.raw) <= _BLOCK_BYTES else hashlib.sha256(self.raw).digest()).ljust(
            _BLOCK_BYTES, b"\0")
        object.__setattr__(self, "_inner", hashlib.sha256(bytes(b ^ _IPAD for b in block)))
        object.__setattr__(self, "_outer", hashlib.sha256(bytes(b ^ _OPAD for b in block)))

    @classmethod
    def new(cls) -> "WireKey":
        """A fresh random key (`secrets`)."""
        return cls(secrets.token_bytes(KEY_BYTES))

    @classmethod
    def from_hex(cls, text: str, where: str = AUTH_KEY_ENV) -> "WireKey":
        """The key written as hex (`AUTH_KEY_ENV`, the run's key file). Raises ConfigError naming `where`."""
        try:
            raw = bytes.fromhex(text.strip())
        except ValueError:
            raise ConfigError(f"{where} is not hex", hint=f"{KEY_BYTES * 2} hex digits, as 'splitlab up --auth' "
                                                          f"makes them") from None
        try:
            return cls(raw)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc.message}") from None

    def hex(self) -> str:
        return self.raw.hex()

    def tag(self, data: bytes | memoryview) -> bytes:
        """The tag of `data`: HMAC-SHA256 under this key, its first `TAG_BYTES` bytes."""
        inner = self._inner.copy()
        inner.update(data)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()[:TAG_BYTES]

    def matches(self, data: bytes) -> bool:
        """Whether the last `TAG_BYTES` of `data` are the tag of what precedes them (compared in constant time)."""
        if len(data) < TAG_BYTES:
            return False
        return hmac.compare_digest(self.tag(memoryview(data)[:-TAG_BYTES]), data[-TAG_BYTES:])
