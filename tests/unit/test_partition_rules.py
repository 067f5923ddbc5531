"""Partition rules as data: the iptables-restore input and grudge validation (no root needed)."""
import pytest

from chaos.partition import chain_name, check_grudge, restore_input
from node.errors import UsageError


def test_restore_input_declares_and_fills_the_run_chain():
    text = restore_input("SL-r1", ["10.0.0.3", "10.0.0.2"])
    assert text == "*filter\n:SL-r1 - [0:0]\n-A SL-r1 -s 10.0.0.2/32 -j DROP\n-A SL-r1 -s 10.0.0.3/32 -j DROP\nCOMMIT\n"
    assert restore_input("SL-r1", []) == "*filter\n:SL-r1 - [0:0]\nCOMMIT\n"


def test_grudge_validation():
    check_grudge({"n2": {"n1"}}, ["n1", "n2", "n3"])
    with pytest.raises(UsageError, match="unknown node"):
        check_grudge({"n2": {"n7"}}, ["n1", "n2"])
    with pytest.raises(UsageError, match="its own traffic"):
        check_grudge({"n2": {"n2"}}, ["n1", "n2"])


def test_chain_name_limit():
    assert chain_name("261121-221530-a3f9") == "SL-261121-221530-a3f9"
    with pytest.raises(UsageError):
        chain_name("x" * 30)
