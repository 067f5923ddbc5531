"""A history collected from a host is written with the host's clock offset taken off every event's time, the
events of a run line (node.history) included."""
from __future__ import annotations

from chaos.hosts.multi import _write_shifted
from node.history import HistoryWriter, read


def test_every_events_time_is_shifted_run_lines_too(tmp_path):
    source = tmp_path / "host.jsonl"
    ticks = iter(range(100))
    with HistoryWriter(source, "r", "n1", clock=lambda: 1000 + next(ticks) / 10) as writer:
        writer.emit("node_start", boot=1)
        for n in range(4):
            writer.emit("app_deliver", msg_id=f"n2.1.{n}", kind="unicast", **{"from": "n2"})
    text = source.read_text() + '{"v":1,"ts":10'  # a line cut short by a kill stays as it is
    assert '"rows"' in text

    shifted = tmp_path / "n1.jsonl"
    _write_shifted(shifted, text, 2.5)

    before = read(source)
    lines = shifted.read_text().splitlines()
    assert lines[-1] == '{"v":1,"ts":10'
    shifted.write_text("\n".join(lines[:-1]) + "\n")
    after = read(shifted)
    assert [round(e["ts"], 6) for e in after] == [round(e["ts"] - 2.5, 6) for e in before]
    assert [(e["seq"], e.get("msg_id")) for e in after] == [(e["seq"], e.get("msg_id")) for e in before]
