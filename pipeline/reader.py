"""Read a run's history into one validated Spark DataFrame of events, kept (`pipeline.kept`), with statistics.

Every line is parsed by Spark's JSON reader against the explicit schema (`pipeline.schema`, every field typed)
and checked by its rules; blank lines are skipped. Bad lines are counted per file and the first few are shown
with file, line number and reason; a cut-off last line (a node killed mid-write) is tolerated and reported
apart. Only valid events reach the checks.
"""
from __future__ import annotations

import json

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from node.errors import UsageError
from pipeline.kept import KeptFrames
from pipeline.rundir import RunFiles, Tail, find_line_numbers, inspect_tail
from pipeline.session import small_history
from pipeline.schema import ANALYSED_COLUMNS, CORRUPT_FIELD, EVENT_SCHEMA, FIELDS_SQL, expand_runs, problem_column

CONTROLLER = "controller"
_EXAMPLE_TEXT_CHARS = 300
_EXAMPLES_SCANNED = 50
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_FIELD}


@dataclass
class FileStats:
    """Per event file: lines read, valid events, bad lines (truncated tail not included), the tail state."""

    lines: int = 0
    events: int = 0
    bad_lines: int = 0
    truncated_last_line: bool = False
    unterminated_last_line: bool = False
    first_ts: float | None = None
    last_ts: float | None = None


@dataclass
class BadLine:
    """One bad line: file name, line number (null if it could not be located), reason and (shortened) text."""

    file: str
    line: int | None
    reason: str
    text: str


@dataclass
class HistoryStats:
    """What reading found: per-file statistics, bad-line examples, truncated tails, run ids, writers, and
    valid events per type and `app_send` lines per kind."""

    files: dict[str, FileStats] = field(default_factory=dict)
    bad_line_examples: list[BadLine] = field(default_factory=list)
    truncated: list[dict[str, Any]] = field(default_factory=list)
    run_ids: dict[str, int] = field(default_factory=dict)
    writers: dict[str, list[str]] = field(default_factory=dict)
    events_by_type: dict[str, int] = field(default_factory=dict)
    sent_by_kind: dict[str, int] = field(default_factory=dict)
    # per node: the event types its `node_start.config.records` lists (NODE_CONTRACT.md), with its `kind`;
    # a node that lists none writes every type of the schema and is not here
    records: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)

    @property
    def lines(self) -> int:
        return sum(f.lines for f in self.files.values())

    @property
    def events(self) -> int:
        return sum(f.events for f in self.files.values())

    @property
    def bad_lines(self) -> int:
        return sum(f.bad_lines for f in self.files.values())

    @property
    def first_ts(self) -> float | None:
        stamps = [f.first_ts for f in self.files.values() if f.first_ts is not None]
        return min(stamps) if stamps else None

    @property
    def last_ts(self) -> float | None:
        stamps = [f.last_ts for f in self.files.values() if f.last_ts is not None]
        return max(stamps) if stamps else None

    @property
    def nodes(self) -> list[str]:
        """Names of the protocol nodes that wrote events (every writer but the controller)."""
        return sorted({n for names in self.writers.values() for n in names} - {CONTROLLER})

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": {name: asdict(stats) for name, stats in sorted(self.files.items())},
            "lines": self.lines,
            "events": self.events,
            "bad_lines": self.bad_lines,
            "bad_line_examples": [asdict(b) for b in self.bad_line_examples],
            "truncated": list(self.truncated),
            "run_ids": dict(sorted(self.run_ids.items())),
            "writers": {name: list(nodes) for name, nodes in sorted(self.writers.items())},
        }


NODE_START_LINES = 4  # a node's `node_start` is its first line; a line or two of another writer may precede it


def declared_records(path: Path) -> tuple[str, tuple[str, frozenset[str]]] | None:
    """(node, (kind, event types)) from the `records` of the first `node_start` among a history file's first
    lines (read here, not by Spark: one line per file), or None when it declares none."""
    try:
        with open(path, "rb") as fh:
            head = [fh.readline() for _ in range(NODE_START_LINES)]
    except OSError:
        return None
    for line in head:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "node_start":
            config = event.get("config")
            records = config.get("records") if isinstance(config, dict) else None
            if not isinstance(records, list) or not isinstance(event.get("node"), str):
                return None
            return event["node"], (str(config.get("kind", "?")), frozenset(map(str, records)))
    return None


def _tail_marker(tails: list[Tail], raw: str) -> Any:
    """A boolean column: this row is the cut-off last line of its file (`raw` holds the line's text)."""
    marker = F.lit(False)
    for tail in tails:
        if not tail.valid_json:
            marker = marker | ((F.col("file") == tail.file) & (F.col(raw) == tail.text))
    return marker


def _classify(parsed: DataFrame, tails: list[Tail], raw: str, keep: tuple[str, ...] = ()) -> DataFrame:
    """`file`, the analysed columns, `fields` (non-null fields: reading it makes Spark parse and type-check every
    field of the schema), `problem` (null for a valid event), `is_tail` and `line_start` (the first event of its
    line), one row per event, from a DataFrame with `file`, `raw` and the columns of `EVENT_SCHEMA`, one row per
    line (a run line is expanded here: `pipeline.schema.expand_runs`); plus the columns named in `keep`."""
    events = expand_runs(parsed)
    return events.select("file", *keep, *[F.col(f"`{c}`") for c in ANALYSED_COLUMNS],
                         F.expr(FIELDS_SQL).alias("fields"), problem_column().alias("problem"),
                         _tail_marker(tails, raw).alias("is_tail"), "line_start")


@dataclass
class History:
    """A read history: the valid `events` (`file` and the `ANALYSED_COLUMNS`), the reader's `stats`, and the
    frames kept for the analysis (the one behind the events first; `release()` frees them all)."""

    events: DataFrame
    stats: HistoryStats
    kept: KeptFrames

    def release(self) -> None:
        self.kept.release()


def read_history(spark: SparkSession, run: RunFiles, max_examples: int = 5) -> History:
    """Parse and validate every line of `run`'s event files; call `release()` on the result when done.

    Raises `UsageError` when not a single valid event was found.
    """
    tails = [t for t in (inspect_tail(p) for p in run.files) if t is not None]
    parsed = (spark.read.schema(EVENT_SCHEMA).options(**_JSON_OPTIONS).json([str(p) for p in run.files])
              .select(F.col("_metadata.file_name").alias("file"), "*"))
    classified = _classify(parsed, tails, raw=CORRUPT_FIELD)
    small = small_history(run.size_bytes)
    if small:
        classified = classified.coalesce(1)  # one task per stage, not one per file (see partitions_for)
    kept = KeptFrames(small)
    base = kept.keep(classified)

    stats = HistoryStats()
    sent_kind = F.when(F.col("type") == "app_send", F.col("kind")).alias("sent_kind")
    per_file = base.groupBy("file", "run", "node", "type", sent_kind).agg(
        F.sum(F.col("line_start").cast("int")).alias("lines"),
        F.sum(F.when(F.col("problem").isNull(), 1).otherwise(0)).alias("events"),
        F.sum(F.when(F.col("problem").isNotNull() & ~F.col("is_tail") & F.col("line_start"), 1).otherwise(0))
        .alias("bad"),
        F.sum(F.when(F.col("is_tail"), 1).otherwise(0)).alias("tail_rows"),
        F.min(F.when(F.col("problem").isNull(), F.col("ts"))).alias("first_ts"),
        F.max(F.when(F.col("problem").isNull(), F.col("ts"))).alias("last_ts"),
    ).collect()
    run_ids: Counter[str] = Counter()
    writers: dict[str, set[str]] = {}
    tail_rows: Counter[str] = Counter()
    for row in per_file:
        fs = stats.files.setdefault(row["file"], FileStats())
        fs.lines += row["lines"]
        fs.events += row["events"]
        fs.bad_lines += row["bad"]
        tail_rows[row["file"]] += row["tail_rows"]
        if row["first_ts"] is not None:
            fs.first_ts = row["first_ts"] if fs.first_ts is None else min(fs.first_ts, row["first_ts"])
            fs.last_ts = row["last_ts"] if fs.last_ts is None else max(fs.last_ts, row["last_ts"])
        if row["events"] and row["run"] is not None:
            run_ids[row["run"]] += row["events"]
        if row["events"] and row["node"] is not None:
            writers.setdefault(row["file"], set()).add(row["node"])
        if row["events"]:
            stats.events_by_type[row["type"]] = stats.events_by_type.get(row["type"], 0) + row["events"]
            if row["sent_kind"] is not None:
                stats.sent_by_kind[row["sent_kind"]] = stats.sent_by_kind.get(row["sent_kind"], 0) + row["events"]
    for path in run.files:
        stats.files.setdefault(path.name, FileStats())
    stats.run_ids = dict(run_ids)
    stats.writers = {name: sorted(nodes) for name, nodes in writers.items()}
    stats.records = dict(filter(None, (declared_records(p) for p in run.files)))

    for tail in tails:
        fs = stats.files[tail.file]
        if tail.valid_json:
            fs.unterminated_last_line = True
            continue
        fs.truncated_last_line = True
        if tail_rows[tail.file] == 0 and fs.bad_lines > 0:
            fs.bad_lines -= 1  # Spark decoded the cut-off bytes differently; it was counted as bad above
        stats.truncated.append({"file": tail.file, "line": fs.lines, "bytes": tail.size_bytes,
                                "text": tail.text[:_EXAMPLE_TEXT_CHARS]})

    if stats.bad_lines:
        bad_files = [p for p in run.files if stats.files[p.name].bad_lines]
        stats.bad_line_examples = _bad_line_examples(spark, bad_files, tails, max_examples)
    if stats.events == 0:
        kept.release()
        raise UsageError(f"no valid events in {run.events_dir} ({stats.lines} lines, {stats.bad_lines} bad)",
                         hint="check the files against pipeline/SCHEMA.md")
    events = base.filter(F.col("problem").isNull()).drop("fields", "problem", "is_tail", "line_start")
    return History(events=events, stats=stats, kept=kept)


def _bad_line_examples(spark: SparkSession, files: list[Path], tails: list[Tail], limit: int) -> list[BadLine]:
    """Some bad lines of `files` with their reasons, located by line number; the first `limit` by position.

    Reads the files again as text (the JSON reader keeps no raw text of a JSON-valid line that breaks a rule) and
    classifies each line exactly like `read_history`.
    """
    raw = (spark.read.text([str(p) for p in files]).select(F.col("_metadata.file_name").alias("file"), "value")
           .filter(F.col("value") != ""))
    parsed = raw.select("file", "value", F.from_json("value", EVENT_SCHEMA, _JSON_OPTIONS).alias("e")).select(
        "file", "value", "e.*")
    rows = (_classify(parsed, tails, raw="value", keep=("value",))
            .filter(F.col("problem").isNotNull() & ~F.col("is_tail") & F.col("line_start"))
            .select("file", "value", "problem").limit(_EXAMPLES_SCANNED).collect())
    by_file: dict[str, dict[str, str]] = {}
    for r in rows:
        by_file.setdefault(r["file"], {})[r["value"]] = r["problem"]
    examples: list[BadLine] = []
    paths = {p.name: p for p in files}
    for name, problems in by_file.items():
        numbers = find_line_numbers(paths[name], set(problems), per_text=limit)
        for text, reason in problems.items():
            for number in numbers.get(text) or [None]:
                examples.append(BadLine(file=name, line=number, reason=reason, text=text[:_EXAMPLE_TEXT_CHARS]))
    examples.sort(key=lambda b: (b.file, b.line if b.line is not None else 1 << 62))
    return examples[:limit]
