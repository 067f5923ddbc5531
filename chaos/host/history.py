"""The controller's history file of a run, `events/controller.jsonl`: fault starts and ends, heals, workloads,
appended by any controller process (one writer at a time, under the ledger's lock) with a gapless `seq`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chaos.host.ledger import Ledger
from node.history import HistoryWriter


class ControllerHistory:
    """Appends controller events to `events/controller.jsonl`, continuing the file's `seq` across processes."""

    def __init__(self, run_dir: Path, run_id: str) -> None:
        self.path = Path(run_dir) / "events" / "controller.jsonl"
        self.run_id = run_id
        self._ledger_lock = Ledger(run_dir)

    def emit(self, type_: str, **fields: Any) -> None:
        with self._ledger_lock._locked():  # one writer at a time, so `seq` stays a gapless counter
            last = 0
            try:
                with open(self.path, "rb") as fh:
                    fh.seek(0, 2)
                    fh.seek(max(0, fh.tell() - 4096))
                    lines = fh.read().splitlines()
                if lines:
                    last = int(json.loads(lines[-1]).get("seq", 0))
            except FileNotFoundError:
                pass
            with HistoryWriter(self.path, self.run_id, "controller", buffer_lines=1) as writer:
                writer._seq = last  # HistoryWriter counts from 1 per writer; this file has many writers
                writer.emit(type_, **fields)
