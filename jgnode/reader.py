"""Reading bytes by a declarative wire description (`jgnode.grammar`): the codec's half of `jgnode.layout`.

Its one job: compile each node of a description once into a Python function over a `Reader` (a cursor over the
bytes), so the codec reads the wire by the same description the dissector is generated from, at about the
speed of hand-written reads: runs of fixed-width integers become one `struct` unpack, a `Use` of a definition is
its compiled function itself (an indirection only where a definition recurses), and every error text is made
at compile time. A value is an int, bool, str, bytes, None, a tuple (List), or a dict of a Struct's kept fields
(or what the `builders` entry its `build` names makes of that dict). Every failure is
`WireError(reason, detail)`: truncated, absurd (a value the description rules out, a negative length or count,
views nested deeper than `max_nesting`), bad-string (not modified UTF-8), or a Choice's own `Fail` reason.
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Mapping

from jgnode.grammar import Blob, Choice, Field, Header, Int, List, Node, Opt, Struct, Switch, Use, Utf, When
from node.errors import WireError

_FORMATS = {"i8": "b", "u8": "B", "i16": "h", "u16": "H", "i32": "i", "i64": "q", "u64": "Q", "bool": "?"}
_U16 = struct.Struct("!H")

Read = Callable[["Reader"], Any]
Step = Callable[["Reader", dict], None]
Builders = Mapping[str, Callable[[dict], Any]]


class Reader:
    """A cursor over the bytes: `take` and the compiled readers raise WireError("truncated") at their end.
    `depth` counts the nested `Use`s being read."""

    __slots__ = ("data", "pos", "depth")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.depth = 0

    def take(self, size_bytes: int, what: str) -> bytes:
        if size_bytes < 0:
            raise WireError("absurd", f"{what}: negative length {size_bytes} at offset {self.pos}")
        end = self.pos + size_bytes
        if end > len(self.data):
            raise _truncated(self, size_bytes, what)
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk


def _truncated(r: Reader, size_bytes: int, what: str) -> WireError:
    return WireError("truncated", f"{what}: needs {size_bytes} bytes at offset {r.pos}, {len(r.data) - r.pos} left")


def decode_modified_utf8(raw: bytes, what: str) -> str:
    """Java's modified UTF-8 (1 to 3 bytes per UTF-16 unit, NUL as C0 80) as DataInputStream.readUTF reads it."""
    if raw.isascii():
        return raw.decode("ascii")
    units: list[int] = []
    i, n = 0, len(raw)
    while i < n:
        b0 = raw[i]
        if b0 < 0x80:
            units.append(b0)
            i += 1
        elif b0 & 0xE0 == 0xC0 and i + 1 < n and raw[i + 1] & 0xC0 == 0x80:
            units.append(((b0 & 0x1F) << 6) | (raw[i + 1] & 0x3F))
            i += 2
        elif b0 & 0xF0 == 0xE0 and i + 2 < n and raw[i + 1] & 0xC0 == 0x80 and raw[i + 2] & 0xC0 == 0x80:
            units.append(((b0 & 0x0F) << 12) | ((raw[i + 1] & 0x3F) << 6) | (raw[i + 2] & 0x3F))
            i += 3
        else:
            raise WireError("bad-string", f"{what}: malformed modified UTF-8 at byte {i} of {n}")
    return struct.pack(f"!{len(units)}H", *units).decode("utf-16-be", "surrogatepass")


def _run(steps: list[Step]) -> Step:
    """One step doing `steps` in order."""
    if len(steps) == 1:
        return steps[0]

    def run(r: Reader, vals: dict) -> None:
        for step in steps:
            step(r, vals)
    return run


class Compiler:
    """Compiles the nodes of one description: `definitions` are what its `Use`s name, `builders` make values of
    the Structs whose `build` names them (a Struct without one is its dict)."""

    def __init__(self, definitions: Mapping[str, Node], builders: Builders, max_nesting: int) -> None:
        self.definitions = definitions
        self.builders = builders
        self.max_nesting = max_nesting
        self._done: dict[str, Read] = {}
        self._cells: dict[str, list[Read]] = {}  # definitions being compiled: a recursive Use reads through these

    # -------------------------------------------------------------------------------------------- values

    def value(self, node: Node, what: str = "") -> Read:
        """The function reading one value of `node`."""
        what = f"{what} {node.name}".strip()
        if isinstance(node, Int):
            return self._int(node, what)
        if isinstance(node, Utf):
            return self._utf(what)
        if isinstance(node, Blob):
            return self._blob(node, what)
        if isinstance(node, Opt):
            return self._opt(node, what)
        if isinstance(node, List):
            return self._list(node, what)
        if isinstance(node, Struct):
            return self._struct(node.fields, node.build, what)
        if isinstance(node, Use):
            return self._use(node)
        if isinstance(node, Choice):
            return self._choice(node, what)
        raise TypeError(f"not a value node: {node!r}")

    @staticmethod
    def _int(node: Int, what: str) -> Read:
        fmt = struct.Struct("!" + _FORMATS[node.kind])
        size = fmt.size
        checked = _checked(node)

        def read_int(r: Reader) -> Any:
            pos = r.pos
            if pos + size > len(r.data):
                raise _truncated(r, size, what)
            r.pos = pos + size
            value = fmt.unpack_from(r.data, pos)[0]
            if checked:
                _check(node, value, what, pos)
            return value
        return read_int

    def _utf(self, what: str) -> Read:
        def read_utf(r: Reader) -> str:
            pos = r.pos
            if pos + 2 > len(r.data):
                raise _truncated(r, 2, f"{what} length")
            r.pos = pos + 2
            return decode_modified_utf8(r.take(_U16.unpack_from(r.data, pos)[0], what), what)
        return read_utf

    def _blob(self, node: Blob, what: str) -> Read:
        if node.length.startswith("="):
            raise ValueError(f"{what}: a length from a field (`{node.length}`) is only for a Struct's fields")
        length = self.value(Int(f"{node.name} length", node.length))
        empty = node.negative == "empty"

        def read_blob(r: Reader) -> bytes:
            n = length(r)
            return b"" if empty and n < 0 else r.take(n, what)
        return read_blob

    def _opt(self, node: Opt, what: str) -> Read:
        item = self.value(node.item, what.rsplit(" ", 1)[0])
        only_one = node.presence == "one"
        presence = f"{what} presence"

        def read_opt(r: Reader) -> Any:
            pos = r.pos
            if pos >= len(r.data):
                raise _truncated(r, 1, presence)
            r.pos = pos + 1
            flag = r.data[pos]
            return item(r) if (flag == 1 if only_one else flag) else None
        return read_opt

    def _list(self, node: List, what: str) -> Read:
        count = self.value(Int(f"{node.name} count", node.count))
        item = self.value(node.item, what)
        negative, empty_null = node.negative, node.empty_null

        def read_list(r: Reader) -> tuple | None:
            n = count(r)
            if n < 0:
                if negative == "absurd":
                    raise WireError("absurd", f"{what}: negative count {n}")
                if negative == "null":
                    return None
            items = tuple([item(r) for _ in range(n)])
            return None if empty_null and not items else items
        return read_list

    def record(self, fields: tuple[Field, ...], what: str = "") -> Read:
        """The function reading `fields` into a dict of the kept ones."""
        return self._struct(fields, None, what)

    def _struct(self, fields: tuple[Field, ...], build: str | None, what: str) -> Read:
        step = _run(self.steps(fields, what))
        hidden = tuple(self._hidden(fields))
        builder = self.builders[build] if build else None

        def read_struct(r: Reader) -> Any:
            vals: dict = {}
            step(r, vals)
            for name in hidden:
                vals.pop(name, None)
            return builder(vals) if builder else vals
        return read_struct

    def _use(self, node: Use) -> Read:
        name = node.definition
        if name in self._done:
            read = self._done[name]
        elif name in self._cells:  # recursion: read through the cell, filled when the definition is compiled
            cell = self._cells[name]

            def read(r: Reader) -> Any:
                return cell[0](r)
        else:
            self._cells[name] = cell = []
            read = self.value(self.definitions[name], "")
            cell.append(read)
            del self._cells[name]
            self._done[name] = read
        if not node.nest:
            return read
        limit, nested = self.max_nesting, read

        def read_nested(r: Reader) -> Any:
            r.depth += 1
            if r.depth > limit:
                raise WireError("absurd", f"{node.name}: nested more than {limit} deep")
            value = nested(r)
            r.depth -= 1
            return value
        return read_nested

    def _choice(self, node: Choice, what: str) -> Read:
        tag = self.value(node.tag, what)
        cases = [(key, None if item is None else self.value(item, what)) for key, item in node.cases]
        bit, fail = node.match == "bit", node.otherwise

        def read_choice(r: Reader) -> Any:
            t = tag(r)
            for key, item in cases:
                if (t & key) if bit else t == key:
                    return None if item is None else item(r)
            raise WireError(fail.reason, f"{what}: " + fail.text.format(tag=t))
        return read_choice

    # -------------------------------------------------------------------------------------------- fields

    def steps(self, fields: tuple[Field, ...], what: str) -> list[Step]:
        """The steps reading `fields` into a dict: a run of Ints is one unpack; an Int with a check ends its run,
        so the check comes right after its bytes, as when read one by one (the dissector's order)."""
        steps: list[Step] = []
        run: list[Int] = []
        for f in fields + (None,):
            if isinstance(f, Int):
                run.append(f)
                if _checked(f):
                    steps.append(self._ints(run, what))
                    run = []
                continue
            if run:
                steps.append(self._ints(run, what))
                run = []
            if f is not None:
                steps.append(self._step(f, what))
        return steps

    def _step(self, f: Field, what: str) -> Step:
        if isinstance(f, Switch):
            cases = {key: _run(self.steps(body, what)) if body else None for key, body in f.cases.items()}
            default = _run(self.steps(f.default, what)) if f.default else None
            on = f.on

            def switch(r: Reader, vals: dict) -> None:
                body = cases.get(vals[on], default)
                if body is not None:
                    body(r, vals)
            return switch
        if isinstance(f, When):
            body, on, bit = _run(self.steps(f.fields, what)), f.on, f.bit

            def when(r: Reader, vals: dict) -> None:
                if vals[on] & bit:
                    body(r, vals)
            return when
        if isinstance(f, Blob) and f.length.startswith("="):
            size_of, name, blob_what = f.length[1:], f.name, f"{what} {f.name}".strip()

            def sized_blob(r: Reader, vals: dict) -> None:
                vals[name] = r.take(vals[size_of], blob_what)
            return sized_blob
        read, name = self.value(f, what), f.name

        def one(r: Reader, vals: dict) -> None:
            vals[name] = read(r)
        return one

    def _ints(self, ints: list[Int], what: str) -> Step:
        fmt = struct.Struct("!" + "".join(_FORMATS[i.kind] for i in ints))
        names = tuple(i.name for i in ints)
        size = fmt.size
        where = f"{what} {', '.join(names)}".strip()
        checks = [i for i in ints if _checked(i)]

        def ints_step(r: Reader, vals: dict) -> None:
            pos = r.pos
            if pos + size > len(r.data):
                raise _truncated(r, size, where)
            r.pos = pos + size
            vals.update(zip(names, fmt.unpack_from(r.data, pos)))
        if not checks:
            return ints_step

        def checked(r: Reader, vals: dict) -> None:
            start = r.pos
            ints_step(r, vals)
            for i in checks:
                _check(i, vals[i.name], f"{what} {i.name}".strip(), start)
        return checked

    @staticmethod
    def _hidden(fields: tuple[Field, ...]) -> list[str]:
        out = []
        for f in fields:
            if isinstance(f, Int) and not f.keep:
                out.append(f.name)
            elif isinstance(f, Switch):
                for body in (*f.cases.values(), f.default):
                    out += Compiler._hidden(body)
            elif isinstance(f, When):
                out += Compiler._hidden(f.fields)
        return out

    # -------------------------------------------------------------------------------------------- headers

    def header(self, spec: Header) -> Callable[[Reader], tuple[str, dict[str, Any]]]:
        """A header body's reader: (kind, fields), the kind named by `spec.kinds` (UNKNOWN_<code> if unnamed)."""
        what = spec.name
        if isinstance(spec.kind, str):
            fixed = spec.kind
            body = self._struct(spec.body, None, what)

            def read_fixed(r: Reader) -> tuple[str, dict[str, Any]]:
                return fixed, body(r)
            return read_fixed
        tag, kinds = spec.kind.name, spec.kinds
        step = _run(self.steps((spec.kind,) + spec.body, what))
        hidden = tuple(self._hidden(spec.body))

        def read_header(r: Reader) -> tuple[str, dict[str, Any]]:
            vals: dict = {}
            step(r, vals)
            code = vals.pop(tag)
            for name in hidden:
                vals.pop(name, None)
            kind = kinds.get(code)
            return (kind if kind is not None else f"UNKNOWN_{code}"), vals
        return read_header


def _checked(node: Int) -> bool:
    return node.valid is not None or node.mask is not None or node.minimum is not None


def _check(node: Int, value: int, what: str, offset: int) -> None:
    if node.valid is not None and value not in node.valid:
        raise WireError("absurd", f"{what}: {value} at offset {offset} is not one of {node.valid}")
    if node.mask is not None and value & ~node.mask:
        raise WireError("absurd", f"{what}: 0x{value:02x} at offset {offset} has bits outside 0x{node.mask:02x}")
    if node.minimum is not None and value < node.minimum:
        raise WireError("absurd", f"{what}: {value} at offset {offset} is below {node.minimum}")
