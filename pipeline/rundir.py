"""The run directory on disk: find the event files, inspect their tails, locate lines by content.

Pure Python and file I/O only (no Spark): `locate()` validates `runs/<id>/` and lists `events/*.jsonl`;
`inspect_tail()` finds a last line without its newline (a node killed mid-write); `find_line_numbers()` turns
bad lines found by Spark back into file line numbers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from node.errors import UsageError

EVENTS_DIR = "events"
REPORT_DIR = "report"
_TAIL_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class RunFiles:
    """A validated run directory and its event files (sorted by name)."""

    run_dir: Path
    files: tuple[Path, ...]

    @property
    def events_dir(self) -> Path:
        return self.run_dir / EVENTS_DIR

    @property
    def report_dir(self) -> Path:
        return self.run_dir / REPORT_DIR

    @property
    def size_bytes(self) -> int:
        """The event files' total size."""
        return sum(p.stat().st_size for p in self.files)


@dataclass(frozen=True)
class Tail:
    """The last line of `file` had no newline. `valid_json` False means it was cut off (a truncated write)."""

    file: str
    text: str
    size_bytes: int
    valid_json: bool


def locate(run_dir: Path | str) -> RunFiles:
    """Check that `run_dir` holds `events/*.jsonl` with at least one non-empty file.

    Raises `UsageError` (exit code 2) when the directory, the events directory or the events are missing.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise UsageError(f"run directory {path} does not exist or is not a directory",
                         hint="pass a run directory runs/<run-id> (see `splitlab ps`)")
    events_dir = path / EVENTS_DIR
    if not events_dir.is_dir():
        raise UsageError(f"run directory {path} has no {EVENTS_DIR}/ directory",
                         hint="a run directory holds events/<node>.jsonl and events/controller.jsonl")
    files = tuple(sorted(p for p in events_dir.glob("*.jsonl") if p.is_file()))
    if not files:
        raise UsageError(f"no event files (*.jsonl) in {events_dir}",
                         hint="did the run start? nodes write events/<node>.jsonl")
    if all(p.stat().st_size == 0 for p in files):
        raise UsageError(f"all event files in {events_dir} are empty",
                         hint="the nodes flush their history on shutdown; was the run stopped cleanly?")
    return RunFiles(run_dir=path.resolve(), files=files)


def inspect_tail(path: Path) -> Tail | None:
    """Return the last line of `path` if it lacks its newline, else None (also for an empty file)."""
    size = path.stat().st_size
    if size == 0:
        return None
    with open(path, "rb") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return None
        start = max(0, size - _TAIL_READ_BYTES)
        fh.seek(start)
        chunk = fh.read()
    newline = chunk.rfind(b"\n")
    raw = chunk[newline + 1:] if newline >= 0 else chunk
    text = raw.decode("utf-8", errors="replace")
    try:
        json.loads(text)
        valid = True
    except ValueError:
        valid = False
    return Tail(file=path.name, text=text, size_bytes=len(raw), valid_json=valid)


def find_line_numbers(path: Path, texts: set[str], per_text: int = 1) -> dict[str, list[int]]:
    """Line numbers (from 1) where each of `texts` occurs in `path`, at most `per_text` per text.

    Lines are compared without their line ending, decoded as UTF-8 with replacement characters.
    """
    found: dict[str, list[int]] = {t: [] for t in texts}
    remaining = len(texts) * per_text
    if remaining == 0:
        return found
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            line = raw.rstrip(b"\r\n").decode("utf-8", errors="replace")
            hits = found.get(line)
            if hits is not None and len(hits) < per_text:
                hits.append(number)
                remaining -= 1
                if remaining == 0:
                    break
    return found
