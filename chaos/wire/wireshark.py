"""A Wireshark / tshark dissector for the node's wire format, generated from the codec's own message registry.

`lua()` writes a Lua dissector from `node.wire`: the header (magic, version and its SIGNED bit, cluster id,
incarnation, sender, message count), every registered message type with its fields in body order (each class's
`node.wire.body_layout`), bundles, and the tag of a signed datagram. A new
message type or field is in the next generated dissector without anyone editing Lua; `read_body` reads a body by
the same layout in Python, and the tests hold it to the codec's own decoding of every type, so the layout cannot
drift from what the nodes send.

The dissector is registered on UDP port `node.wire.DATA_PORT` (7100) and as a UDP heuristic (our magic and a
version the codec speaks) for other ports. On its port it declines a datagram without our magic, so the
heuristics (the JGroups dissector's among them: `chaos.wire.wireshark_jgroups`) get the real JGroups' traffic on
that port. The Info column reads like `UnicastData seqno=21 conn_id=8192
first=0`, one entry per bundled message. A datagram the codec would refuse (truncated, an absurd length or count,
an unknown type, trailing bytes) is marked with the expert info `splitlab.malformed` ("[Malformed]" in the Info
column) at the first problem, never a Lua error: every read is bounds-checked first.

`install(dir)` writes it where Wireshark and tshark load personal Lua plugins (`personal_plugin_dir`).
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from chaos.wire.lua import install_plugin, lua_str
from node import wire
from node.auth import TAG_BYTES

PROTO = "splitlab"
PLUGIN_FILE = "splitlab.lua"
_WIDTH = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "bool": 1}


def read_body(cls: type[wire.Message], body: bytes) -> dict[str, Any]:
    """The fields of a well-formed `cls` body read by its layout (what the dissector reads; the tests compare it
    with the codec's decoding). Raises `ValueError` for a body the layout does not fit."""
    out: dict[str, Any] = {}
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if pos + n > len(body):
            raise ValueError(f"{cls.__name__}: {n} bytes at {pos} run past the body ({len(body)})")
        chunk = body[pos:pos + n]
        pos += n
        return chunk

    def names() -> list[str]:
        return [take(take(1)[0]).decode() for _ in range(take(1)[0])]

    for kind, field in wire.body_layout(cls):
        if kind in ("u8", "u16", "u32", "u64"):
            out[field] = int.from_bytes(take(_WIDTH[kind]), "big")
        elif kind == "bool":
            out[field] = take(1)[0] == 1
        elif kind == "payload":
            out[field] = take(int.from_bytes(take(4), "big"))
        elif kind == "seqnos":
            count = int.from_bytes(take(2), "big")
            out[field] = struct.unpack(f"!{count}Q", take(8 * count))
        elif kind == "name_list":
            got, wanted = names(), field.split()
            if len(got) != len(wanted):
                raise ValueError(f"{cls.__name__}: {len(got)} names for {wanted}")
            out.update(zip(wanted, got))
        elif kind == "names":
            out[field] = tuple(names())
        else:
            raise ValueError(f"{cls.__name__}: unknown layout kind {kind!r}")
    if pos != len(body):
        raise ValueError(f"{cls.__name__}: {len(body) - pos} trailing bytes")
    return out


def _abbr(cls: type[wire.Message], field: str) -> str:
    return f"{PROTO}.{cls.__name__.lower()}.{field}"


def _field_decls(cls: type[wire.Message]) -> list[str]:
    """ProtoField declarations of one message type's fields (`F["<abbr>"]`)."""
    out = []
    for kind, field in wire.body_layout(cls):
        for name in field.split():
            abbr = _abbr(cls, name)
            if kind in ("u8", "u16", "u32", "u64", "bool"):
                ctor = {"u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "bool": "uint8"}[kind]
                out.append(f'F[{lua_str(abbr)}] = ProtoField.{ctor}({lua_str(abbr)}, {lua_str(name)}, base.DEC)')
            elif kind == "payload":
                out.append(f'F[{lua_str(abbr + "_len")}] = ProtoField.uint32({lua_str(abbr + "_len")}, '
                           f'{lua_str(name + " length")}, base.DEC)')
                out.append(f'F[{lua_str(abbr)}] = ProtoField.bytes({lua_str(abbr)}, {lua_str(name)})')
            elif kind == "seqnos":
                out.append(f'F[{lua_str(abbr + "_count")}] = ProtoField.uint16({lua_str(abbr + "_count")}, '
                           f'{lua_str(name + " count")}, base.DEC)')
                out.append(f'F[{lua_str(abbr)}] = ProtoField.uint64({lua_str(abbr)}, {lua_str(name)}, base.DEC)')
            else:  # name_list, names
                out.append(f'F[{lua_str(abbr)}] = ProtoField.string({lua_str(abbr)}, {lua_str(name)})')
    return out


def _read_call(cls: type[wire.Message], kind: str, field: str) -> str:
    """The Lua call reading one (kind, field) of a body: it returns the next position, or nil when malformed."""
    f = f"F[{lua_str(_abbr(cls, field))}]"
    label = lua_str(field)
    if kind in _WIDTH:  # u8..u64 and bool (a byte 0 or 1)
        flag = "true" if kind == "bool" else "false"
        return f"num(tvb, pos, stop, {_WIDTH[kind]}, tree, {f}, sum, {label}, {flag})"
    if kind == "payload":
        return f"payload(tvb, pos, stop, tree, F[{lua_str(_abbr(cls, field) + '_len')}], {f}, sum, {label})"
    if kind == "seqnos":
        return f"seqnos(tvb, pos, stop, tree, F[{lua_str(_abbr(cls, field) + '_count')}], {f}, sum, {label})"
    if kind == "name_list":
        fields = ", ".join(f"F[{lua_str(_abbr(cls, n))}]" for n in field.split())
        labels = ", ".join(lua_str(n) for n in field.split())
        return f"names(tvb, pos, stop, tree, {{{fields}}}, {{{labels}}}, sum)"
    if kind == "names":
        return f"names(tvb, pos, stop, tree, {f}, {label}, sum)"
    raise ValueError(f"{cls.__name__}: unknown layout kind {kind!r}")


def _body_reader(cls: type[wire.Message]) -> str:
    """A Lua function(tvb, pos, stop, tree, sum) -> summary, or nil and the problem, for one type's body."""
    steps = [f"pos = {_read_call(cls, kind, field)}; if not pos then return nil end"
             for kind, field in wire.body_layout(cls)]
    steps.append('if pos ~= stop then return bad(tree, tvb, pos, stop, (stop - pos) .. " trailing bytes") end')
    steps.append("return table.concat(sum, \" \")")
    body = "\n    ".join(steps)
    return f"READ[{cls.TYPE}] = function(tvb, pos, stop, tree, sum)\n    {body}\nend"


_PRELUDE = r"""
-- generated by splitlab (chaos/wire/wireshark.py) from node/wire.py: do not edit; 'splitlab wireshark lua'
local P = Proto("%(proto)s", "splitlab wire protocol")
local F = {}
local READ = {}
local NAMES = %(names)s
local VERSION, SIGNED, TAG_BYTES = %(version)d, %(signed)d, %(tag)d
local HEAD, MAX_SENDER, MAX_MESSAGES = %(head)d, %(max_sender)d, %(max_messages)d
F["%(proto)s.magic"] = ProtoField.string("%(proto)s.magic", "Magic")
F["%(proto)s.version"] = ProtoField.uint8("%(proto)s.version", "Version", base.DEC)
F["%(proto)s.signed"] = ProtoField.uint8("%(proto)s.signed", "Signed", base.DEC)
F["%(proto)s.cluster_id"] = ProtoField.uint32("%(proto)s.cluster_id", "Cluster id", base.HEX)
F["%(proto)s.incarnation"] = ProtoField.uint64("%(proto)s.incarnation", "Incarnation", base.DEC)
F["%(proto)s.sender"] = ProtoField.string("%(proto)s.sender", "Sender")
F["%(proto)s.count"] = ProtoField.uint16("%(proto)s.count", "Messages", base.DEC)
F["%(proto)s.msg.type"] = ProtoField.uint8("%(proto)s.msg.type", "Type", base.DEC, NAMES)
F["%(proto)s.msg.len"] = ProtoField.uint16("%(proto)s.msg.len", "Body length", base.DEC)
F["%(proto)s.tag"] = ProtoField.bytes("%(proto)s.tag", "Tag (HMAC-SHA256/128)")
"""

_FUNCTIONS = r"""
local MALFORMED = ProtoExpert.new("%(proto)s.malformed", "Malformed splitlab datagram", expert.group.MALFORMED,
                                  expert.severity.ERROR)
local fl = {}
for _, f in pairs(F) do table.insert(fl, f) end
P.fields = fl
P.experts = {MALFORMED}

local function bad(tree, tvb, pos, stop, text)
  tree:add_proto_expert_info(MALFORMED, text)
  return nil, text
end

local function num(tvb, pos, stop, width, tree, field, sum, label, flag)
  if pos + width > stop then return bad(tree, tvb, pos, stop, label .. ": truncated") end
  local r = tvb(pos, width)
  tree:add(field, r)
  local v
  if width == 8 then v = tostring(r:uint64()) else v = r:uint() end
  if flag and v ~= 0 and v ~= 1 then return bad(tree, tvb, pos, stop, label .. ": flag byte " .. v) end
  table.insert(sum, label .. "=" .. tostring(v))
  return pos + width
end

local function prefix(tvb, pos, stop, tree, field, width, label)  -- a length or count: its value, or nil
  if pos + width > stop then return bad(tree, tvb, pos, stop, label .. ": truncated") end
  tree:add(field, tvb(pos, width))
  return tvb(pos, width):uint()
end

local function payload(tvb, pos, stop, tree, lenfield, field, sum, label)
  local n = prefix(tvb, pos, stop, tree, lenfield, 4, label .. " length")
  if not n then return nil end
  pos = pos + 4
  if pos + n ~= stop then
    return bad(tree, tvb, pos, stop, label .. " length " .. n .. ", " .. (stop - pos) .. " bytes follow")
  end
  if n > 0 then tree:add(field, tvb(pos, n)) end
  table.insert(sum, label .. "_len=" .. n)
  return pos + n
end

local function seqnos(tvb, pos, stop, tree, countfield, field, sum, label)
  local n = prefix(tvb, pos, stop, tree, countfield, 2, label .. " count")
  if not n then return nil end
  pos = pos + 2
  if pos + 8 * n > stop then return bad(tree, tvb, pos, stop, label .. " count " .. n .. ": truncated") end
  local shown = {}
  for i = 0, n - 1 do
    local r = tvb(pos + 8 * i, 8)
    tree:add(field, r)
    if i < 8 then table.insert(shown, tostring(r:uint64())) end
  end
  table.insert(sum, label .. "=[" .. table.concat(shown, ",") .. (n > 8 and ",..." or "") .. "]")
  return pos + 8 * n
end

local function names(tvb, pos, stop, tree, fields, labels, sum)
  if pos + 1 > stop then return bad(tree, tvb, pos, stop, "name count: truncated") end
  local n = tvb(pos, 1):uint()
  pos = pos + 1
  local fixed = type(fields) == "table"
  if fixed and n ~= #fields then return bad(tree, tvb, pos, stop, n .. " names, expected " .. #fields) end
  local got = {}
  for i = 1, n do
    if pos + 1 > stop then return bad(tree, tvb, pos, stop, "name length: truncated") end
    local len = tvb(pos, 1):uint()
    if len < 1 or len > MAX_SENDER then return bad(tree, tvb, pos, stop, "name length " .. len) end
    if pos + 1 + len > stop then return bad(tree, tvb, pos, stop, "name: truncated") end
    local r = tvb(pos + 1, len)
    tree:add(fixed and fields[i] or fields, r)
    table.insert(got, r:string())
    if fixed then table.insert(sum, labels[i] .. "=" .. r:string()) end
    pos = pos + 1 + len
  end
  if not fixed then table.insert(sum, labels .. "=[" .. table.concat(got, ",") .. "]") end
  return pos
end

local function dissect(tvb, pinfo, tree)
  local len = tvb:len()
  pinfo.cols.protocol = "SPLITLAB"
  local root = tree:add(P, tvb())
  if len < HEAD then
    bad(root, tvb, 0, len, len .. " bytes is shorter than the header")
    pinfo.cols.info = "[Malformed] " .. len .. " bytes"
    return len
  end
  root:add(F["%(proto)s.magic"], tvb(0, 2))
  local version = tvb(2, 1):uint()
  root:add(F["%(proto)s.version"], tvb(2, 1), version %% 128)
  local signed = version >= 128
  root:add(F["%(proto)s.signed"], tvb(2, 1), signed and 1 or 0)
  root:add(F["%(proto)s.cluster_id"], tvb(3, 4))
  root:add(F["%(proto)s.incarnation"], tvb(7, 8))
  local stop = len
  if signed then
    if len < HEAD + TAG_BYTES then
      bad(root, tvb, HEAD, len, "too short for a header and a tag")
      pinfo.cols.info = "[Malformed] signed, " .. len .. " bytes"
      return len
    end
    stop = len - TAG_BYTES
    root:add(F["%(proto)s.tag"], tvb(stop, TAG_BYTES))
  end
  local info = {}
  local function finish(problem)
    local text = table.concat(info, "; ")
    if problem then text = "[Malformed] " .. (text ~= "" and text .. "; " or "") .. problem end
    pinfo.cols.info = (signed and "(signed) " or "") .. text
    return len
  end
  local slen = tvb(15, 1):uint()
  if slen < 1 or slen > MAX_SENDER then
    bad(root, tvb, 15, stop, "sender length " .. slen)
    return finish("sender length " .. slen)
  end
  if 16 + slen + 2 > stop then
    bad(root, tvb, 16, stop, "the datagram ends inside the header")
    return finish("the datagram ends inside the header")
  end
  root:add(F["%(proto)s.sender"], tvb(16, slen))
  local count = tvb(16 + slen, 2):uint()
  root:add(F["%(proto)s.count"], tvb(16 + slen, 2))
  if count < 1 or count > MAX_MESSAGES then
    bad(root, tvb, 16 + slen, stop, "message count " .. count)
    return finish("message count " .. count)
  end
  local pos = 16 + slen + 2
  for i = 1, count do
    if pos + 3 > stop then
      bad(root, tvb, pos, stop, "the datagram ends before message " .. i)
      return finish("the datagram ends before message " .. i)
    end
    local mtype, blen = tvb(pos, 1):uint(), tvb(pos + 1, 2):uint()
    local name = NAMES[mtype] or ("type " .. mtype)
    local avail = math.min(3 + blen, stop - pos)
    local sub = root:add(P, tvb(pos, avail), "Message " .. i .. ": " .. name)
    sub:add(F["%(proto)s.msg.type"], tvb(pos, 1))
    sub:add(F["%(proto)s.msg.len"], tvb(pos + 1, 2))
    local body = pos + 3
    if body + blen > stop then
      bad(sub, tvb, body, stop, name .. ": body runs past the datagram end")
      return finish(name .. ": body runs past the datagram end")
    end
    local read = READ[mtype]
    if not read then
      bad(sub, tvb, pos, stop, "unknown message type " .. mtype)
      return finish("unknown message type " .. mtype)
    end
    local sum = {name}
    local ok, summary, problem = pcall(read, tvb, body, body + blen, sub, sum)
    if not ok then
      bad(sub, tvb, body, body + blen, name .. ": " .. tostring(summary))
      return finish(name .. ": " .. tostring(summary))
    end
    if not summary then return finish(name .. ": " .. tostring(problem)) end
    table.insert(info, summary)
    pos = body + blen
  end
  if pos ~= stop then
    bad(root, tvb, pos, stop, (stop - pos) .. " trailing bytes")
    return finish((stop - pos) .. " trailing bytes")
  end
  return finish(nil)
end

function P.dissector(tvb, pinfo, tree)
  -- another wire on our port (the real JGroups' nodes use the same data port): not ours, let the heuristics try
  if tvb:len() >= 2 and tvb(0, 2):string() ~= "SL" then return 0 end
  return dissect(tvb, pinfo, tree)
end

local function heuristic(tvb, pinfo, tree)
  if tvb:len() < HEAD or tvb(0, 2):string() ~= "SL" then return false end
  local v = tvb(2, 1):uint()
  if v ~= VERSION and v ~= VERSION + SIGNED then return false end
  dissect(tvb, pinfo, tree)
  return true
end

DissectorTable.get("udp.port"):add(%(port)d, P)
P:register_heuristic("udp", heuristic)
"""


def lua() -> str:
    """The dissector's Lua source for every message type registered in `node.wire`."""
    types = sorted(wire.message_types().items())
    names = "{" + ", ".join(f"[{code}] = {lua_str(cls.__name__)}" for code, cls in types) + "}"
    values = {"proto": PROTO, "names": names, "version": wire.VERSION, "signed": wire.SIGNED, "tag": TAG_BYTES,
              "head": wire.HEAD_BYTES, "max_sender": wire.MAX_SENDER_BYTES, "max_messages": wire.MAX_MESSAGES,
              "port": wire.DATA_PORT}
    parts = [_PRELUDE % values]
    for _code, cls in types:
        parts += _field_decls(cls)
    parts.append(_FUNCTIONS % values)
    parts += [_body_reader(cls) for _code, cls in types]
    return "\n".join(parts) + "\n"


def install(plugin_dir: Path | None = None) -> Path:
    """Write the dissector into `plugin_dir` (default: Wireshark's personal Lua plugin folder); returns its path.
    Raises `EnvironmentProblem` when it cannot be written."""
    return install_plugin(plugin_dir, PLUGIN_FILE, lua())
