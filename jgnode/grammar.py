"""The vocabulary of a declarative wire description: nodes that say how bytes without lengths are laid out.

Its one job: the words `jgnode.layout` describes the JGroups 2.12.2 wire in, which two readers interpret (the
codec, `jgnode.reader`, and the Wireshark dissector, `chaos.wire.wireshark_jgroups`). A node reads one value,
except `Switch` and `When`, which only sit among the fields of a `Struct` (or a header body) and add fields to it:

    Int(name, kind)          a fixed-width integer, network order: i8 u8 i16 u16 i32 i64 u64, or bool (a byte,
                             any but 0 is true: DataInputStream.readBoolean). `keep=False`: read and tested (a
                             Switch's or When's subject) but not a field of the value. `valid` (the only values),
                             `mask` (the only bits) and `minimum` make other values absurd.
    Utf(name)                DataOutputStream.writeUTF: u16 length and modified UTF-8
    Blob(name, length)       bytes after a length of kind `length` (i16, u16, i32), or of the length in an
                             earlier field (`length="=field"`); `negative` is "absurd" or "empty" (no bytes)
    Opt(item, presence)      a presence byte, then `item` when it is set ("bool": any but 0; "one": only 1, as
                             Util.readString), else null; the value takes the item's name
    List(name, count, item)  a count of kind `count`, then that many items; a negative count is "absurd",
                             "null" or "empty" (`negative`), and `empty_null` makes an empty list null
    Struct(name, fields)     the fields in order: a record (`build` names how the codec makes a value of it)
    Use(name, definition)    a named definition of `jgnode.layout.DEFINITIONS` (shared or recursive ones);
                             `nest=True` is one level deeper, and more than `MAX_NESTING` levels are absurd
    Choice(name, tag, cases) a tag, then the node of the first case it matches ("eq": equal; "bit": the bit is
                             set); a case's node None is null; no case matching fails with `otherwise`
    Switch(on, cases)        the fields of the case equal to the earlier field `on` (else `default`)
    When(on, bit, fields)    the fields when bit `bit` of the earlier field `on` is set

`show` (a composite's text for a dissector: "{field}" placeholders, or "@uuid" / "@ip") and `info` (how a field
reads in a one-line summary: "named" `name=value`, "bare" `value`, "flag" `name` when true) only matter to
dissectors. Reasons a reader fails with are `node.errors.WireError`'s (truncated, absurd, bad-string, ...).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

INT_KINDS = {"i8": 1, "u8": 1, "i16": 2, "u16": 2, "i32": 4, "i64": 8, "u64": 8, "bool": 1}
LENGTH_KINDS = ("i16", "u16", "i32")
INFO_STYLES = (None, "named", "bare", "flag")
SHOW_FORMATTERS = ("@uuid", "@ip")


@dataclass(frozen=True)
class Int:
    name: str
    kind: str
    keep: bool = True
    valid: tuple[int, ...] | None = None
    mask: int | None = None
    minimum: int | None = None
    info: str | None = None


@dataclass(frozen=True)
class Utf:
    name: str
    info: str | None = None


@dataclass(frozen=True)
class Blob:
    name: str
    length: str
    negative: str = "absurd"
    info: str | None = None


@dataclass(frozen=True)
class Opt:
    item: "Node"
    presence: str = "bool"

    @property
    def name(self) -> str:
        return self.item.name

    @property
    def info(self) -> str | None:
        return getattr(self.item, "info", None)


@dataclass(frozen=True)
class List:
    name: str
    count: str
    item: "Node"
    negative: str = "absurd"
    empty_null: bool = False
    info: str | None = None


@dataclass(frozen=True)
class Struct:
    name: str
    fields: tuple["Field", ...]
    build: str | None = None
    show: str | None = None
    info: str | None = None


@dataclass(frozen=True)
class Use:
    name: str
    definition: str
    nest: bool = False
    info: str | None = None


@dataclass(frozen=True)
class Fail:
    """What a Choice fails with when no case matches: a WireError reason and a text ({tag} is the tag's value)."""

    reason: str
    text: str


@dataclass(frozen=True)
class Choice:
    name: str
    tag: Int
    cases: tuple[tuple[int, Union["Node", None]], ...]
    match: str = "eq"
    otherwise: Fail = Fail("absurd", "{tag} names no case")
    info: str | None = None


@dataclass(frozen=True)
class Switch:
    on: str
    cases: dict[int, tuple["Field", ...]]
    default: tuple["Field", ...] = ()


@dataclass(frozen=True)
class When:
    on: str
    bit: int
    fields: tuple["Field", ...]


@dataclass(frozen=True)
class Header:
    """One header class's body: its magic number, the short name its dissector fields go under
    (`jgroups.<name>.<field>`), its type (an Int whose value `kinds` names, or the fixed kind of a header that
    has none) and the fields after it. `quiet`: left out of a message's one-line summary (TpHeader)."""

    magic: int
    name: str
    kind: Int | str
    kinds: dict[int, str] = field(default_factory=dict)
    body: tuple["Field", ...] = ()
    quiet: bool = False


Node = Union[Int, Utf, Blob, Opt, List, Struct, Use, Choice]
Field = Union[Node, Switch, When]
VALUE_NODES = (Int, Utf, Blob, Opt, List, Struct, Use, Choice)
