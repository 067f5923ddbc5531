"""The history event schema as Spark sees it: explicit column types and the per-type validation rules.

pipeline/SCHEMA.md is the human-readable version of this module; keep the two in step. Reading never infers
types: every line is parsed against `EVENT_SCHEMA`, and `problem_column()` names the first rule a line breaks
(or is null for a valid event).
"""
from __future__ import annotations

from typing import Any, Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from node.history import ROW_FIELDS, ROWS

SCHEMA_VERSION = 1
CORRUPT_FIELD = "_corrupt"

_LONG = T.LongType()
_DOUBLE = T.DoubleType()
_STRING = T.StringType()
_BOOL = T.BooleanType()
_LONGS = T.ArrayType(T.LongType())
_STRINGS = T.ArrayType(T.StringType())

ENVELOPE: tuple[tuple[str, T.DataType], ...] = (
    ("v", _LONG), ("ts", _DOUBLE), ("seq", _LONG), ("run", _STRING), ("node", _STRING), ("type", _STRING),
)

# Event fields over all types. A string column accepts any JSON value (objects arrive as their JSON text), so
# `detail` and `config` are kept as JSON text; `view_id` (`[coord, n]`) arrives as two strings.
FIELDS: tuple[tuple[str, T.DataType], ...] = (
    ("boot", _LONG), ("data_ip", _STRING), ("control_ip", _STRING), ("members", _STRINGS), ("config", _STRING),
    ("reason", _STRING), ("peer", _STRING), ("silent_ms", _DOUBLE), ("ping_id", _LONG), ("rtt_ms", _DOUBLE),
    ("src_ip", _STRING),
    ("msg_id", _STRING), ("kind", _STRING), ("to", _STRING), ("from", _STRING), ("size", _LONG),
    ("proto", _STRING), ("seqno", _LONG), ("conn_id", _LONG), ("first", _BOOL), ("resend", _BOOL),
    ("action", _STRING), ("purged_to", _LONG),
    ("seqnos", _LONGS), ("found", _LONGS), ("missing", _LONGS),
    ("bytes", _LONG), ("low", _LONG), ("dir", _STRING), ("state", _STRING),
    ("view_id", _STRINGS), ("subgroups", T.ArrayType(_STRINGS)),
    ("blocked_ms", _DOUBLE), ("next_seqno", _LONG),
    ("fault_id", _STRING), ("detail", _STRING), ("applied_ts", _DOUBLE), ("effective_ts", _DOUBLE),
    ("sender", _STRING), ("count", _LONG), ("rate", _DOUBLE),
    ("gen", _LONG), ("side", _STRING),
)

# A run line's `rows` (node.history): `ts`, `seq` and the fields that vary along a run, each a list.
_TYPES = dict(ENVELOPE + FIELDS)
ROWS_TYPE = T.StructType([T.StructField(name, T.ArrayType(_TYPES[name]), nullable=True) for name in ROW_FIELDS])
ROWS_PROBLEM = "_rows_problem"

EVENT_SCHEMA = T.StructType(
    [T.StructField(name, dtype, nullable=True) for name, dtype in ENVELOPE + FIELDS]
    + [T.StructField(ROWS, ROWS_TYPE, nullable=True), T.StructField(CORRUPT_FIELD, _STRING, nullable=True)]
)

EVENT_COLUMNS: tuple[str, ...] = tuple(name for name, _ in ENVELOPE + FIELDS)

# The columns the checks read; every field is validated on read, but only these are kept for the analysis.
ANALYSED_COLUMNS: tuple[str, ...] = (
    "v", "ts", "seq", "run", "node", "type", "msg_id", "kind", "to", "from", "size", "proto", "seqno", "resend",
    "action", "seqnos", "found", "missing", "bytes", "view_id", "members", "fault_id", "detail", "applied_ts",
    "effective_ts", "peer", "gen", "side", "blocked_ms",
    "conn_id", "data_ip",  # the message sequence diagram (pipeline.sequence_source)
)

# Fields an event of a type must carry (non-null, right JSON type); types not listed need only the envelope.
REQUIRED: dict[str, tuple[str, ...]] = {
    "node_start": ("boot",),
    "node_stop": ("reason",),
    "peer_heard": ("peer",),
    "peer_silent": ("peer",),
    "peer_restarted": ("peer",),
    "app_send": ("msg_id", "kind", "to"),
    "app_deliver": ("msg_id", "kind", "from"),
    "data_tx": ("proto", "to", "seqno"),
    "data_rx": ("proto", "from", "seqno", "action"),
    "ack_tx": ("proto", "to", "seqno"),
    "ack_rx": ("proto", "from", "seqno", "action"),
    "xmit_req_tx": ("proto", "to", "seqnos"),
    "xmit_req_rx": ("proto", "from", "seqnos"),
    "resync_tx": ("proto", "peer", "kind"),
    "resync_rx": ("proto", "peer", "kind"),
    "conn_state": ("proto", "peer", "dir", "state"),
    "view": ("view_id", "members"),
    "suspect": ("peer",),
    "unsuspect": ("peer",),
    "fault_start": ("fault_id", "kind"),
    "fault_end": ("fault_id",),
}

# Closed vocabularies checked on read: (type, field) -> allowed values.
ALLOWED: dict[tuple[str, str], tuple[str, ...]] = {
    ("app_send", "kind"): ("unicast", "multicast"),
    ("app_deliver", "kind"): ("unicast", "multicast"),
    ("data_rx", "action"): ("deliver", "buffer", "duplicate", "below_window", "no_conn", "outside_window",
                            "wrong_conn"),
    ("resync_tx", "kind"): ("first_seqno_req", "first_seqno_rsp", "sync", "sync_ok", "sync_ack"),
    ("resync_rx", "kind"): ("first_seqno_req", "first_seqno_rsp", "sync", "sync_ok", "sync_ack"),
}


def _sql_string(text: str) -> str:
    """`text` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _problem_sql() -> str:
    """The SQL text of `problem_column()`: a CASE of every rule, in order."""
    def missing(name: str) -> str:
        return f"`{name}` IS NULL"

    rules: list[tuple[str, str]] = [  # (condition, the problem's SQL: a string literal, or a column's)
        (f"{missing('v')} AND {missing('type')} AND `{CORRUPT_FIELD}` IS NOT NULL", _sql_string("not a JSON object")),
        (f"`{CORRUPT_FIELD}` IS NOT NULL", _sql_string("a field has the wrong JSON type")),
        (f"`{ROWS_PROBLEM}` IS NOT NULL", f"`{ROWS_PROBLEM}`"),  # set by expand_runs
    ]
    rules += [(missing(name), _sql_string(f"missing envelope field '{name}'")) for name, _ in ENVELOPE]
    rules.append((f"`v` != {SCHEMA_VERSION}", _sql_string(f"schema version is not {SCHEMA_VERSION}")))
    rules += [(f"`type` = {_sql_string(type_)} AND {missing(name)}", _sql_string(f"{type_} lacks field '{name}'"))
              for type_, fields in REQUIRED.items() for name in fields]
    rules += [(f"`type` = {_sql_string(type_)} AND NOT `{name}` IN ({', '.join(map(_sql_string, allowed))})",
               _sql_string(f"{type_}.{name} is not one of {', '.join(allowed)}"))
              for (type_, name), allowed in ALLOWED.items()]
    whens = " ".join(f"WHEN {cond} THEN {problem}" for cond, problem in rules)
    return f"CASE {whens} ELSE CAST(NULL AS STRING) END"


PROBLEM_SQL = _problem_sql()
# how many fields of the schema a parsed line has (reading it makes Spark parse and type-check every field)
FIELDS_SQL = " + ".join(f"CAST(`{name}` IS NOT NULL AS INT)" for name in EVENT_COLUMNS)


def problem_column() -> Column:
    """A string column: why the parsed line is not a valid event, or null when it is.

    Expects the columns of `EVENT_SCHEMA` (the corrupt-record field holds the raw line when JSON parsing or a
    field's type failed). Written as SQL text, parsed in the JVM in one call: built with the Column API it took
    some 650 calls through the Python-Java gateway in every analysis.
    """
    return F.expr(PROBLEM_SQL)


def _rows_problem_sql() -> str:
    """The SQL text of why a run line's `rows` is bad (the rules of `node.history.expand`), or null."""
    n = f"size(`{ROWS}`.ts)"
    bad_length = " OR ".join(f"(`{ROWS}`.`{name}` IS NOT NULL AND size(`{ROWS}`.`{name}`) != {n})"
                             for name in ROW_FIELDS[2:])
    both = " OR ".join(f"(`{ROWS}`.`{name}` IS NOT NULL AND `{name}` IS NOT NULL)" for name in ROW_FIELDS[2:])
    return (f"CASE WHEN `{ROWS}` IS NULL THEN CAST(NULL AS STRING) "
            f"WHEN `{ROWS}`.ts IS NULL OR `{ROWS}`.seq IS NULL OR {n} = 0 OR size(`{ROWS}`.seq) != {n} "
            f"OR {bad_length} "
            f"THEN 'rows lacks ts or seq, or its lists are empty or of different lengths' "
            f"WHEN {both} THEN 'a field is both in rows and in its line' ELSE CAST(NULL AS STRING) END")


_EXPANDED_SQL = ([f"{_rows_problem_sql()} AS `{ROWS_PROBLEM}`", "_row IS NULL OR _row = 0 AS line_start",
                  "coalesce(_row_ts, ts) AS ts"]
                 + [f"CASE WHEN _row IS NOT NULL AND `{ROWS}`.`{name}` IS NOT NULL THEN `{ROWS}`.`{name}`[_row] "
                    f"ELSE `{name}` END AS `{name}`" for name in ROW_FIELDS[1:]])


def expand_runs(parsed: DataFrame) -> DataFrame:
    """One row per event from one per line (columns of `EVENT_SCHEMA`): a run line (`node.history`) becomes one
    row per entry of its `rows`, with that entry's `ts`, `seq` and varying fields, and `ROWS_PROBLEM` set when
    its `rows` is bad; `line_start` is true on the first row of each line (what counts lines). One SQL
    projection (parsed in the JVM in one call)."""
    exploded = parsed.selectExpr("*", f"posexplode_outer(`{ROWS}`.ts) AS (_row, _row_ts)")
    replaced = {"ts", *ROW_FIELDS[1:]}
    kept = [f"`{c}`" for c in exploded.columns if c not in replaced and c not in ("_row", "_row_ts", ROWS)]
    return exploded.selectExpr(*kept, *_EXPANDED_SQL)


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "double": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: True,  # any JSON value is kept as its JSON text
    "boolean": lambda v: isinstance(v, bool),
}


def _accepts(dtype: T.DataType, value: Any) -> bool:
    if isinstance(dtype, T.ArrayType):
        return isinstance(value, list) and all(_accepts(dtype.elementType, v) for v in value if v is not None)
    return _JSON_TYPES[dtype.typeName()](value)


def event_problem(event: Any) -> str | None:
    """Why one decoded history line is bad, by the rules `problem_column` applies in Spark (the same tables:
    ENVELOPE, FIELDS, REQUIRED, ALLOWED), or None. For a reader outside Spark: the node conformance check."""
    if not isinstance(event, dict):
        return "not a JSON object"
    for name, dtype in ENVELOPE + FIELDS:
        if event.get(name) is not None and not _accepts(dtype, event[name]):
            return "a field has the wrong JSON type"
    for name, _ in ENVELOPE:
        if event.get(name) is None:
            return f"missing envelope field '{name}'"
    if event["v"] != SCHEMA_VERSION:
        return f"schema version is not {SCHEMA_VERSION}"
    type_ = event["type"]
    for name in REQUIRED.get(type_, ()):
        if event.get(name) is None:
            return f"{type_} lacks field '{name}'"
    for (allowed_type, name), allowed in ALLOWED.items():
        if type_ == allowed_type and event.get(name) is not None and event[name] not in allowed:
            return f"{type_}.{name} is not one of {', '.join(allowed)}"
    return None
