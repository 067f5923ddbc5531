"""The JGroups node's history writer (jgnode.runtime.SharedHistory): JGroups' threads and the event loop write
to it at once; a full buffer flushes and close flushes, under the one lock, without deadlock or lost lines."""
from __future__ import annotations

import threading

from jgnode.runtime import SharedHistory
from node.history import read


def test_many_threads_write_every_line_once_in_seq_order_and_close_flushes(tmp_path):
    path = tmp_path / "n1.jsonl"
    history = SharedHistory(path, "r", "n1", buffer_lines=7)  # a small buffer: record flushes often

    def write(k: int) -> None:
        for i in range(500):
            history.record("app_deliver", {"msg_id": f"t{k}.{i}", "kind": "unicast", "from": "n2"})
    threads = [threading.Thread(target=write, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "a writer deadlocked (a full buffer's flush under the lock)"
    closer = threading.Thread(target=history.close, daemon=True)
    closer.start()
    closer.join(timeout=10)
    assert not closer.is_alive(), "close deadlocked"
    lines = path.read_text().splitlines()
    events = read(path)
    assert [e["seq"] for e in events] == list(range(1, 2001))
    assert '"rows"' in lines[0] and len(lines) < 2000  # written as run lines (node.history)
    assert len({e["msg_id"] for e in events}) == 2000
