"""The JSON-lines history writer (one file per node per run, buffered, flushed on close so nothing is lost), and
`expand`, which turns the writer's run lines back into one event each.

Every event has the envelope of pipeline/SCHEMA.md:
`{"v": 1, "ts": <unix seconds>, "seq": <per-writer counter>, "run": <run id>, "node": <name>, "type": <event>,
...fields}`. `seq` lets readers order events of one node that share a timestamp and detect lost lines.

The per-message events (`RUN_FIELDS`: `app_send`, `data_tx`, `data_rx`, `app_deliver`, acks) are written as runs:
events of one type whose other fields are equal (one sender, one connection, ...) share one line, with the fields
that differ, and each event's own `ts` and `seq`, as equal-length lists under `rows`:
`{..., "type": "data_rx", "ts": <first ts>, "seq": <first seq>, "proto": "unicast3", "from": "n1", "conn_id": 3,
"first": false, "rows": {"ts": [...], "seq": [...], "seqno": [...], "action": [...]}}`. Nothing is lost: every
event keeps its time and its place in the writer's `seq`. A run of one event is written as a plain line. Runs end
at every flush. Why: a line per message cost more of the node's CPU than its protocol (issue 34: 0.78 us per
event, two events per message on each side); a row of a run costs less than half of that, and the history's
bytes shrink fourfold (`bench_history`).
"""
from __future__ import annotations

import os
import time
from operator import itemgetter
from pathlib import Path
from typing import Any, BinaryIO, Callable

import orjson
from mypy_extensions import mypyc_attr

from node.errors import HistoryError

SCHEMA_VERSION = 1
# The history every node of the node contract writes (NODE_CONTRACT.md): what the delivery, duplicates, fifo,
# latency, views and heal checks read. A node that writes only some protocol events beyond these lists what it
# writes in `node_start.config.records`; a node that does not list them writes every type of the schema.
CONTRACT_EVENTS = frozenset({"node_start", "node_stop", "peer_heard", "peer_silent", "app_send", "app_deliver",
                             "view"})
ROWS = "rows"
# The event types written as runs, with the fields that vary from one event of a run to the next (every other
# field must be equal along a run). Each row also has its own `ts` and `seq`.
RUN_FIELDS: dict[str, tuple[str, ...]] = {
    "app_send": ("msg_id",),
    "app_deliver": ("msg_id",),
    "data_tx": ("seqno", "msg_id"),
    "data_rx": ("seqno", "action"),
    "ack_tx": ("seqno",),
    "ack_rx": ("seqno", "action"),
}
_ROW_ENVELOPE = ("ts", "seq")
# what a run line's `rows` may hold (a list of another name is ignored, as unknown fields are)
ROW_FIELDS: tuple[str, ...] = (*_ROW_ENVELOPE, *sorted({n for names in RUN_FIELDS.values() for n in names}))
_dumps = orjson.dumps
_RESERVED = frozenset({"v", "ts", "seq", "run", "node", "type", ROWS})


class _Shape:
    """How events of one type with one set of field names go into runs: the getters of the fields that must be
    equal along a run (`same`) and of those that vary (`vary`)."""

    __slots__ = ("type", "size", "same_names", "vary_names", "same", "vary")

    def __init__(self, type_: str, names: tuple[str, ...], vary_names: tuple[str, ...]) -> None:
        self.type = type_
        self.size = len(names)
        self.same_names = tuple(n for n in names if n not in vary_names)
        self.vary_names = vary_names
        # itemgetter: one C call for every field of the event. `same` always gives a tuple, which compares its
        # items by identity first: an event's values always equal themselves, so its first row always fits its run.
        self.same: Callable[[dict[str, Any]], tuple[Any, ...]] = (
            itemgetter(*self.same_names) if len(self.same_names) > 1
            else _one(self.same_names[0]) if self.same_names else _none)
        self.vary: Callable[[dict[str, Any]], Any] = itemgetter(*vary_names)


def _one(name: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    get = itemgetter(name)
    return lambda fields: (get(fields),)


def _none(fields: dict[str, Any]) -> tuple[Any, ...]:
    return ()


class _Run:
    """Consecutive events of one shape with equal `same` fields: their times, seqs and varying values."""

    __slots__ = ("shape", "same", "ts", "seq", "values")

    def __init__(self, shape: _Shape, same: tuple[Any, ...]) -> None:
        self.shape = shape
        self.same = same
        self.ts: list[float] = []
        self.seq: list[int] = []
        self.values: list[Any] = []

    def encode(self, head: bytes) -> bytes:
        """The run's line after `head` (the envelope's constant part and its type, up to `"ts":`)."""
        shape = self.shape
        fields = dict(zip(shape.same_names, self.same))
        columns = list(zip(*self.values)) if len(shape.vary_names) > 1 else [self.values]
        if len(self.seq) == 1:  # a run of one: a plain line
            fields.update((name, column[0]) for name, column in zip(shape.vary_names, columns))
        else:
            rows = {"ts": self.ts, "seq": self.seq}
            rows.update(zip(shape.vary_names, columns))
            fields[ROWS] = rows
        body = _dumps(fields, default=str)
        rest = b"," + body[1:] if len(body) > 2 else b"}"
        return b'%s%s,"seq":%d%s' % (head, _dumps(self.ts[0]), self.seq[0], rest)


@mypyc_attr(allow_interpreted_subclasses=True)  # the JGroups node's SharedHistory (jgnode.runtime)
class HistoryWriter:
    """Appends events to `path`; events are buffered and written when `buffer_lines` are pending or on `flush`.

    `clock` returns unix seconds (injectable for tests and the simulator). `runs=False` writes every event as a
    line of its own (the benchmarks' baseline).
    """

    def __init__(self, path: Path, run_id: str, node: str, buffer_lines: int = 1024,
                 clock: Callable[[], float] = time.time, runs: bool = True) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self.node = node
        self.buffer_lines = buffer_lines
        self._clock = clock
        self._run_fields = RUN_FIELDS if runs else {}
        self._seq = 0
        self._ended = False  # `end`: closed for good, later events dropped
        self.unrecorded = 0  # events dropped after `end`
        self._events = 0  # events pending
        self._pending: list[bytes | _Run] = []  # encoded lines and runs, in the order of their first event
        self._runs: dict[str, _Run] = {}  # event type -> its run still open (till the next flush)
        self._shapes: dict[tuple[str, tuple[str, ...]], _Shape | None] = {}  # None: plain lines
        # the envelope's constant part, encoded once: `{"v":1,"run":"...","node":"...",`
        self._head = orjson.dumps({"v": SCHEMA_VERSION, "run": run_id, "node": node})[:-1] + b","
        self._heads: dict[str, bytes] = {}  # event type -> the line's start up to `"ts":`
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: BinaryIO | None = open(self.path, "ab")
        except OSError as exc:
            raise HistoryError(f"cannot open history file {self.path}: {exc}",
                               hint="the run directory must be writable by the node's user") from None

    def emit(self, type_: str, **fields: Any) -> None:
        """Record one event; `fields` must be JSON-serialisable and must not use the envelope's keys."""
        self.record(type_, fields)

    def record(self, type_: str, fields: dict[str, Any]) -> None:
        """`emit` with the fields as one dict (the node's hot path: no keyword arguments to repack)."""
        run = self._runs.get(type_)
        if run is not None:  # the next row of the type's open run, when the event fits it
            shape = run.shape
            if len(fields) == shape.size:
                try:
                    same = shape.same(fields)
                    values = shape.vary(fields)
                except KeyError:  # another set of fields: another shape
                    pass
                else:
                    if same == run.same:
                        self._seq = seq = self._seq + 1
                        run.ts.append(self._clock())
                        run.seq.append(seq)
                        run.values.append(values)
                        self._events = events = self._events + 1
                        if events >= self.buffer_lines:
                            self.flush()
                        return
        if self._file is None:
            if self._ended:  # a node that ended its history goes on until it stops: what it does is not recorded
                self.unrecorded += 1
                return
            raise HistoryError(f"history {self.path} is closed; event {type_!r} was not recorded")
        vary = self._run_fields.get(type_)
        if vary is not None:
            names = tuple(fields)
            if (type_, names) in self._shapes:
                new_shape = self._shapes[type_, names]
            else:
                new_shape = self._shapes[type_, names] = self._shape(type_, names, vary, fields)
            if new_shape is not None:  # a new run: the event is its first row, by the path above
                self._runs[type_] = run = _Run(new_shape, new_shape.same(fields))
                self._pending.append(run)
                self.record(type_, fields)
                return
        elif not _RESERVED.isdisjoint(fields):
            raise ValueError(f"event {type_!r} uses reserved field(s) {sorted(_RESERVED.intersection(fields))}")
        self._seq += 1
        body = _dumps(fields, default=str)
        rest = b"," + body[1:] if len(body) > 2 else b"}"  # the fields after the envelope, or nothing
        self._pending.append(b'%s%s,"seq":%d%s' % (self._type_head(type_), _dumps(self._clock()), self._seq, rest))
        self._events += 1
        if self._events >= self.buffer_lines:
            self.flush()

    def _shape(self, type_: str, names: tuple[str, ...], vary: tuple[str, ...],
               fields: dict[str, Any]) -> _Shape | None:
        """The shape of events of `type_` with the field `names`, or None when they are written as plain lines (a
        field that varies is missing, e.g. a resend's `msg_id`). Raises ValueError for a reserved field."""
        if not _RESERVED.isdisjoint(fields):
            raise ValueError(f"event {type_!r} uses reserved field(s) {sorted(_RESERVED.intersection(fields))}")
        return _Shape(type_, names, vary) if set(vary) <= set(names) else None

    def _type_head(self, type_: str) -> bytes:
        # The envelope's constant part and each type's name are encoded once, the rest by orjson.
        head = self._heads.get(type_)
        if head is None:
            head = self._heads[type_] = self._head + b'"type":' + orjson.dumps(type_) + b',"ts":'
        return head

    def flush(self, sync: bool = False) -> None:
        """Write pending events; with `sync`, also fsync the file."""
        if self._file is None:
            return
        if self._pending:
            lines = [item.encode(self._type_head(item.shape.type)) if isinstance(item, _Run) else item
                     for item in self._pending]
            self._file.write(b"\n".join(lines) + b"\n")
            self._pending.clear()
            self._runs.clear()
            self._events = 0
        self._file.flush()
        if sync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Flush, fsync and close; further `emit` calls raise `HistoryError`."""
        if self._file is None:
            return
        self.flush(sync=True)
        self._file.close()
        self._file = None

    def end(self, type_: str, fields: dict[str, Any]) -> None:
        """Record the last event (`node_stop`) and close the history for good while its node goes on (the control
        API's `POST /quiesce`, NODE_CONTRACT.md): every later event is dropped, counted in `unrecorded`, where
        after `close` it raises."""
        self.record(type_, fields)
        self._ended = True
        self.close()

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def closed(self) -> bool:
        return self._file is None

    def __enter__(self) -> "HistoryWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def expand(event: Any) -> list[Any]:
    """The events one decoded history line holds: itself, or each row of a run line (the line's fields with the
    row's `ts`, `seq` and varying fields; lists under `rows` of names not in `ROW_FIELDS` are ignored). Raises
    HistoryError for a `rows` that is not an object of lists, lacks `ts` or `seq`, has an empty list or lists of
    different lengths, or names a field its line also has."""
    rows = event.get(ROWS) if isinstance(event, dict) else None
    if rows is None:  # a plain line (or not an event at all: the caller judges it)
        return [event]
    if not isinstance(rows, dict) or not all(isinstance(column, list) for column in rows.values()):
        raise HistoryError("'rows' is not an object of lists")
    columns = {name: rows[name] for name in ROW_FIELDS if name in rows}
    lengths = {len(column) for column in columns.values()}
    if any(name not in columns for name in _ROW_ENVELOPE) or len(lengths) != 1 or 0 in lengths:
        raise HistoryError("'rows' lacks 'ts' or 'seq', or its lists are empty or of different lengths")
    if any(name in event for name in columns if name not in _ROW_ENVELOPE):
        raise HistoryError("a field is both in 'rows' and in its line")
    base = {name: value for name, value in event.items() if name != ROWS}
    names = tuple(columns)
    return [{**base, **dict(zip(names, values))} for values in zip(*columns.values())]


def read(path: Path) -> list[dict[str, Any]]:
    """Every event of a history file in the order its writer recorded them (runs expanded: see `expand`), for
    readers outside the analysis (tests, live while the node writes). Raises HistoryError for a line that is not a
    JSON object or a bad run; a restarted writer (a `seq` back at 1) starts a new stretch, each ordered by `seq`.
    A last line without its newline is one the writer is still writing (a flush is seen half-way): it is left for
    the next read (the analysis reports such a line of a finished history as truncated: pipeline.reader)."""
    stretches: list[list[dict[str, Any]]] = [[]]
    data = Path(path).read_bytes()
    for number, line in enumerate(data[:data.rfind(b"\n") + 1].splitlines(), 1):
        if not line.strip():
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise HistoryError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(event, dict):
            raise HistoryError(f"{path}:{number}: not a JSON object")
        try:
            events = expand(event)
        except HistoryError as exc:
            raise HistoryError(f"{path}:{number}: {exc.message}") from None
        if event.get("seq") == 1 and stretches[-1]:
            stretches.append([])
        stretches[-1].extend(events)
    return [e for stretch in stretches for e in sorted(stretch, key=_seq_key)]


def _seq_key(event: dict[str, Any]) -> int:
    seq = event.get("seq")
    return seq if isinstance(seq, int) else 0
