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


def test_end_writes_the_last_event_last_while_other_threads_write(tmp_path):
    """JGroups' threads go on recording while the control API ends the history (`/quiesce`): `node_stop` is the
    file's last line, no thread fails on the closed file, and every event after it is counted, not written."""
    path = tmp_path / "n1.jsonl"
    history = SharedHistory(path, "r", "n1", buffer_lines=7)
    failures: list[Exception] = []
    recorded = [0, 0, 0, 0]
    ended = threading.Event()

    def write(k: int) -> None:
        try:
            while not ended.is_set() or recorded[k] < 200:
                history.record("app_deliver", {"msg_id": f"t{k}.{recorded[k]}", "kind": "unicast", "from": "n2"})
                recorded[k] += 1
        except Exception as exc:  # the test reports what a writer raised
            failures.append(exc)
    threads = [threading.Thread(target=write, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    history.end("node_stop", {"reason": "quiesce"})
    ended.set()
    for t in threads:
        t.join(timeout=10)
    assert not failures and not any(t.is_alive() for t in threads)
    events = read(path)
    assert events[-1]["type"] == "node_stop" and [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert history.unrecorded > 0 and len(events) - 1 + history.unrecorded == sum(recorded)
