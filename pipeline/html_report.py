"""The self-contained HTML report: verdicts, the message sequence diagram (`pipeline.sequence_html`), counts,
history problems and the plots embedded as base64 PNG.

The headline answers the question the run was made for: for a scenario run (`Summary.verdict`), whether every
check answered what the scenario expected ("as expected" / "NOT as expected") and what that was, with the raw
status of the checks below it; a run analysed on its own shows the plain status."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from node.errors import HistoryError
from pipeline import sequence_html
from pipeline.sequence import Diagram
from pipeline.summary import Summary

_COLOURS = {"ok": "#2ca02c", "fail": "#d62728", "unknown": "#ff7f0e", "as expected": "#2ca02c",
            "NOT as expected": "#d62728"}
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; font-size: 14px; }
.status { color: #fff; font-weight: bold; padding: 2px 8px; border-radius: 3px; }
details pre { background: #f6f6f6; padding: 8px; overflow-x: auto; font-size: 12px; }
img { max-width: 100%; margin: 0.5em 0 1.5em 0; }
code { background: #f2f2f2; padding: 1px 3px; }
"""


def _badge(status: str) -> str:
    return f'<span class="status" style="background:{_COLOURS.get(status, "#777")}">{html.escape(status)}</span>'


def _headline(summary: Summary) -> str:
    """The title with the verdict of a scenario run (what was expected, then the checks' raw status), or the plain
    status of a run without a scenario."""
    title = f"<h1>splitlab run <code>{html.escape(summary.run_id)}</code> "
    verdict = summary.verdict
    if verdict is None:
        return title + f'<span id="headline">{_badge(summary.status)}</span></h1>'
    held = "as expected" if verdict["held"] else "NOT as expected"
    wanted = ", ".join(f"{o['check']} {o['expected']}" + ("" if o["held"] else f" (got {o['actual']})")
                       for o in verdict["outcomes"])
    expected = f"{html.escape(wanted)}" if verdict["expected"] else html.escape(verdict.get("note") or "")
    return (title + f'<span id="headline">{_badge(held)}</span></h1>'
            f'<p id="expectation">scenario <code>{html.escape(str(verdict["scenario"]))}</code>, variant '
            f'<code>{html.escape(str(verdict["variant"]))}</code> expected: {expected}</p>'
            f'<p id="raw-status">checks: {_badge(summary.status)}</p>')


def _checks_table(summary: Summary) -> str:
    rows = []
    for name, result in summary.checks.items():
        details = html.escape(json.dumps(summary.to_dict()["checks"][name]["details"], indent=2))
        params = html.escape(json.dumps(result.params))
        rows.append(f"<tr><td><code>{html.escape(name)}</code></td><td>{_badge(result.status)}</td>"
                    f"<td>{html.escape(result.reason)}<details><summary>details</summary><pre>{details}</pre>"
                    f"<p>parameters: <code>{params}</code></p></details></td></tr>")
    return "<table><tr><th>check</th><th>status</th><th>reason</th></tr>" + "".join(rows) + "</table>"


def _history_section(history: dict[str, Any]) -> str:
    parts = [f"<p>{history['events']} events in {history['lines']} lines; {history['bad_lines']} bad line(s); "
             f"{len(history['truncated'])} truncated last line(s).</p>"]
    if history["bad_line_examples"]:
        items = "".join(f"<li><code>{html.escape(b['file'])}:{b['line'] if b['line'] is not None else '?'}</code> "
                        f"{html.escape(b['reason'])}: <code>{html.escape(b['text'][:160])}</code></li>"
                        for b in history["bad_line_examples"])
        parts.append(f"<ul>{items}</ul>")
    if history["truncated"]:
        items = "".join(f"<li><code>{html.escape(t['file'])}:{t['line']}</code> cut off after {t['bytes']} bytes</li>"
                        for t in history["truncated"])
        parts.append(f"<ul>{items}</ul>")
    return "".join(parts)


def render(summary: Summary, plots: dict[str, str], diagram: Diagram | None = None) -> str:
    """The report as one HTML document (with the message sequence diagram when `diagram` is given)."""
    counts = summary.to_dict()["counts"]
    count_rows = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(json.dumps(v))}</td></tr>"
                         for k, v in counts.items())
    images = "".join(f"<h3>{html.escape(title)}</h3><img alt=\"{html.escape(title)}\" "
                     f"src=\"data:image/png;base64,{png}\">" for title, png in plots.items())
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>splitlab run "
            f"{html.escape(summary.run_id)}</title><style>{_STYLE}</style></head><body>"
            f"{_headline(summary)}"
            f"<p>{html.escape(summary.run_dir)}</p>"
            f"<h2>Checks</h2>{_checks_table(summary)}"
            + (f"<h2>Message sequence</h2>{sequence_html.section(diagram)}" if diagram is not None else "") +
            f"<h2>Plots</h2>{images}"
            f"<h2>History</h2>{_history_section(summary.to_dict()['history'])}"
            f"<h2>Counts</h2><table>{count_rows}</table>"
            f"<p>analysed with Spark {html.escape(str(summary.analysis.get('spark_version')))} on "
            f"<code>{html.escape(str(summary.analysis.get('master')))}</code></p>"
            "</body></html>\n")


def write(path: Path, summary: Summary, plots: dict[str, str], diagram: Diagram | None = None) -> None:
    """Write the report; raises `HistoryError` if it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(summary, plots, diagram), encoding="utf-8")
    except OSError as exc:
        raise HistoryError(f"cannot write the report {path}: {exc}",
                           hint="the run directory must be writable") from None
