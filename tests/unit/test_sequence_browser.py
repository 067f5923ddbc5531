"""The report's message sequence diagram in a real browser: headless Chromium opens report.html from a file (no
network), runs its inline script, and the arrows it drew are counted in the rendered DOM against the messages of
the window counted straight from the history; a page of the diagram alone is screenshot and must show the red of
its lost messages."""
from __future__ import annotations

import html
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import pipeline_fixtures as pf
from pipeline_fixtures import spark  # noqa: F401  (the shared Spark session)
from pipeline import api, sequence_html
from pipeline.sequence import FOLD_KEEP, MESSAGE_EVENT_TYPES, DiagramOptions, Window, build, message_of
from pipeline.report_data import FaultPeriod

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARROW = re.compile(r'<g [^>]*class="seq-arrow\b([^"]*)"')
NODES = pf.NODES
HELD_TYPE = 18  # node.wire: UnicastStable


def _browser(tmp_path: Path, page: Path, *args: str, fragment: str = "") -> str:
    if CHROMIUM is None:  # a failure, not a skip: `make test` installs it (images/host-deps.sh)
        pytest.fail("chromium is not installed: run 'make host-deps' (or apt-get install -y chromium)", pytrace=False)
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}/chr",
                           *args, page.as_uri() + fragment], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _scenario() -> pf.Scenario:
    """Three nodes: multicasts (n3 never gets n1's #2), a duplicated multicast at n2, a unicast stranded by a
    partition and resent after it, STABLEs held by a msg-fault."""
    s = pf.Scenario(run_id="seq-browser")
    for i, node in enumerate(NODES):
        s.add(node, 0.0, "node_start", boot=pf.BOOT, data_ip=f"10.9.0.{i + 2}", control_ip="10.1.0.1",
              members=list(NODES), config={"unicast": "unicast3", "multicast": "nakack4"})
    s.view(NODES, 0.1, "n1", 1, NODES)
    for seqno in (1, 2, 3):
        at = 0.2 + 0.1 * seqno
        s.multicast("n1", at, {r: at + 0.002 for r in ("n2", "n3") if (r, seqno) != ("n3", 2)}, seqno)
    s.add("n2", 0.503, "data_rx", proto="nakack4", **{"from": "n1"}, seqno=3, conn_id=0, first=False,
          action="duplicate")  # the network delivered #3 twice
    s.add("controller", 1.0, "fault_start", fault_id="m1", kind="msg_fault", applied_ts=pf.T0_TS + 1.0,
          detail={"type": HELD_TYPE, "src": "n3", "dst": "n2", "action": "hold", "ms": 1500.0})
    s.add("controller", 1.2, "fault_start", fault_id="p1", kind="partition", applied_ts=pf.T0_TS + 1.2,
          detail={"grudge": {"n3": ["n2"]}})
    s.unicast("n2", "n3", 1.1, 1.102, seqno=1)
    s.unicast("n2", "n3", 1.5, None, seqno=2)  # cut by the partition ...
    s.add("controller", 2.0, "fault_end", fault_id="p1", kind="partition", applied_ts=pf.T0_TS + 2.0)
    s.add("n2", 2.1, "data_tx", proto="unicast3", to="n3", seqno=2, conn_id=7, first=False, resend=True, size=50)
    s.add("n3", 2.102, "data_rx", proto="unicast3", **{"from": "n2"}, seqno=2, conn_id=7, first=False,
          action="deliver")  # ... and resent after it
    s.add("n3", 2.102, "app_deliver", msg_id=s.find("app_send", node="n2")[-1].fields["msg_id"], kind="unicast",
          **{"from": "n2"})
    s.add("n3", 1.2, "stable_tx", proto="unicast3", to="n2", seqno=1, conn_id=7)
    s.add("n2", 2.701, "stable_rx", proto="unicast3", **{"from": "n3"}, seqno=1, conn_id=7, action="accepted")
    s.add("controller", 3.0, "heal", applied_ts=pf.T0_TS + 3.0)
    for node in NODES:
        s.add(node, 4.0, "node_stop", reason="signal")
    return s


def _counted_from_the_history(s: pf.Scenario) -> tuple[int, int]:
    """(messages, lost ones): per message (type, sender, receiver, seqno) the more of its transmissions and
    receptions; lost: transmissions beyond receptions. Every node is in the one view, so a multicast goes to 2."""
    sent: Counter = Counter()
    received: Counter = Counter()
    for e in s.events:
        if e.type not in MESSAGE_EVENT_TYPES:
            continue
        msg = message_of({"type": e.type, **e.fields})
        if e.type.endswith("_rx"):
            received[(msg, e.fields["from"], e.node, e.fields["seqno"])] += 1
            continue
        for receiver in ([n for n in NODES if n != e.node] if e.fields["to"] == "*" else [e.fields["to"]]):
            sent[(msg, e.node, receiver, e.fields["seqno"])] += 1
    keys = set(sent) | set(received)
    return (sum(max(sent[k], received[k]) for k in keys), sum(max(0, sent[k] - received[k]) for k in keys))


def test_the_report_opened_in_headless_chromium_draws_one_arrow_per_message_of_the_window(
        tmp_path, spark):  # noqa: F811
    s = _scenario()
    run_dir = s.write(tmp_path / "run")
    api.analyze(run_dir, spark=spark, diagram=DiagramOptions(window_s=(0.0, 4.0)))
    report = run_dir / "report" / "report.html"
    assert "<svg" in report.read_text() and 'class="seq-arrow' not in report.read_text()  # only the script draws
    dom = _browser(tmp_path, report, "--dump-dom")
    arrows = [classes.split() for classes in ARROW.findall(dom)]
    messages, lost = _counted_from_the_history(s)
    assert messages == 12 and lost == 3  # the fixture is what this test thinks it is
    assert len(arrows) == messages
    assert sum("seq-lost" in c for c in arrows) == lost
    assert sum("seq-duplicate" in c for c in arrows) == 1 and sum("seq-held" in c for c in arrows) == 1
    assert sum("seq-finding" in c for c in arrows) == 1  # the first lost message: n1's #2 to n3
    assert re.search(r'<rect [^>]*class="seq-fault seq-fault-partition"', dom)
    assert re.search(r'<svg [^>]*data-drawn="12"', dom)
    assert "12 messages, 12 drawn" in dom and "first lost message: n1." in dom


def test_a_capped_diagram_draws_its_cap_and_paints_its_lost_messages_red(tmp_path):
    t0 = pf.T0_TS
    events = [{"node": "n1", "ts": t0 + 0.1 * i, "type": "data_tx", "proto": "unicast3", "to": "n2", "seqno": i,
               "conn_id": 7} for i in range(1, 31)]  # none arrives: 30 lost messages
    faults = [FaultPeriod("p1", "partition", t0, t0 + 5, {"grudge": {"n2": ["n1"]}})]
    diagram = build(events, Window(t0, t0 + 10, t0, "asked for"), nodes=["n1", "n2"], t0_ts=t0, faults=faults,
                    max_arrows=8)  # (no more than FOLD_MIN of a kind: nothing folded)
    page = tmp_path / "diagram.html"
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
                    f"{sequence_html.section(diagram)}</body></html>")
    dom = _browser(tmp_path, page, "--dump-dom")
    assert len(ARROW.findall(dom)) == 8 and "30 messages, 8 drawn, 22 left out" in dom
    from matplotlib.image import imread

    shot = tmp_path / "shot.png"
    _browser(tmp_path, page, f"--screenshot={shot}", "--window-size=900,700", "--hide-scrollbars")
    rgb = (imread(shot)[..., :3] * 255).round()
    red = ((abs(rgb[..., 0] - 214) < 30) & (abs(rgb[..., 1] - 39) < 30) & (abs(rgb[..., 2] - 40) < 30)).sum()
    assert red > 100, f"only {red} pixels of the lost messages' red: was the diagram drawn?"


BOX = re.compile(r'<text [^>]*class="(seq-label)"[^>]*data-box="([^"]+)"|<g class="seq-fold"[^>]*>.*?<text [^>]*'
                 r'data-box="([^"]+)"[^>]*>([^<]*)</text>', re.S)


def _loop_page(tmp_path: Path) -> tuple[Path, int]:
    """The demo's loop (unicast2 under a lost STABLE): n1 resends seqnos 2..19 to n2 every few ms, each resend
    answered by n2's STABLE that never arrives, a resend now and then discarded as a duplicate; 120 arrows whose
    ends lie milliseconds apart, the densest the diagram draws. Returns the page and its arrow count."""
    t0 = pf.T0_TS
    events = []
    for i in range(60):
        at = t0 + 0.004 * i
        seqno = 2 + i % 18
        events.append({"node": "n1", "ts": at, "type": "data_tx", "proto": "unicast2", "to": "n2", "seqno": seqno,
                       "conn_id": 7, "first": False, "resend": True, "size": 50})
        events.append({"node": "n2", "ts": at + 0.003, "type": "data_rx", "proto": "unicast2", "from": "n1",
                       "seqno": seqno, "conn_id": 7, "first": False, "action": "duplicate" if i % 5 else "deliver"})
        events.append({"node": "n2", "ts": at + 0.001, "type": "stable_tx", "proto": "unicast2", "to": "n1",
                       "seqno": 1, "conn_id": 7})
    diagram = build(events, Window(t0, t0 + 1, t0, "asked for"), nodes=["n1", "n2", "n3"], t0_ts=t0, max_arrows=150)
    page = tmp_path / "loop.html"
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
                    f"{sequence_html.section(diagram)}</body></html>")
    return page, len(diagram.arrows)


def _boxes(dom: str) -> list[tuple[float, float, float, float]]:
    out = []
    for m in BOX.finditer(dom):
        box = m.group(2) or m.group(3)
        out.append(tuple(float(v) for v in box.split(",")))
    return out


def _overlapping(boxes: list[tuple[float, float, float, float]]) -> list[tuple[int, int]]:
    """Pairs of boxes (x, y, width, height) whose areas intersect (touching edges do not)."""
    return [(i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes[:i])
            if a[0] < b[0] + b[2] - 0.5 and b[0] < a[0] + a[2] - 0.5 and a[1] < b[1] + b[3] - 0.5
            and b[1] < a[1] + a[3] - 0.5]


def test_the_loops_labels_never_overlap_and_the_loop_is_folded_until_clicked(tmp_path):
    """Measured in headless Chromium: every arrow label's and fold's laid-out box (data-box, from getBBox) is
    disjoint from every other, folded (the loop beyond its first arrows is one row) and unfolded (#unfold: every
    arrow drawn)."""
    page, arrows = _loop_page(tmp_path)
    dom = _browser(tmp_path, page, "--dump-dom")
    folds = [html.unescape(f) for f in re.findall(r'<g class="seq-fold"[^>]*>.*?<text [^>]*>([^<]*)</text>', dom,
                                                    re.S)]
    assert folds and any(re.match(r"\.\.\. \d+ more UnicastData n1->n2 \[2\.\.19\] \(click to unfold\)", f)
                         for f in folds), folds
    drawn = int(re.search(r'data-drawn="(\d+)"', dom).group(1))
    assert drawn < arrows and len(ARROW.findall(dom)) == drawn >= 2 * FOLD_KEEP
    boxes = _boxes(dom)
    assert len(boxes) == drawn + len(folds) and all(b[2] > 0 and b[3] > 0 for b in boxes)
    assert not _overlapping(boxes), _overlapping(boxes)[:5]
    unfolded = _browser(tmp_path, page, "--dump-dom", fragment="#unfold")
    assert len(ARROW.findall(unfolded)) == arrows and 'data-folds="0"' in unfolded
    boxes = _boxes(unfolded)
    assert len(boxes) == arrows
    assert not _overlapping(boxes), _overlapping(boxes)[:5]
