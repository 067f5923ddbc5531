"""A Wireshark / tshark dissector for the real JGroups 2.12.2's UDP datagrams, generated from `jgnode.layout`.

`lua()` writes the layout (datagram, bundle, message, addresses, views, digests and every header body the codec
decodes) as Lua tables, with a ProtoField for every field, and one fixed Lua reader of those tables: the same
description `jgnode.wire` decodes by, so the dissector cannot drift from the codec. Field names are
`jgroups.<scope>.<field>`: a header's fields under its layout name (`jgroups.unicast2.seqno`,
`jgroups.nakack.range`, `jgroups.gms.view`), a definition's under its own (`jgroups.uuid.msb`,
`jgroups.view_id.id`); `jgroups.<header>` itself is the header's kind (`jgroups.unicast2 == "XMIT_REQ"`),
`jgroups.message` a message's one-line summary.

The Info column has one entry per message (a bundle's messages in order), each its headers but the transport's:
`UNICAST2 DATA seqno=21 conn_id=3 first`, `NAKACK XMIT_REQ [5..9]`, `NAKACK MSG seqno=4, GMS VIEW [...]`.
Every read is bounds-checked first: bytes the codec refuses are marked with the expert info `jgroups.malformed`
(its reason, as `node.errors.WireError` names it, and "[Malformed]" in the Info column), never a Lua error. A
header whose magic number the layout does not know ends its message and the bundle with `jgroups.undecodable`
(a warning, not malformed), as the codec returns such a message `partial`.

It takes UDP ports 7800-7810 (JGroups' stock bind_port and the fixtures'; a datagram there whose version is not
2.12 is declined) and, on any other port, what a heuristic finds: version 2.12.x (2.12.2 = 0x1302), flags with
only TP's bits, and a plausible next byte (a message's leading byte, or a bundle's address flags). jgnode's
nodes use the contract's data port (7100), which splitlab's own dissector declines for lack of its magic.

`install(dir)` writes it where Wireshark and tshark load personal Lua plugins (`chaos.wire.lua`).
"""
from __future__ import annotations

from pathlib import Path

from chaos.wire.lua import install_plugin, lua_str, lua_value
from jgnode import layout
from jgnode.wire import CLASSIFY_ORDER
from jgnode.grammar import Blob, Choice, Field, Header, Int, List, Node, Opt, Struct, Switch, Use, Utf, When

PROTO = "jgroups"
PLUGIN_FILE = "splitlab_jgroups.lua"
PORTS = (7800, 7810)
_INT_CTORS = {"i8": "int8", "u8": "uint8", "i16": "int16", "u16": "uint16", "i32": "int32", "i64": "int64",
              "u64": "uint64"}


def _abbr(scope: str, name: str) -> str:
    return ".".join(part for part in (PROTO, scope, name) if part)


class _Writer:
    """Writes nodes of the layout as Lua tables and collects the ProtoFields they name (one per abbreviation:
    the same abbreviation with two types is a layout this generator cannot register, and raises)."""

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}

    def field(self, abbr: str, ctor: str, label: str, *extra: str) -> str:
        call = f"ProtoField.{ctor}({lua_str(abbr)}, {lua_str(label)}{''.join(', ' + e for e in extra)})"
        if self.fields.setdefault(abbr, call) != call:
            raise ValueError(f"field {abbr} declared as both {self.fields[abbr]} and {call}")
        return f"F[{lua_str(abbr)}]"

    def int_field(self, node: Int, scope: str, valstring: str | None = None) -> str:
        abbr = _abbr(scope, node.name)
        if node.kind == "bool":
            return self.field(abbr, "bool", node.name)
        base = "base.HEX" if node.mask is not None else "base.DEC"
        return self.field(abbr, _INT_CTORS[node.kind], node.name, base, *((valstring,) if valstring else ()))

    def node(self, node: Node, scope: str, root: bool = False) -> str:
        """A value node as a Lua table; `root`: a definition's own node, which takes its Use's field."""
        if isinstance(node, Int):
            return self.int_node(node, scope)
        if isinstance(node, Utf):
            return _table("utf", name=lua_str(node.name),
                          f=self.field(_abbr(scope, node.name), "string", node.name))
        if isinstance(node, Blob):
            ref = node.length[1:] if node.length.startswith("=") else None
            lf = None if ref else self.int_field(Int(f"{node.name}_len", node.length), scope)
            return _table("blob", name=lua_str(node.name), len=None if ref else lua_str(node.length),
                          ref=ref and lua_str(ref), neg=lua_str(node.negative), lf=lf,
                          f=self.field(_abbr(scope, node.name), "bytes", node.name))
        if isinstance(node, Opt):
            pf = self.field(_abbr(scope, f"{node.name}_present"), "bool", f"{node.name} present")
            return _table("opt", name=lua_str(node.name), one=lua_value(node.presence == "one"), pf=pf,
                          item=self.node(node.item, scope))
        own = None if root else self.field(_abbr(scope, node.name), "string", node.name)
        if isinstance(node, List):
            return _table("list", name=lua_str(node.name), count=lua_str(node.count), neg=lua_str(node.negative),
                          empty_null=lua_value(node.empty_null), f=own,
                          cf=self.int_field(Int(f"{node.name}_count", node.count), scope),
                          item=self.node(node.item, scope))
        if isinstance(node, Struct):
            inner = scope if root else node.name
            return _table("struct", name=lua_str(node.name), f=own, show=node.show and lua_str(node.show),
                          names=lua_value(_kept_names(node.fields)), fields=self.fields_of(node.fields, inner))
        if isinstance(node, Use):
            return _table("use", name=lua_str(node.name), defn=lua_str(node.definition),
                          nest=lua_value(node.nest), f=own)
        if isinstance(node, Choice):
            cases = ", ".join(_table(key=lua_value(key), node="false" if item is None else self.node(item, scope))
                              for key, item in node.cases)
            return _table("choice", name=lua_str(node.name), f=own, tag=self.int_node(node.tag, scope),
                          cases="{" + cases + "}", bit=lua_value(node.match == "bit"),
                          reason=lua_str(node.otherwise.reason), text=lua_str(node.otherwise.text))
        raise TypeError(f"not a value node: {node!r}")

    def int_node(self, node: Int, scope: str, valstring: str | None = None) -> str:
        return _table("int", name=lua_str(node.name), kind=lua_str(node.kind),
                      f=self.int_field(node, scope, valstring),
                      valid=node.valid and lua_value({v: True for v in node.valid}), mask=_maybe(node.mask),
                      min=_maybe(node.minimum))

    def fields_of(self, fields: tuple[Field, ...], scope: str) -> str:
        """A sequence of fields (Switch and When among them) as a Lua table."""
        out = []
        for f in fields:
            if isinstance(f, Switch):
                cases = {key: self.fields_of(body, scope) for key, body in f.cases.items()}
                out.append(_table("switch", on=lua_str(f.on), default=self.fields_of(f.default, scope),
                                  cases="{" + ", ".join(f"[{lua_value(k)}] = {v}" for k, v in cases.items()) + "}"))
            elif isinstance(f, When):
                out.append(_table("when", on=lua_str(f.on), bit=str(f.bit),
                                  fields=self.fields_of(f.fields, scope)))
            else:
                out.append(self.node(f, scope))
        return "{" + ", ".join(out) + "}"

    def header(self, spec: Header) -> str:
        kinds = f"KINDS[{spec.magic}]"
        kind = lua_str(spec.kind) if isinstance(spec.kind, str) else self.int_node(spec.kind, spec.name, kinds)
        label = layout.MAGIC_NUMBERS[spec.magic].rsplit(".", 1)[-1]
        return _table(name=lua_str(spec.name), kind=kind, body=self.fields_of(spec.body, spec.name),
                      quiet=lua_value(spec.quiet), info=lua_value(_info(spec.body)),
                      f=self.field(_abbr("", spec.name), "string", label))


def _table(node_kind: str | None = None, /, **items: str | None) -> str:
    """A Lua table constructor of already-written Lua expressions (None left out); `node_kind` is its `k`."""
    if node_kind:
        items = {"k": lua_str(node_kind), **items}
    return "{" + ", ".join(f"{key} = {value}" for key, value in items.items() if value is not None) + "}"


def _maybe(number: int | None) -> str | None:
    return None if number is None else str(number)


def _walk(fields: tuple[Field, ...]):
    """The value nodes among `fields`, through Switch and When, in order."""
    for f in fields:
        if isinstance(f, Switch):
            for body in (*f.cases.values(), f.default):
                yield from _walk(body)
        elif isinstance(f, When):
            yield from _walk(f.fields)
        else:
            yield f


def _kept_names(fields: tuple[Field, ...]) -> list[str]:
    """The names a record of `fields` has, in order (hidden Ints left out)."""
    names: list[str] = []
    for f in _walk(fields):
        if not (isinstance(f, Int) and not f.keep) and f.name not in names:
            names.append(f.name)
    return names


def _info(fields: tuple[Field, ...]) -> list[list[str]]:
    """(name, style) of the fields a header's summary shows, in order."""
    out: list[list[str]] = []
    for f in _walk(fields):
        style = getattr(f, "info", None)
        if style and [f.name, style] not in out:
            out.append([f.name, style])
    return out


def _kinds() -> str:
    return "{" + ", ".join(f"[{spec.magic}] = {lua_value(spec.kinds)}" for spec in layout.HEADERS.values()
                           if spec.kinds) + "}"


_PRELUDE = r"""
-- generated by splitlab (chaos/wire/wireshark_jgroups.py) from jgnode/layout.py: do not edit;
-- 'splitlab wireshark lua --kind jgroups'
local P = Proto("%(proto)s", "JGroups 2.12.2")
local band = (bit32 and bit32.band) or (bit and bit.band) or load("return function(a, b) return a & b end")()
local F = {}
local KINDS = %(kinds)s
local PROTOCOL_IDS = %(protocol_ids)s
local MAGIC_NUMBERS = %(magic_numbers)s
local RANK = %(rank)s  -- the order of a message's headers in its summary: jgnode.wire.classify's
local VERSION_MASK, VERSION_COMPAT, MAX_NESTING = %(version_mask)d, %(version_compat)d, %(nesting)d
local TP_LIST = %(tp_list)d
local TP_FLAGS, LEADING_BITS, ADDRESS_BITS = %(tp_flags)d, %(leading_bits)d, %(address_bits)d
"""

_READER = r"""
local MALFORMED = ProtoExpert.new("%(proto)s.malformed", "Malformed JGroups datagram", expert.group.MALFORMED,
                                  expert.severity.ERROR)
local UNDECODABLE = ProtoExpert.new("%(proto)s.undecodable", "A header this dissector does not decode",
                                    expert.group.UNDECODED, expert.severity.WARN)
F["%(proto)s.undecodable_bytes"] = ProtoField.bytes("%(proto)s.undecodable_bytes", "Not decoded")
local fl = {}
for _, f in pairs(F) do table.insert(fl, f) end
P.fields = fl
P.experts = {MALFORMED, UNDECODABLE}

local WIDTH = {i8 = 1, u8 = 1, i16 = 2, u16 = 2, i32 = 4, i64 = 8, u64 = 8, bool = 1}
local _
local Stop = {}  -- the metatable of this reader's own errors: malformed bytes, with the codec's reason

local function fail(reason, text)
  error(setmetatable({reason = reason, text = text}, Stop), 0)
end

local function need(st, pos, n, what)
  if n < 0 then fail("absurd", what .. ": negative length " .. tostring(n) .. " at offset " .. pos) end
  if pos + n > st.stop then
    fail("truncated", what .. ": needs " .. tostring(n) .. " bytes at offset " .. pos .. ", " .. (st.stop - pos) ..
         " left")
  end
end

local function int_at(st, pos, kind)
  local r = st.tvb(pos, WIDTH[kind])
  if kind == "i64" then return r:int64() end
  if kind == "u64" then return r:uint64() end
  if kind == "bool" then return r:uint() ~= 0 end
  if kind:sub(1, 1) == "i" then return r:int() end
  return r:uint()
end

local function mutf8(st, pos, n, what)  -- DataInputStream.readUTF's modified UTF-8, or bad-string
  local b = n > 0 and st.tvb(pos, n):bytes() or ByteArray.new()
  local i = 0
  while i < n do
    local b0 = b:get_index(i)
    local c1 = i + 1 < n and b:get_index(i + 1) or 0
    local c2 = i + 2 < n and b:get_index(i + 2) or 0
    if b0 < 0x80 then i = i + 1
    elseif b0 >= 0xC0 and b0 < 0xE0 and i + 1 < n and c1 >= 0x80 and c1 < 0xC0 then i = i + 2
    elseif b0 >= 0xE0 and b0 < 0xF0 and i + 2 < n and c1 >= 0x80 and c1 < 0xC0 and c2 >= 0x80 and c2 < 0xC0 then
      i = i + 3
    else fail("bad-string", what .. ": malformed modified UTF-8 at byte " .. i .. " of " .. n) end
  end
end

local read, read_fields

local function read_int(node, st, pos, kids)
  local w = WIDTH[node.kind]
  need(st, pos, w, node.name)
  local v = int_at(st, pos, node.kind)
  local rec = {f = node.f, s = pos, e = pos + w}
  if node.kind == "bool" then rec.v = v end
  kids[#kids + 1] = rec
  if node.valid and not node.valid[v] then fail("absurd", node.name .. ": " .. tostring(v) .. " is not valid") end
  if node.mask and band(v, 0xFFFFFFFF - node.mask) ~= 0 then
    fail("absurd", node.name .. ": " .. v .. " has bits outside " .. node.mask)
  end
  if node.min and v < node.min then fail("absurd", node.name .. ": " .. tostring(v) .. " is below " .. node.min) end
  return v, tostring(v), pos + w
end

local function read_utf(node, st, pos, kids)
  need(st, pos, 2, node.name .. " length")
  local n = st.tvb(pos, 2):uint()
  need(st, pos + 2, n, node.name)
  mutf8(st, pos + 2, n, node.name)
  local s = n > 0 and st.tvb(pos + 2, n):string(ENC_UTF_8) or ""
  kids[#kids + 1] = {f = node.f, s = pos, e = pos + 2 + n, v = s}
  return s, s, pos + 2 + n
end

local function read_blob(node, st, pos, kids, vals)
  local n
  if node.ref then
    n = vals[node.ref]
  else
    local w = WIDTH[node.len]
    need(st, pos, w, node.name .. " length")
    n = int_at(st, pos, node.len)
    kids[#kids + 1] = {f = node.lf, s = pos, e = pos + w}
    pos = pos + w
    if n < 0 and node.neg == "empty" then n = 0 end
  end
  need(st, pos, n, node.name)
  if n > 0 then kids[#kids + 1] = {f = node.f, s = pos, e = pos + n} end
  return (n > 0 and st.tvb(pos, n):raw() or ""), n .. " bytes", pos + n
end

local function read_opt(node, st, pos, kids, vals, texts)
  need(st, pos, 1, node.name .. " presence")
  local b = st.tvb(pos, 1):uint()
  local present = (node.one and b == 1) or (not node.one and b ~= 0)
  kids[#kids + 1] = {f = node.pf, s = pos, e = pos + 1, v = present}
  if not present then return nil, "null", pos + 1 end
  return read(node.item, st, pos + 1, kids, vals, texts)
end

local function read_list(node, st, pos, kids, as)
  local rec = {f = (as and as.f) or node.f, s = pos, kids = {}}
  kids[#kids + 1] = rec
  local w = WIDTH[node.count]
  need(st, pos, w, node.name .. " count")
  local n = int_at(st, pos, node.count)
  rec.kids[1] = {f = node.cf, s = pos, e = pos + w}
  local p = pos + w
  if n < 0 then
    if node.neg == "absurd" then fail("absurd", node.name .. ": negative count " .. n) end
    if node.neg == "null" then
      rec.e, rec.text = p, "null"
      return nil, "null", p
    end
    n = 0
  end
  local texts = {}
  for i = 1, n do
    local before, t = p, nil
    _, t, p = read(node.item, st, p, rec.kids, {}, {})
    if p <= before then fail("absurd", node.name .. ": an item of no bytes") end
    texts[i] = t
  end
  rec.e = p
  rec.text = (n == 0 and node.empty_null) and "null" or ("[" .. table.concat(texts, ", ") .. "]")
  return n, rec.text, p
end

local function hex_groups(raw)
  local groups = {}
  for i = 1, #raw, 2 do groups[#groups + 1] = string.format("%%x", raw:byte(i) * 256 + raw:byte(i + 1)) end
  return table.concat(groups, ":")
end

local function show(node, vals, texts)
  if node.show == "@uuid" then  -- UUID.toStringLong
    local m, l = vals.msb:tohex():lower(), vals.lsb:tohex():lower()
    return m:sub(1, 8) .. "-" .. m:sub(9, 12) .. "-" .. m:sub(13, 16) .. "-" .. l:sub(1, 4) .. "-" .. l:sub(5, 16)
  end
  if node.show == "@ip" then  -- IpAddress.toString
    local raw, text = vals.ip, nil
    if #raw == 4 then text = string.format("%%d.%%d.%%d.%%d", raw:byte(1, 4))
    else
      text = hex_groups(raw)
      if vals.scope_id and vals.scope_id ~= 0 then text = text .. "%%" .. vals.scope_id end
    end
    return text .. ":" .. tostring(vals.port)
  end
  if node.show then return (node.show:gsub("{([%%w_]+)}", function(k) return texts[k] or "null" end)) end
  local parts = {}
  for _, k in ipairs(node.names) do
    if texts[k] then parts[#parts + 1] = k .. "=" .. texts[k] end
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

local function read_struct(node, st, pos, kids, as)
  local rec = {f = (as and as.f) or node.f, s = pos, kids = {}}
  kids[#kids + 1] = rec
  local vals, texts = {}, {}
  local p = read_fields(node.fields, st, pos, rec.kids, vals, texts)
  rec.e, rec.text = p, show(node, vals, texts)
  return vals, rec.text, p
end

local function read_use(node, st, pos, kids)
  if node.nest then
    st.depth = st.depth + 1
    if st.depth > MAX_NESTING then fail("absurd", node.name .. ": nested more than " .. MAX_NESTING .. " deep") end
  end
  local v, t, p = read(DEFS[node.defn], st, pos, kids, {}, {}, node)
  if node.nest then st.depth = st.depth - 1 end
  return v, t, p
end

local function read_choice(node, st, pos, kids, as)
  local rec = {f = (as and as.f) or node.f, s = pos, kids = {}}
  kids[#kids + 1] = rec
  local tag, _, p = read_int(node.tag, st, pos, rec.kids)
  for _, c in ipairs(node.cases) do
    local hit
    if node.bit then hit = band(tag, c.key) ~= 0 else hit = (tag == c.key) end
    if hit then
      if not c.node then
        rec.e, rec.text = p, "null"
        return nil, "null", p
      end
      local v, t
      v, t, p = read(c.node, st, p, rec.kids, {}, {})
      rec.e, rec.text = p, t
      return v, t, p
    end
  end
  fail(node.reason, node.name .. ": " .. (node.text:gsub("{tag}", tostring(tag))))
end

read = function(node, st, pos, kids, vals, texts, as)
  local k = node.k
  if k == "int" then return read_int(node, st, pos, kids) end
  if k == "utf" then return read_utf(node, st, pos, kids) end
  if k == "blob" then return read_blob(node, st, pos, kids, vals) end
  if k == "opt" then return read_opt(node, st, pos, kids, vals, texts) end
  if k == "list" then return read_list(node, st, pos, kids, as) end
  if k == "struct" then return read_struct(node, st, pos, kids, as) end
  if k == "use" then return read_use(node, st, pos, kids) end
  if k == "choice" then return read_choice(node, st, pos, kids, as) end
  error("unknown node kind " .. tostring(k))
end

read_fields = function(fields, st, pos, kids, vals, texts)
  for _, node in ipairs(fields) do
    if node.k == "switch" then
      local body = node.cases[vals[node.on]] or node.default
      pos = read_fields(body, st, pos, kids, vals, texts)
    elseif node.k == "when" then
      if band(vals[node.on], node.bit) ~= 0 then pos = read_fields(node.fields, st, pos, kids, vals, texts) end
    else
      local v, t
      v, t, pos = read(node, st, pos, kids, vals, texts)
      vals[node.name], texts[node.name] = v, t
    end
  end
  return pos
end

local function summary(spec, vals, texts)
  local parts = {}
  for _, it in ipairs(spec.info) do
    local name, style = it[1], it[2]
    local t = texts[name]
    if t ~= nil and t ~= "null" then
      if style == "named" then parts[#parts + 1] = name .. "=" .. t
      elseif style == "bare" then parts[#parts + 1] = t
      elseif style == "flag" and vals[name] == true then parts[#parts + 1] = name end
    end
  end
  return #parts > 0 and (" " .. table.concat(parts, " ")) or ""
end

-- a message: MESSAGE, HEADER_COUNT, then per header HEADER and HEADERS[magic]; nil when a header is undecodable
local function read_message(st, pos, kids, index, info)
  local rec = {f = F["%(proto)s.message"], s = pos, kids = {}}
  kids[#kids + 1] = rec
  local entry, quiet, ranked = {}, {}, {}
  local function finish(p)
    table.sort(ranked, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
    for _, r in ipairs(ranked) do entry[#entry + 1] = r[3] end
    if st.undecodable then entry[#entry + 1] = st.undecodable_text end
    local text = table.concat(#entry > 0 and entry or quiet, ", ")
    if text == "" then text = "no headers" end
    rec.e, rec.v, rec.label = p, text, "Message " .. index .. ": " .. text
    info[#info + 1] = text
  end
  local p = read_fields(MESSAGE.fields, st, pos, rec.kids, {}, {})
  local count
  count, _, p = read(HEADER_COUNT, st, p, rec.kids, {}, {})
  for i = 1, count do
    local hrec = {s = p, kids = {}}
    rec.kids[#rec.kids + 1] = hrec
    local vals, texts = {}, {}
    p = read_fields(HEADER, st, p, hrec.kids, vals, texts)
    local proto = PROTOCOL_IDS[vals.proto_id] or ("protocol-" .. vals.proto_id)
    local spec = HEADERS[vals.magic]
    if not spec then
      local class = MAGIC_NUMBERS[vals.magic] or "not in jg-magic-map.xml"
      local text = proto .. " magic " .. vals.magic .. " (" .. class .. "): not decoded"
      hrec.e, hrec.label = st.stop, text
      if st.stop > p then hrec.kids[#hrec.kids + 1] = {f = F["%(proto)s.undecodable_bytes"], s = p, e = st.stop} end
      st.undecodable = "message " .. index .. ", header " .. i .. " of " .. count .. ": " .. text ..
                       "; a header body has no length, so the rest of the datagram is unknown"
      st.undecodable_text = text
      finish(st.stop)
      return nil
    end
    local kind = spec.kind
    if type(kind) ~= "string" then
      local code
      code, _, p = read(spec.kind, st, p, hrec.kids, {}, {})
      vals[spec.kind.name] = code
      kind = KINDS[vals.magic][code] or ("UNKNOWN_" .. tostring(code))
    end
    p = read_fields(spec.body, st, p, hrec.kids, vals, texts)
    local text = proto .. " " .. kind .. summary(spec, vals, texts)
    hrec.e, hrec.f, hrec.v, hrec.label = p, spec.f, kind, text
    if spec.quiet then quiet[#quiet + 1] = text
    else ranked[#ranked + 1] = {RANK[vals.magic] or 1000, i, text} end
  end
  finish(p)
  return p
end

local function version_text(v)
  return math.floor(v / 2048) .. "." .. (math.floor(v / 64) %% 32) .. "." .. (v %% 64)
end

local function read_datagram(st, kids, info)
  local version, _, p = read(DATAGRAM[1], st, 0, kids, {}, {})
  if band(version, VERSION_MASK) ~= VERSION_COMPAT then
    fail("version", "version " .. version_text(version) .. " is not binary compatible with 2.12.2")
  end
  local flags
  flags, _, p = read(DATAGRAM[2], st, p, kids, {}, {})
  if band(flags, TP_LIST) == 0 then return read_message(st, p, kids, 1, info) end
  _, _, p = read(BUNDLE, st, p, kids, {}, {})
  local i = 0
  while true do
    local more
    more, _, p = read(BUNDLE_MORE, st, p, kids, {}, {})
    if not more then return p end
    i = i + 1
    p = read_message(st, p, kids, i, info)
    if not p then return nil end
  end
end

local function ends(rec)
  if rec.e then return rec.e end
  local e = rec.s
  for _, kid in ipairs(rec.kids or {}) do e = math.max(e, ends(kid)) end
  return e
end

local function render(tree, tvb, rec)
  local range = tvb(rec.s, ends(rec) - rec.s)
  local item
  if rec.f and rec.v ~= nil then item = tree:add(rec.f, range, rec.v)
  elseif rec.f and rec.kids then item = tree:add(rec.f, range, rec.text or "(malformed)")
  elseif rec.f then item = tree:add(rec.f, range)
  else item = tree:add(P, range, rec.label or "(malformed)") end
  if rec.label and rec.f then item:set_text(rec.label) end
  for _, kid in ipairs(rec.kids or {}) do render(item, tvb, kid) end
end

local function dissect(tvb, pinfo, tree)
  pinfo.cols.protocol = "JGroups"
  local root = tree:add(P, tvb())
  local st = {tvb = tvb, stop = tvb:len(), depth = 0}
  local kids, info = {}, {}
  local ok, err = pcall(read_datagram, st, kids, info)
  local problem
  if not ok then
    if getmetatable(err) == Stop then problem = err.reason .. ": " .. err.text
    else problem = "dissector error: " .. tostring(err) end
  end
  local rendered, rerr = pcall(function() for _, rec in ipairs(kids) do render(root, tvb, rec) end end)
  if not rendered then problem = (problem and problem .. "; " or "") .. "dissector error: " .. tostring(rerr) end
  if problem then root:add_proto_expert_info(MALFORMED, problem) end
  if st.undecodable then root:add_proto_expert_info(UNDECODABLE, st.undecodable) end
  local text = table.concat(info, "; ")
  if problem then text = "[Malformed] " .. (text ~= "" and text .. "; " or "") .. problem end
  pinfo.cols.info = text
  return tvb:len()
end

local function ours(tvb)  -- a version JGroups 2.12.2 reads (2.12.x)
  return band(tvb(0, 2):uint(), VERSION_MASK) == VERSION_COMPAT
end

function P.dissector(tvb, pinfo, tree)
  if tvb:len() >= 2 and not ours(tvb) then return 0 end  -- another version, or not JGroups: not ours
  return dissect(tvb, pinfo, tree)
end

local function heuristic(tvb, pinfo, tree)
  if tvb:len() < 4 or not ours(tvb) then return false end
  local flags, after = tvb(2, 1):uint(), tvb(3, 1):uint()
  if band(flags, 255 - TP_FLAGS) ~= 0 then return false end
  if band(flags, TP_LIST) ~= 0 then
    if after == 0 or band(after, 255 - ADDRESS_BITS) ~= 0 then return false end  -- the bundle's dest address
  elseif band(after, 255 - LEADING_BITS) ~= 0 then return false end  -- the message's leading byte
  dissect(tvb, pinfo, tree)
  return true
end

local udp = DissectorTable.get("udp.port")
for port = %(first_port)d, %(last_port)d do udp:add(port, P) end
P:register_heuristic("udp", heuristic)
"""


def lua() -> str:
    """The dissector's Lua source for the layout of `jgnode.layout`."""
    w = _Writer()
    address = layout.DEFINITIONS["address"]
    assert isinstance(address, Choice)
    values = {
        "proto": PROTO, "kinds": _kinds(), "protocol_ids": lua_value(layout.PROTOCOL_IDS),
        "magic_numbers": lua_value(layout.MAGIC_NUMBERS),
        "rank": lua_value({magic: rank for rank, magic in enumerate(CLASSIFY_ORDER)}),
        "version_mask": layout.VERSION_MAJOR_MASK | layout.VERSION_MINOR_MASK,
        "version_compat": layout.encode_version(*layout.COMPATIBLE_MAJOR_MINOR, 0),
        "tp_list": layout.TP_LIST, "nesting": layout.MAX_NESTING, "tp_flags": layout.TP_FLAGS_ALL,
        "leading_bits": layout.LEADING_ALL, "address_bits": sum(key for key, _ in address.cases),
        "first_port": PORTS[0], "last_port": PORTS[1],
    }
    tables = ["local DEFS = {}"]
    tables += [f"DEFS[{lua_str(name)}] = {w.node(node, name, root=True)}"
               for name, node in layout.DEFINITIONS.items()]
    tables.append(f"local DATAGRAM = {w.fields_of(layout.DATAGRAM, '')}")
    tables.append(f"local BUNDLE = {w.node(layout.BUNDLE, '')}")
    tables.append(f"local BUNDLE_MORE = {w.node(layout.BUNDLE_MORE, 'bundle')}")
    tables.append(f"local MESSAGE = {w.node(layout.MESSAGE, '')}")
    tables.append(f"local HEADER_COUNT = {w.node(layout.HEADER_COUNT, 'message')}")
    tables.append(f"local HEADER = {w.fields_of(layout.HEADER, 'header')}")
    tables.append("local HEADERS = {" + ", ".join(f"[{magic}] = {w.header(spec)}"
                                                  for magic, spec in layout.HEADERS.items()) + "}")
    declarations = [f"F[{lua_str(abbr)}] = {call}" for abbr, call in w.fields.items()]
    return "\n".join([_PRELUDE % values, *declarations, *tables, _READER % values]) + "\n"


def install(plugin_dir: Path | None = None) -> Path:
    """Write the dissector into `plugin_dir` (default: Wireshark's personal Lua plugin folder); returns its path.
    Raises `EnvironmentProblem` when it cannot be written."""
    return install_plugin(plugin_dir, PLUGIN_FILE, lua())
