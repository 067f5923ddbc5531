"""Partitions as iptables rules (chaos.net.partition): the drops a grudge gives each node's chain, through the one
chain helper (chaos.net.iptables) with namespaces that record what they are asked to run; no root needed."""
from dataclasses import dataclass, field

import pytest

from chaos.host.ledger import Ledger
from chaos.net import iptables, partition
from node.errors import UsageError

IPS = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}


@dataclass(frozen=True)
class FakeNs:
    node: str
    inode: int
    pid: int = 2 ** 22 + 7  # no such process: heal settles its entries as namespace-gone, running nothing
    host: str = ""  # on this machine
    remote: None = None
    inputs: list = field(default_factory=list, compare=False, hash=False)

    def exec(self, argv, input_text=None, check=True, timeout_s=30):
        assert argv == ["iptables-restore", "-w", "--noflush"]
        self.inputs.append(input_text)


@pytest.fixture(autouse=True)
def restores_to_the_fakes(monkeypatch):
    """The restores that iptables.apply releases together go to each fake namespace's `exec`, one by one."""
    monkeypatch.setattr(iptables, "restore_together",
                        lambda jobs: [ns.exec(argv, input_text=text) for ns, argv, text in jobs])

def namespaces():
    return {name: FakeNs(name, inode) for inode, name in enumerate(IPS, 1)}


def test_drop_rules_are_sorted_per_sender_address():
    assert partition.drop_rules(["10.0.0.3", "10.0.0.2"]) == ["-s 10.0.0.2/32 -j DROP", "-s 10.0.0.3/32 -j DROP"]
    assert partition.drop_rules([]) == []


def test_each_receiver_drops_exactly_what_the_grudge_names_and_others_are_not_touched(tmp_path):
    ns = namespaces()
    partition.apply(Ledger(tmp_path), "r1", {"n2": {"n1", "n3"}}, ns, IPS)  # n2 hears neither n1 nor n3
    assert ns["n2"].inputs == ["*filter\n:SL-r1 - [0:0]\n-A SL-r1 -s 10.0.0.1/32 -j DROP\n"
                               "-A SL-r1 -s 10.0.0.3/32 -j DROP\n-I INPUT 1 -j SL-r1\nCOMMIT\n"]
    assert ns["n1"].inputs == ns["n3"].inputs == []
    assert [e.what for e in Ledger(tmp_path).outstanding()] == ["iptables chain SL-r1 hooked in INPUT"]


def test_a_new_grudge_replaces_the_old_and_heal_settles_every_chain(tmp_path):
    ledger, ns = Ledger(tmp_path), namespaces()
    partition.apply(ledger, "r1", {"n2": {"n1"}}, ns, IPS)
    partition.apply(ledger, "r1", {"n1": {"n2"}}, ns, IPS)
    assert ns["n1"].inputs[-1].count("-A SL-r1") == 1 and "-s 10.0.0.2/32" in ns["n1"].inputs[-1]
    assert len(ns["n2"].inputs) == 1  # n2's chain went through its ledger entry, not a new restore
    assert [e.node for e in ledger.outstanding()] == ["n1"]
    partition.heal(ledger, "r1")
    partition.heal(ledger, "r1")  # idempotent
    assert ledger.outstanding() == []


def test_a_bad_grudge_is_refused_before_anything_is_recorded(tmp_path):
    ledger = Ledger(tmp_path)
    with pytest.raises(UsageError, match="unknown node"):
        partition.apply(ledger, "r1", {"n2": {"n7"}}, namespaces(), IPS)
    with pytest.raises(UsageError, match="its own traffic"):
        partition.apply(ledger, "r1", {"n2": {"n2"}}, namespaces(), IPS)
    assert ledger.outstanding() == []
