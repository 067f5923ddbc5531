"""Read a YAML document into plain data and remember where every value came from.

`load_yaml(text, source)` returns `Sourced(data, where)`: `where` maps a path (a tuple of mapping keys and list
indices, e.g. `("steps", 3, "at_s")`) to a location such as `scenarios/x.yaml:12`. A path without an entry of its
own falls back to its nearest ancestor's (`locate`). `set_path` applies a `--set key=value` override and records
`--set key` as the location of what it replaced. Syntax errors, duplicate keys, characters YAML refuses, nesting
deeper than `MAX_DEPTH`, and aliases that expand to more than `MAX_VALUES` values (a "billion laughs") or into
themselves raise `UsageError` naming the file (and the line where there is one), quickly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from node.errors import UsageError

Path_ = tuple[Any, ...]

MAX_VALUES = 100_000  # values a document may hold once its aliases are expanded; a scenario holds hundreds
MAX_DEPTH = 64  # mappings and lists inside each other; a scenario nests five (PyYAML's scanner slows as d^2)


@dataclass
class Sourced:
    """Plain data (dicts, lists, scalars) and the location of each path in it."""

    data: Any
    where: dict[Path_, str] = field(default_factory=dict)
    source: str = "<text>"

    def locate(self, path: Path_) -> str:
        """The location of `path`, or of its nearest ancestor that has one, or the source itself."""
        path = tuple(path)
        while path:
            if path in self.where:
                return self.where[path]
            path = path[:-1]
        return self.where.get((), self.source)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses nesting deeper than `MAX_DEPTH` as it composes (not at Python's
    recursion limit, which the scanner takes seconds to reach)."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self.source = source
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise UsageError(f"{self.source}:{line}: mappings and lists nested more than {MAX_DEPTH} "
                                 f"deep", hint="a scenario nests a few levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


@dataclass
class _Walk:
    """What a walk over the node tree has seen: how many values (aliases expanded) and which collections it is
    inside (a collection met again inside itself is a recursive alias)."""

    source: str
    values: int = 0
    open: set[int] = field(default_factory=set)

    def enter(self, node: yaml.Node) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            raise UsageError(f"{self.source}: the document holds more than {MAX_VALUES:,} values once its YAML "
                             f"aliases are expanded", hint="a scenario needs a few hundred; are aliases nested in "
                                                           "aliases (a 'billion laughs')?")
        if id(node) in self.open:
            raise UsageError(f"{self.source}:{node.start_mark.line + 1}: a YAML alias refers to a mapping or list "
                             f"that contains it", hint="an alias may only repeat something outside itself")
        if isinstance(node, yaml.CollectionNode):
            self.open.add(id(node))

    def leave(self, node: yaml.Node) -> None:
        self.open.discard(id(node))


def _walk(loader: _Loader, node: yaml.Node, path: Path_, source: str, where: dict[Path_, str],
          walk: _Walk) -> None:
    walk.enter(node)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (list, dict)):
                raise UsageError(f"{source}:{line}: a mapping key must be a plain value, not {type(key).__name__}")
            if key in seen:
                raise UsageError(f"{source}:{line}: duplicate key {key!r} (first at line {seen[key]})",
                                 hint="each field may appear once in a mapping")
            seen[key] = line
            where[path + (key,)] = f"{source}:{line}"
            _walk(loader, value_node, path + (key,), source, where, walk)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            where[path + (index,)] = f"{source}:{item.start_mark.line + 1}"
            _walk(loader, item, path + (index,), source, where, walk)
    walk.leave(node)


def load_yaml(text: str, source: str) -> Sourced:
    """Parse one YAML document. Raises `UsageError` for a syntax error or a duplicate key (with file:line), and
    for a document YAML or this walk cannot take (see the module's docstring)."""
    try:
        loader = _Loader(text, source)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise UsageError(f"{source}:{line}: not YAML text: character #x{exc.character:04x} is not allowed "
                         f"({exc.reason})", hint="a scenario is a YAML text file") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return Sourced(None, {(): f"{source}:1"}, source)
        data = loader.construct_document(node)  # shares what aliases repeat: linear in the text
        where: dict[Path_, str] = {(): f"{source}:{node.start_mark.line + 1}"}
        _walk(loader, node, (), source, where, _Walk(source))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise UsageError(f"{source}{line}: YAML syntax error: {problem}",
                         hint="check indentation, colons and quotes around text with ':' or '#'") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{source}: YAML error: {exc}") from None
    finally:
        loader.dispose()
    return Sourced(data, where, source)


def parse_value(text: str) -> Any:
    """A `--set` value read as YAML (`3`, `1.5`, `true`, `unicast2`, `[n1, n2]`); unparsable text stays text."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def set_path(doc: Sourced, assignment: str) -> None:
    """Apply `key.sub.0.field=value` to `doc.data` (list items by index; missing mappings are created).

    Raises `UsageError` for a malformed assignment or a path through something that is not a mapping or list.
    """
    key, sep, raw = assignment.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UsageError(f"--set {assignment!r}: expected key.path=value",
                         hint="e.g. --set cluster.defaults.timeouts.conn_close_timeout_ms=500 or --set steps.2.at_s=3")
    parts: list[Any] = key.split(".")
    if not isinstance(doc.data, dict):
        raise UsageError(f"--set {key}: the scenario is not a mapping")
    target: Any = doc.data
    path: Path_ = ()
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if isinstance(target, list):
            if not part.isdigit() or int(part) >= len(target):
                raise UsageError(f"--set {key}: {'.'.join(map(str, path)) or 'the document'} is a list of "
                                 f"{len(target)}; expected an index 0..{len(target) - 1}, got {part!r}")
            part = int(part)
        elif not isinstance(target, dict):
            raise UsageError(f"--set {key}: {'.'.join(map(str, path))} is a {type(target).__name__}, not a mapping")
        path = path + (part,)
        if last:
            target[part] = parse_value(raw)
        else:
            if isinstance(target, dict) and (part not in target or target[part] is None):
                target[part] = {}
            target = target[part]
    for known in [p for p in doc.where if p[:len(path)] == path]:
        del doc.where[known]
    doc.where[path] = f"--set {key}"
