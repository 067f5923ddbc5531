"""Reading histories: bad lines are counted and shown with file and line number, a cut-off last line is tolerated
and reported, lost lines show as seq gaps, and a bad run directory is a usage error."""
from __future__ import annotations

import json

import pytest

import pipeline_fixtures as pf
from pipeline_fixtures import spark  # noqa: F401  (the shared session fixture)

from node import history
from node.errors import UsageError
from pipeline import api
from pipeline.rundir import find_line_numbers, inspect_tail, locate


def _insert_line(path, line_no: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(line_no - 1, text + "\n")
    path.write_text("".join(lines))


def test_bad_lines_are_counted_and_shown_with_file_and_line(tmp_path, spark):  # noqa: F811
    run_dir = pf.clean_scenario().write(tmp_path / "r")
    events = run_dir / "events"
    _insert_line(events / "n2.jsonl", 10, "this is not json {")
    _insert_line(events / "n2.jsonl", 20, json.dumps({"v": 1, "ts": "soon", "seq": 99, "run": "fixture-run",
                                                      "node": "n2", "type": "ping_tx"}))
    _insert_line(events / "n1.jsonl", 5, json.dumps({"v": 1, "ts": pf.T0_TS, "seq": 98, "run": "fixture-run",
                                                     "node": "n1", "type": "app_send", "kind": "unicast",
                                                     "to": "n2"}))
    _insert_line(events / "n3.jsonl", 7, json.dumps({"v": 1, "ts": pf.T0_TS, "seq": 97, "run": "fixture-run",
                                                     "node": "n3", "type": "pong_rx", "peer": "n1", "ping_id": 1,
                                                     "rtt_ms": "slow"}))

    summary = api.analyze(run_dir, spark=spark, report=False)

    assert pf.not_ok(summary) == {"history"}
    history = summary.checks["history"]
    assert history.status == "fail" and "4 bad line(s)" in history.reason
    shown = [(b["file"], b["line"], b["reason"]) for b in history.details["bad_line_examples"]]
    assert shown == [("n1.jsonl", 5, "app_send lacks field 'msg_id'"),
                     ("n2.jsonl", 10, "not a JSON object"),
                     ("n2.jsonl", 20, "a field has the wrong JSON type"),
                     ("n3.jsonl", 7, "a field has the wrong JSON type")]  # a field no check reads is typed too
    assert summary.history["files"]["n2.jsonl"]["bad_lines"] == 2
    assert summary.history["events"] == 118


def test_a_truncated_last_line_is_tolerated_and_reported(tmp_path, spark):  # noqa: F811
    run_dir = pf.clean_scenario().write(tmp_path / "r")
    n3 = run_dir / "events" / "n3.jsonl"
    lines_before = len(n3.read_text().splitlines())
    cut = '{"v":1,"ts":1700000005.2,"seq":77,"run":"fixture-run","no'
    with open(n3, "a") as fh:
        fh.write(cut)
    n1 = run_dir / "events" / "n1.jsonl"
    n1.write_text(n1.read_text().rstrip("\n"))  # a complete last event, only its newline missing

    summary = api.analyze(run_dir, spark=spark, report=False)

    assert pf.not_ok(summary) == set()
    assert summary.history["truncated"] == [
        {"file": "n3.jsonl", "line": lines_before + 1, "bytes": len(cut), "text": cut}]
    assert summary.history["files"]["n3.jsonl"]["truncated_last_line"] is True
    assert summary.history["files"]["n1.jsonl"]["unterminated_last_line"] is True
    assert summary.history["bad_lines"] == 0 and summary.history["events"] == 118
    assert "truncated" in summary.checks["history"].reason


def test_a_bad_run_line_is_one_bad_line_and_a_good_one_its_events(tmp_path, spark):  # noqa: F811
    """A run line (node.history) counts as one line; its rows are its events, each judged by the event rules;
    a run whose rows do not line up is one bad line with the reason."""
    run_dir = pf.clean_scenario().write(tmp_path / "r")
    events = run_dir / "events"
    run = {"v": 1, "ts": pf.T0_TS, "seq": 90, "run": "fixture-run", "node": "n3", "type": "ping_tx", "peer": "n1"}
    _insert_line(events / "n3.jsonl", 3, json.dumps({**run, "rows": {"ts": [pf.T0_TS, pf.T0_TS], "seq": [90, 91],
                                                                     "msg_id": ["a"]}}))
    _insert_line(events / "n3.jsonl", 4, json.dumps({**run, "rows": {"ts": [pf.T0_TS], "seq": [92]},
                                                     "type": "app_deliver", "kind": "unicast", "from": "n1"}))
    _insert_line(events / "n3.jsonl", 5, json.dumps({**run, "rows": {"ts": [pf.T0_TS], "seq": [93], "msg_id": ["m"]},
                                                     "type": "app_deliver", "msg_id": "m", "kind": "unicast"}))

    summary = api.analyze(run_dir, spark=spark, report=False)

    history = summary.checks["history"]
    assert "3 bad line(s)" in history.reason
    shown = [(b["file"], b["line"], b["reason"]) for b in history.details["bad_line_examples"]]
    assert shown == [("n3.jsonl", 3, "rows lacks ts or seq, or its lists are empty or of different lengths"),
                     ("n3.jsonl", 4, "app_deliver lacks field 'msg_id'"),
                     ("n3.jsonl", 5, "a field is both in rows and in its line")]
    assert summary.history["events"] == 118 and summary.history["files"]["n3.jsonl"]["bad_lines"] == 3


@pytest.mark.parametrize("what", ["plain", "run"])
def test_lost_lines_show_as_seq_gaps(tmp_path, spark, what):  # noqa: F811
    """A lost plain line is one lost event; a lost run line (node.history) is every event of its rows."""
    run_dir = pf.clean_scenario().write(tmp_path / "r")
    n1 = run_dir / "events" / "n1.jsonl"
    lines = n1.read_text().splitlines(keepends=True)
    lost = next(i for i, line in enumerate(lines)
                if '"type":"data_tx"' in line and ('"rows"' in line) == (what == "run"))
    n1.write_text("".join(lines[:lost] + lines[lost + 1:]))
    lost_seqs = {e["seq"] for e in history.expand(json.loads(lines[lost]))}
    kept = sorted(e["seq"] for line in lines for e in history.expand(json.loads(line)) if e["seq"] not in lost_seqs)
    gaps = [{"file": "n1.jsonl", "after_seq": a, "next_seq": b, "lost": b - a - 1}
            for a, b in zip(kept, kept[1:]) if b > a + 1]

    summary = api.analyze(run_dir, spark=spark, report=False)

    assert pf.not_ok(summary) == {"history"}
    details = summary.checks["history"].details
    assert details["lost_lines"] == len(lost_seqs) and (len(lost_seqs) > 1) == (what == "run")
    assert details["first_seq_gaps"] == gaps[:5]


@pytest.mark.parametrize("layout", ["missing", "no_events_dir", "no_jsonl", "empty_files"])
def test_a_bad_run_directory_is_a_usage_error(tmp_path, layout):
    run_dir = tmp_path / "r"
    if layout != "missing":
        run_dir.mkdir()
    if layout in ("no_jsonl", "empty_files"):
        (run_dir / "events").mkdir()
        (run_dir / "events" / "notes.txt").write_text("x")
    if layout == "empty_files":
        (run_dir / "events" / "n1.jsonl").write_text("")

    with pytest.raises(UsageError) as err:
        api.analyze(run_dir)  # raises before Spark is touched
    assert err.value.exit_code == 2
    assert str(run_dir) in err.value.message


def test_a_run_with_no_valid_event_is_a_usage_error(tmp_path, spark):  # noqa: F811
    events = tmp_path / "r" / "events"
    events.mkdir(parents=True)
    (events / "n1.jsonl").write_text("garbage\nmore garbage\n")

    with pytest.raises(UsageError, match="no valid events"):
        api.analyze(tmp_path / "r", spark=spark, report=False)


def test_inspect_tail(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a":1}\n')
    assert inspect_tail(path) is None
    path.write_text('{"a":1}\n{"b":')
    tail = inspect_tail(path)
    assert (tail.text, tail.size_bytes, tail.valid_json) == ('{"b":', 5, False)
    path.write_text('{"a":1}\n{"b":2}')
    assert inspect_tail(path).valid_json is True
    path.write_text("")
    assert inspect_tail(path) is None


def test_find_line_numbers(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text("a\nbad\nc\nbad\nother\n")
    assert find_line_numbers(path, {"bad", "other", "absent"}, per_text=2) == {
        "bad": [2, 4], "other": [5], "absent": []}


def test_locate_lists_event_files_sorted(tmp_path):
    events = tmp_path / "r" / "events"
    events.mkdir(parents=True)
    for name in ("n2.jsonl", "controller.jsonl", "n1.jsonl"):
        (events / name).write_text("{}\n")
    run = locate(tmp_path / "r")
    assert [p.name for p in run.files] == ["controller.jsonl", "n1.jsonl", "n2.jsonl"]
    assert run.report_dir == (tmp_path / "r" / "report").resolve()
