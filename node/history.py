"""The JSON-lines history writer: one file per node per run, buffered, flushed on close so nothing is lost.

Every line is one event object with the envelope of pipeline/SCHEMA.md:
`{"v": 1, "ts": <unix seconds>, "seq": <per-writer counter>, "run": <run id>, "node": <name>, "type": <event>,
...fields}`. `seq` lets readers order events of one node that share a timestamp and detect lost lines.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import orjson

from node.errors import HistoryError

SCHEMA_VERSION = 1
# The history every node of the node contract writes (NODE_CONTRACT.md): what the delivery, duplicates, fifo,
# latency, views and heal checks read. A node that writes only some protocol events beyond these lists what it
# writes in `node_start.config.records`; a node that does not list them writes every type of the schema.
CONTRACT_EVENTS = frozenset({"node_start", "node_stop", "peer_heard", "peer_silent", "app_send", "app_deliver",
                             "view"})
_dumps = orjson.dumps
_RESERVED = frozenset({"v", "ts", "seq", "run", "node", "type"})


class HistoryWriter:
    """Appends events to `path`; lines are buffered and written when `buffer_lines` are pending or on `flush`.

    `clock` returns unix seconds (injectable for tests and the simulator).
    """

    def __init__(self, path: Path, run_id: str, node: str, buffer_lines: int = 512,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self.node = node
        self.buffer_lines = buffer_lines
        self._clock = clock
        self._seq = 0
        self._pending: list[bytes] = []
        # the envelope's constant part, encoded once: `{"v":1,"run":"...","node":"...",`
        self._head = orjson.dumps({"v": SCHEMA_VERSION, "run": run_id, "node": node})[:-1] + b","
        self._heads: dict[str, bytes] = {}  # event type -> the line's start up to `"ts":`
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab")
        except OSError as exc:
            raise HistoryError(f"cannot open history file {self.path}: {exc}",
                               hint="the run directory must be writable by the node's user") from None

    def emit(self, type_: str, **fields: Any) -> None:
        """Record one event; `fields` must be JSON-serialisable and must not use the envelope's keys."""
        self.record(type_, fields)

    def record(self, type_: str, fields: dict[str, Any]) -> None:
        """`emit` with the fields as one dict (the node's hot path: no keyword arguments to repack)."""
        if not _RESERVED.isdisjoint(fields):
            raise ValueError(f"event {type_!r} uses reserved field(s) {sorted(_RESERVED.intersection(fields))}")
        if self._file is None:
            raise HistoryError(f"history {self.path} is closed; event {type_!r} was not recorded")
        self._seq += 1
        # The node writes several events per message: the envelope's constant part and each type's name are
        # encoded once, the rest by orjson (the stdlib encoder was a third of the node's time).
        head = self._heads.get(type_)
        if head is None:
            head = self._heads[type_] = self._head + b'"type":' + orjson.dumps(type_) + b',"ts":'
        body = _dumps(fields, default=str)
        rest = b"," + body[1:] if len(body) > 2 else b"}"  # the fields after the envelope, or nothing
        pending = self._pending
        pending.append(b'%s%s,"seq":%d%s' % (head, _dumps(self._clock()), self._seq, rest))
        if len(pending) >= self.buffer_lines:
            self.flush()

    def flush(self, sync: bool = False) -> None:
        """Write pending lines; with `sync`, also fsync the file."""
        if self._file is None:
            return
        if self._pending:
            self._file.write(b"\n".join(self._pending) + b"\n")
            self._pending.clear()
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

    @property
    def closed(self) -> bool:
        return self._file is None

    def __enter__(self) -> "HistoryWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
