"""The history items of the node conformance check (chaos.contract.conformance), on hand-made histories: each
item fails exactly where a node's history breaks the contract."""
from __future__ import annotations

import json

from chaos.cluster.model import Cluster, NodeInfo
from chaos.contract import conformance
from chaos.contract.conformance import MULTICASTS, QUIESCE_ITEM, UNICASTS, _Checker, _history


def write(run_dir, node, events):
    (run_dir / "events").mkdir(exist_ok=True)
    lines = []
    for seq, (type_, fields) in enumerate(events, 1):
        lines.append(json.dumps({"v": 1, "ts": 1.0 + seq, "seq": seq, "run": "r1", "node": node, "type": type_,
                                 **fields}))
    (run_dir / "events" / f"{node}.jsonl").write_text("\n".join(lines) + "\n")


def good(node, other):
    sent = [("app_send", {"msg_id": f"{node}.1.{i}", "kind": "unicast", "to": other, "size": 100})
            for i in range(UNICASTS)]
    sent += [("app_send", {"msg_id": f"{node}.1.m{i}", "kind": "multicast", "to": "*", "size": 100})
             for i in range(MULTICASTS)]
    got = [("app_deliver", {"msg_id": f"{other}.1.{i}", "kind": "unicast", "from": other}) for i in range(UNICASTS)]
    got += [("app_deliver", {"msg_id": f"{other}.1.m{i}", "kind": "multicast", "from": other})
            for i in range(MULTICASTS)]
    return ([("node_start", {"boot": 1}), ("peer_heard", {"peer": other}),
             ("view", {"view_id": ["n1", 1], "members": ["n1", "n2"]})] + (sent if node == "n1" else got)
            + [("data_tx", {"proto": "x", "to": other, "seqno": 1}), ("node_stop", {"reason": "signal"})])


def items(tmp_path, n1, n2):
    write(tmp_path, "n1", n1)
    write(tmp_path, "n2", n2)
    checker = _Checker(Cluster("r1", tmp_path, "t", [NodeInfo("n1", "c1", "", "", 0), NodeInfo("n2", "c2", "", "", 0)]))
    _history(checker, multicast=True)
    return {item.name: item for item in checker.items}


def test_a_history_that_keeps_the_contract_keeps_every_item(tmp_path):
    result = items(tmp_path, good("n1", "n2"), good("n2", "n1"))
    assert [name for name, item in result.items() if item.failed] == []
    assert "data_tx" in result[next(n for n in result if n.startswith("protocol events"))].detail


def test_each_broken_history_fails_its_own_item(tmp_path):
    n2 = good("n2", "n1")
    first_delivery = next(e for e in n2 if e[0] == "app_deliver")
    broken = [e for e in n2 if e[0] != "node_stop" and e is not first_delivery]
    broken.append(("app_deliver", {"msg_id": "x", "kind": "other", "from": "n1"}))  # not a kind the schema knows
    result = items(tmp_path, good("n1", "n2"), broken)
    failed = {name for name, item in result.items() if item.failed}
    assert failed == {"events/n2.jsonl: every line valid (pipeline/SCHEMA.md)", "node_stop at both nodes",
                      f"app_send for every unicast sent ({UNICASTS}) and app_deliver of each at n2, from n1"}
    assert "app_deliver.kind is not one of unicast, multicast" in result[
        "events/n2.jsonl: every line valid (pipeline/SCHEMA.md)"].detail


def test_a_gap_in_seq_or_another_writer_fails_the_writer_item(tmp_path):
    write(tmp_path, "n1", good("n1", "n2"))
    path = tmp_path / "events" / "n1.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:3] + lines[4:]) + "\n")  # seq 4 lost
    write(tmp_path, "n2", good("n2", "n1"))
    checker = _Checker(Cluster("r1", tmp_path, "t", [NodeInfo("n1", "c1", "", "", 0), NodeInfo("n2", "c2", "", "", 0)]))
    _history(checker, multicast=True)
    failed = [i.name for i in checker.items if i.failed]
    assert "events/n1.jsonl: one writer (run, node), seq 1, 2, 3, ..." in failed
    assert conformance.Item("history", "x", "optional", "").failed is False


def quiesced(events, reason="quiesce"):
    return [e if e[0] != "node_stop" else ("node_stop", {"reason": reason}) for e in events]


def test_a_history_ended_by_quiesce_keeps_the_optional_item_and_one_that_was_not_does_not(tmp_path):
    n1, n2 = quiesced(good("n1", "n2")), quiesced(good("n2", "n1"))
    assert items(tmp_path, n1, n2)[QUIESCE_ITEM].status == "keeps"
    for n2_broken in (quiesced(n2, "signal"),                                       # stopped without /quiesce
                      n2 + [("peer_silent", {"peer": "n1"})],                        # recorded the stop after it
                      n2 + [("node_stop", {"reason": "signal"})]):                   # a second node_stop
        item = items(tmp_path, n1, n2_broken)[QUIESCE_ITEM]
        assert item.status == "optional" and not item.failed and "n2: no" in item.detail and "n1: yes" in item.detail
