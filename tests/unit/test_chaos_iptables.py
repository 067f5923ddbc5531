"""The one helper for a run's iptables chains (chaos.net.iptables): the iptables-restore texts, the ledger entries
(the very ones the three backends wrote before it, so older runs heal), and apply/remove against a real ledger
with namespaces that record what they are asked to run; no root, nothing is executed."""
import json
from dataclasses import dataclass, field

import pytest

from chaos.host import ledger as ledger_mod
from chaos.host.ledger import Ledger
from chaos.net import iptables
from node.errors import UsageError

INO = 4026532001


@dataclass(frozen=True)
class FakeNs:
    """A namespace whose `exec` records (argv, stdin) instead of running anything."""

    node: str
    inode: int = INO
    pid: int = 2 ** 22 + 7  # no such process
    host: str = ""  # on this machine
    remote: None = None
    calls: list = field(default_factory=list, compare=False, hash=False)

    def exec(self, argv, input_text=None, check=True, timeout_s=30):
        self.calls.append((list(argv), input_text))


@pytest.fixture(autouse=True)
def restores_to_the_fakes(monkeypatch):
    """The restores that iptables.apply releases together go to each fake namespace's `exec`, one by one."""
    monkeypatch.setattr(iptables, "restore_together",
                        lambda jobs: [ns.exec(argv, input_text=text) for ns, argv, text in jobs])

@pytest.fixture
def undone(monkeypatch):
    """The entries the ledger's heal undoes, in order; their undo commands are recorded, not run."""
    seen = []

    def record(entry, runner):
        seen.append(entry)
        return "undone"

    monkeypatch.setattr(ledger_mod, "undo_entry", record)
    return seen


def test_restore_declares_fills_and_optionally_hooks_the_chain_in_one_text():
    assert iptables.restore_input("SL-r1", ["-s 10.0.0.3/32 -j DROP"], hook_into="INPUT") == (
        "*filter\n:SL-r1 - [0:0]\n-A SL-r1 -s 10.0.0.3/32 -j DROP\n-I INPUT 1 -j SL-r1\nCOMMIT\n")
    assert iptables.restore_input("SLL-r1", []) == "*filter\n:SLL-r1 - [0:0]\nCOMMIT\n"
    assert iptables.remove_input("SLQ-r1", "OUTPUT") == "*filter\n-D OUTPUT -j SLQ-r1\n:SLQ-r1 - [0:0]\n-X SLQ-r1\nCOMMIT\n"


def test_chain_names_and_their_limit():
    assert [k.name("261121-221530-a3f9") for k in (iptables.PARTITION, iptables.STATLOSS, iptables.QUEUE)] == [
        "SL-261121-221530-a3f9", "SLL-261121-221530-a3f9", "SLQ-261121-221530-a3f9"]
    with pytest.raises(UsageError, match="too long for an iptables chain name"):
        iptables.STATLOSS.name("x" * 25)


# The entries exactly as the three backends wrote them before this module: keys, texts and undo commands.
OLD_ENTRIES = {
    "partition": ("partition", f"partition:{INO}:SL-r1", "iptables chain SL-r1 hooked in INPUT", "INPUT", "SL-r1"),
    "statloss": ("statloss", f"statloss:{INO}:SLL-r1", "iptables chain SLL-r1 (statistic loss) hooked in OUTPUT",
                 "OUTPUT", "SLL-r1"),
    "queue": ("shaper", f"shaper-chain:{INO}:SLQ-r1", "iptables chain SLQ-r1 (NFQUEUE to the shaper) hooked in OUTPUT",
              "OUTPUT", "SLQ-r1"),
}
KINDS = {"partition": iptables.PARTITION, "statloss": iptables.STATLOSS, "queue": iptables.QUEUE}


@pytest.mark.parametrize("name", sorted(OLD_ENTRIES))
def test_ledger_entries_are_those_older_runs_recorded(name):
    group, key, what, hook, chain = OLD_ENTRIES[name]
    pid = 2 ** 22 + 7
    entry = KINDS[name].entry("r1", FakeNs("n1"))
    assert (entry.group, entry.key, entry.what, entry.node, entry.pid, entry.netns_ino) == (group, key, what, "n1",
                                                                                            pid, INO)
    nsenter = ["nsenter", "-t", str(pid), "-n"]
    assert entry.undo == [{"argv": nsenter + ["iptables-restore", "-w", "--noflush"],
                           "input": f"*filter\n-D {hook} -j {chain}\n:{chain} - [0:0]\n-X {chain}\nCOMMIT\n"}]
    assert entry.present == {"argv": nsenter + ["iptables", "-w", "-C", hook, "-j", chain]}


def test_apply_records_first_hooks_once_refills_atomically_and_removes_an_emptied_chain(tmp_path, undone):
    ledger = Ledger(tmp_path)
    n1, n2, n3 = FakeNs("n1", inode=1), FakeNs("n2", inode=2), FakeNs("n3", inode=3)
    iptables.apply(ledger, iptables.PARTITION, "r1", [(n1, ["-s 10.0.0.2/32 -j DROP"]), (n2, []), (n3, [])])
    assert [e.node for e in ledger.outstanding()] == ["n1"]  # recorded before applied; n2, n3 need nothing
    assert n1.calls == [(["iptables-restore", "-w", "--noflush"],
                         "*filter\n:SL-r1 - [0:0]\n-A SL-r1 -s 10.0.0.2/32 -j DROP\n-I INPUT 1 -j SL-r1\nCOMMIT\n")]
    assert n2.calls == n3.calls == []

    iptables.apply(ledger, iptables.PARTITION, "r1", [(n1, ["-s 10.0.0.3/32 -j DROP"]), (n2, ["-s 10.0.0.1/32 -j DROP"])])
    assert n1.calls[-1][1] == "*filter\n:SL-r1 - [0:0]\n-A SL-r1 -s 10.0.0.3/32 -j DROP\nCOMMIT\n"  # no second hook
    assert n2.calls[-1][1].endswith("-I INPUT 1 -j SL-r1\nCOMMIT\n")
    assert sorted(e.node for e in ledger.outstanding()) == ["n1", "n2"]

    iptables.apply(ledger, iptables.PARTITION, "r1", [(n1, []), (n2, ["-s 10.0.0.1/32 -j DROP"])])
    assert [e.node for e in undone] == ["n1"]  # emptied: unhooked and removed through its ledger entry
    assert [e.node for e in ledger.outstanding()] == ["n2"]


def test_remove_settles_exactly_this_kind_of_this_run_also_of_nodes_gone_elsewhere(tmp_path, undone):
    ledger = Ledger(tmp_path)
    iptables.apply(ledger, iptables.QUEUE, "r1", [(FakeNs("n1", inode=1), ["-j RETURN"])])
    iptables.apply(ledger, iptables.STATLOSS, "r1", [(FakeNs("n1", inode=1), ["-j DROP"])])
    iptables.apply(ledger, iptables.STATLOSS, "r1", [(FakeNs("n2", inode=2), ["-j DROP"])])
    iptables.apply(ledger, iptables.STATLOSS, "r2", [(FakeNs("n1", inode=1), ["-j DROP"])])
    assert iptables.remove(ledger, iptables.STATLOSS, "r1", node="n2") == 1
    assert iptables.remove(ledger, iptables.STATLOSS, "r1") == 1
    assert iptables.remove(ledger, iptables.STATLOSS, "r1") == 0  # idempotent
    assert [(e.key.split(":")[0], e.node) for e in undone] == [("statloss", "n2"), ("statloss", "n1")]
    assert sorted(e.key for e in ledger.outstanding()) == ["shaper-chain:1:SLQ-r1", "statloss:1:SLL-r2"]


def test_a_chain_recorded_by_older_code_is_refilled_without_a_second_hook_and_healed_by_its_own_undo(tmp_path,
                                                                                                    undone):
    ledger = Ledger(tmp_path)
    old_line = {"op": "apply", "id": "0123456789ab", "ts": 1.0, "group": "statloss", "key": f"statloss:{INO}:SLL-r1",
                "node": "n1", "pid": 2 ** 22 + 7, "netns_ino": INO,
                "what": "iptables chain SLL-r1 (statistic loss) hooked in OUTPUT",
                "undo": [{"argv": ["nsenter", "-t", "4194311", "-n", "iptables-restore", "-w", "--noflush"],
                          "input": "*filter\n-D OUTPUT -j SLL-r1\n:SLL-r1 - [0:0]\n-X SLL-r1\nCOMMIT\n"}],
                "present": {"argv": ["nsenter", "-t", "4194311", "-n", "iptables", "-w", "-C", "OUTPUT", "-j",
                                     "SLL-r1"]}, "process": None}
    ledger.path.write_text(json.dumps(old_line) + "\n")
    ns = FakeNs("n1")
    iptables.apply(ledger, iptables.STATLOSS, "r1", [(ns, ["-j DROP"])])
    assert "-I OUTPUT" not in ns.calls[0][1]  # the old entry says the hook is there
    assert [e.id for e in ledger.outstanding()] == ["0123456789ab"]  # and it stays the one entry
    assert iptables.remove(ledger, iptables.STATLOSS, "r1") == 1
    assert undone[0].undo == old_line["undo"]  # healed with the commands it recorded
