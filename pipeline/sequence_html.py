"""The report's message sequence diagram as one self-contained HTML section.

The diagram's data (`pipeline.sequence.Diagram.to_dict`) is embedded as JSON; a small inline script draws it into
an inline SVG: one vertical lane per node, one arrow (`<g class="seq-arrow ...">`) per message, each end of
each arrow on a row of its own in time order (so a burst with one timestamp stays readable; the left margin
gives the times), fault periods shaded across the lanes, heals as dashed lines, lost messages ending in a cross
halfway, findings drawn thick over a yellow glow. An arrow's label sits on the row of its first end, beside it:
one label per row, so no two overlap however dense the arrows. A loop (many messages of one type between one
pair: `Diagram.folds`) is folded after its first few into one row ("... 87 more UnicastData n1->n2 [2..19]"); a
click on it draws them (`#unfold` in the URL draws every fold). Each label's laid-out box is kept in its
`data-box` attribute. Nothing is fetched: no network, no library. The note above it
(written here, readable without the script) says the window, how many messages were drawn and left out.
"""
from __future__ import annotations

import html
import json

from pipeline.sequence import FOLD_KEEP, Diagram

MARKS = {"lost": "no reception recorded", "duplicate": "a second arrival of one transmission",
         "held": "held or delayed in transit", "resend": "a retransmission",
         "discarded": "arrived and was discarded by the receiver",
         "unsent": "arrived, no transmission in the history (injected, forged, or sent earlier)",
         "unrecorded": "seen arriving in the capture, not recorded by the receiver", "finding": "part of a finding"}

STYLE = """
.seq-wrap { max-height: 900px; overflow: auto; border: 1px solid #ddd; margin: 0.5em 0 1.5em 0; }
#seq-svg { font: 11px system-ui, sans-serif; }
.seq-lane { stroke: #bbb; stroke-width: 1; }
.seq-lane-name { font-weight: bold; font-size: 13px; text-anchor: middle; }
.seq-time { fill: #777; }
.seq-fault { opacity: 0.16; }
.seq-fault-label { fill: #555; font-style: italic; }
.seq-heal { stroke: #2ca02c; stroke-dasharray: 6 4; stroke-width: 1.5; }
.seq-arrow line.seq-shaft { stroke: #444; stroke-width: 1.3; }
.seq-arrow text { fill: #333; }
.seq-fam-ack line.seq-shaft { stroke: #2ca02c; }
.seq-fam-xmit line.seq-shaft { stroke: #1f77b4; }
.seq-fam-sync line.seq-shaft { stroke: #17becf; }
.seq-fam-state line.seq-shaft { stroke: #8c564b; }
.seq-resend text { fill: #1f77b4; }
.seq-discarded line.seq-shaft { opacity: 0.55; }
.seq-discarded text { fill: #888; font-style: italic; }
.seq-unsent line.seq-shaft { stroke-dasharray: 1 3; }
.seq-unrecorded line.seq-shaft { stroke: #7f7f7f; stroke-dasharray: 2 2; }
.seq-held line.seq-shaft { stroke: #9467bd; stroke-width: 2.5; stroke-dasharray: 8 3; }
.seq-duplicate line.seq-shaft { stroke: #ff7f0e; }
.seq-lost line.seq-shaft, .seq-lost line.seq-cross { stroke: #d62728; stroke-dasharray: 4 3; stroke-width: 1.6; }
.seq-lost line.seq-cross { stroke-dasharray: none; stroke-width: 2; }
.seq-glow { stroke: #ffd400; stroke-width: 7; opacity: 0.7; }
.seq-finding line.seq-shaft { stroke-width: 2.6; }
.seq-finding text { font-weight: bold; }
.seq-legend span { display: inline-block; margin-right: 1.2em; font-size: 13px; }
.seq-fold { cursor: pointer; }
.seq-fold text { fill: #555; font-style: italic; text-decoration: underline dotted; }
.seq-fold-line { stroke: #999; stroke-dasharray: 1 4; stroke-width: 2; }
"""

SCRIPT = """
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var data = JSON.parse(document.getElementById("seq-data").textContent);
  var svg = document.getElementById("seq-svg");
  var ROW = 16, LANE = 260, LEFT = 120, TOP = 40, BOTTOM = 24, LOST_PART = 0.55, GAP = 8;
  var FAULT_COLOURS = {partition: "#d62728", kill: "#7f7f7f", pause: "#8c564b", slow: "#ff7f0e",
                       flaky: "#bcbd22", shape: "#e377c2", msg_fault: "#9467bd", inject: "#17becf",
                       restart: "#393b79"};
  var FAMILIES = {UnicastAck: "ack", Nakack4Ack: "ack", UnicastStable: "ack", UnicastXmitReq: "xmit",
                  Nakack4XmitReq: "xmit", UnicastSync: "sync", UnicastSyncOk: "sync", UnicastSyncAck: "sync",
                  SendFirstSeqno: "sync", BcastState: "state"};
  var unfolded = {};
  if (window.location.hash === "#unfold") { data.folds.forEach(function (f) { unfolded[f.id] = true; }); }
  function el(tag, attrs, parent, text) {
    var node = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    (parent || svg).appendChild(node);
    return node;
  }
  function draw() {
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var hidden = {}, folds = data.folds.filter(function (f) { return !unfolded[f.id]; });
    folds.forEach(function (f) { f.arrows.forEach(function (id) { hidden[id] = true; }); });
    var arrows = data.arrows.filter(function (a) { return !hidden[a.id]; });
    var x = {};
    data.lanes.forEach(function (name, i) { x[name] = LEFT + i * LANE; });
    // every end of every drawn arrow, and every folded loop, on a row of its own in time order (ties: by arrow,
    // its send before its arrival); an arrow's label goes on the row of its first end, so no two labels share one
    var ends = [];
    arrows.forEach(function (a) {
      if (a.send_s !== null) { ends.push({t: a.send_s, id: a.id, phase: 0}); }
      if (a.recv_s !== null) { ends.push({t: a.recv_s, id: a.id, phase: 1}); }
    });
    folds.forEach(function (f) { ends.push({t: f.at_s, id: "f" + f.id, phase: 0}); });
    ends.sort(function (p, q) {
      return p.t - q.t || String(p.id).localeCompare(String(q.id), "en", {numeric: true}) || p.phase - q.phase;
    });
    var rowOf = {};
    ends.forEach(function (e, i) { rowOf[e.id + "/" + e.phase] = i; });
    function yRow(row) { return TOP + ROW * (row + 1); }
    function yAt(t) {  // between the last end before t and the first at or after it
      var lo = 0, hi = ends.length;
      while (lo < hi) { var mid = (lo + hi) >> 1; if (ends[mid].t < t) { lo = mid + 1; } else { hi = mid; } }
      return TOP + ROW * (lo + 0.5);
    }
    var width = LEFT + LANE * Math.max(data.lanes.length - 1, 1) + 320;
    var height = yRow(ends.length + 1) + BOTTOM;
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    var defs = el("defs", {});
    [["plain", "#444"], ["finding", "#b8860b"]].forEach(function (head) {
      var marker = el("marker", {id: "seq-head-" + head[0], viewBox: "0 0 10 10", refX: 10, refY: 5,
                                 markerWidth: 8, markerHeight: 8, markerUnits: "userSpaceOnUse",
                                 orient: "auto"}, defs);
      el("path", {d: "M0,0 L10,5 L0,10 z", fill: head[1]}, marker);
    });
    var right = width - 300, labelled = {};
    function sideLabel(y, text) {  // labels of faults starting on one row stacked below each other
      var shift = labelled[y] || 0;
      labelled[y] = shift + 12;
      el("text", {"class": "seq-fault-label", x: right + 4, y: y + 11 + shift}, undefined, text);
    }
    data.faults.forEach(function (f) {
      var top = yAt(f.start_s), title = f.label + " " + JSON.stringify(f.detail);
      if (f.instant) {
        el("title", {}, el("line", {"class": "seq-fault-line", x1: LEFT - 20, x2: right, y1: top, y2: top,
                                    stroke: FAULT_COLOURS[f.kind] || "#aaa", "stroke-dasharray": "2 3"}), title);
      } else {
        var bottom = Math.max(yAt(f.end_s), top + 4);
        el("title", {}, el("rect", {"class": "seq-fault seq-fault-" + f.kind, x: LEFT - 20, y: top,
                                    width: right - LEFT + 20, height: bottom - top,
                                    fill: FAULT_COLOURS[f.kind] || "#aaa"}), title);
      }
      sideLabel(top, f.label);
    });
    data.heals_s.forEach(function (t) {
      el("line", {"class": "seq-heal", x1: LEFT - 20, x2: right, y1: yAt(t), y2: yAt(t)});
      sideLabel(yAt(t) - 7, "heal");
    });
    data.lanes.forEach(function (name) {
      el("line", {"class": "seq-lane", x1: x[name], x2: x[name], y1: TOP, y2: height - BOTTOM});
      el("text", {"class": "seq-lane-name", x: x[name], y: TOP - 12}, undefined, name);
    });
    var lastLabel = -10, lastTime = null;
    ends.forEach(function (e, i) {
      if (i - lastLabel >= 2 && (lastTime === null || Math.abs(e.t - lastTime) >= 0.0005)) {
        el("text", {"class": "seq-time", x: 4, y: yRow(i) + 4}, undefined, e.t.toFixed(3) + " s");
        lastLabel = i;
        lastTime = e.t;
      }
    });
    folds.forEach(function (f) {
      var row = rowOf["f" + f.id + "/0"], x1 = x[f.src], x2 = x[f.dst];
      var g = el("g", {"class": "seq-fold", "data-fold": f.id, role: "button", tabindex: 0});
      el("line", {"class": "seq-fold-line", x1: x1, y1: yRow(row), x2: x2, y2: yRow(row)}, g);
      el("text", {x: Math.min(x1, x2) + GAP, y: yRow(row) - 3}, g, f.label + " (click to unfold)");
      el("title", {}, g, "unfold: draw these " + f.arrows.length + " arrows");
      g.addEventListener("click", function () { unfolded[f.id] = true; draw(); });
    });
    arrows.forEach(function (a) {
      var marks = a.marks.map(function (m) { return " seq-" + m; }).join("");
      var g = el("g", {"class": "seq-arrow seq-fam-" + (FAMILIES[a.msg] || "data") + marks, "data-id": a.id,
                       "data-msg": a.msg, "data-src": a.src, "data-dst": a.dst});
      var x1 = x[a.src], x2 = x[a.dst], y1, y2;
      if (a.recv_s !== null) { y2 = yRow(rowOf[a.id + "/1"]); }
      y1 = a.send_s !== null ? yRow(rowOf[a.id + "/0"]) : y2;
      var lost = a.recv_s === null;
      if (lost) { x2 = x1 + (x2 - x1) * LOST_PART; y2 = y1 + ROW * 0.8; }
      var finding = a.findings.length > 0;
      if (finding) { el("line", {"class": "seq-glow", x1: x1, y1: y1, x2: x2, y2: y2}, g); }
      var shaft = {"class": "seq-shaft", x1: x1, y1: y1, x2: x2, y2: y2};
      if (!lost) { shaft["marker-end"] = "url(#seq-head-" + (finding ? "finding" : "plain") + ")"; }
      el("line", shaft, g);
      if (lost) {
        el("line", {"class": "seq-cross", x1: x2 - 4, y1: y2 - 4, x2: x2 + 4, y2: y2 + 4}, g);
        el("line", {"class": "seq-cross", x1: x2 - 4, y1: y2 + 4, x2: x2 + 4, y2: y2 - 4}, g);
      }
      // the label on the row of the arrow's first end, beside that end, toward the other lane
      var rightward = x2 >= x1;
      el("text", {"class": "seq-label", x: x1 + (rightward ? GAP : -GAP), y: y1 - 3,
                  "text-anchor": rightward ? "start" : "end"}, g,
         a.label + (a.marks.length ? " (" + a.marks.join(", ") + ")" : ""));
      var when = (a.send_s !== null ? "sent " + a.send_s.toFixed(6) + " s" : "no send recorded") + ", " +
                 (a.recv_s !== null ? "received " + a.recv_s.toFixed(6) + " s" : "no reception recorded");
      el("title", {}, g, a.src + " -> " + a.dst + ": " + a.label + (a.proto ? " " + a.proto : "") +
         (a.conn_id ? " conn " + a.conn_id : "") + (a.action ? ", " + a.action : "") + "; " + when);
    });
    // where each label landed, as the browser laid it out (the report's tests read these boxes)
    Array.prototype.forEach.call(svg.querySelectorAll(".seq-label, .seq-fold text"), function (t) {
      var b = t.getBBox();
      t.setAttribute("data-box", [b.x, b.y, b.width, b.height].map(function (v) { return v.toFixed(1); }).join(","));
    });
    svg.setAttribute("data-drawn", String(arrows.length));
    svg.setAttribute("data-folds", String(folds.length));
  }
  draw();
})();
"""


def _seconds(value: float) -> str:
    return f"{value:.3f} s"


def note(diagram: Diagram) -> str:
    """What the diagram shows, in words: window, messages drawn and left out, sources."""
    data = diagram.to_dict()
    window = data["window"]
    text = (f"Window {_seconds(window['start_s'])} to {_seconds(window['end_s'])} since the run's first event "
            f"({window['why']}): {data['messages_in_window']} messages, {data['drawn']} drawn")
    if data["left_out"]:
        text += (f", {data['left_out']} left out (the findings' messages first, then the nearest to "
                 f"{_seconds(window['anchor_s'])}; another window: splitlab analyze RUN --diagram-window "
                 "START_S:END_S, more arrows: --diagram-arrows N)")
    if data["folds"]:
        text += (f", {data['folded']} of them folded into {len(data['folds'])} loop(s) after their first "
                 f"{FOLD_KEEP} (click a fold to draw its arrows)")
    text += f". Held: {data['held_ms']:g} ms or more in transit."
    if data["not_read"]:
        text += (f" {data['not_read']} protocol events around the window were not read (only the ones nearest "
                 "to its anchor): arrows near its edges may miss an end.")
    text += (f" Arrivals also from the capture {data['capture']}." if data["capture"]
             else " From the history alone (the run has no capture).")
    return text


def section(diagram: Diagram) -> str:
    """The diagram's HTML: note, findings, legend, the SVG the script fills, the data and the script."""
    payload = (json.dumps(diagram.to_dict(), separators=(",", ":"))  # JSON escapes: nothing ends the script
               .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
    findings = "".join(f"<li>{html.escape(f['text'])} ({len(f['arrows'])} arrow(s))</li>"
                       for f in diagram.to_dict()["findings"])
    legend = "".join(f'<span><b>{html.escape(mark)}</b>: {html.escape(meaning)}</span>'
                     for mark, meaning in MARKS.items())
    return (f"<style>{STYLE}</style>"
            f'<p id="seq-note">{html.escape(note(diagram))}</p>'
            + (f'<ul id="seq-findings">{findings}</ul>' if findings else "")
            + f'<p class="seq-legend">{legend}</p>'
            '<div class="seq-wrap"><svg id="seq-svg" xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
            "</svg></div>"
            f'<script type="application/json" id="seq-data">{payload}</script>'
            f"<script>{SCRIPT}</script>")
