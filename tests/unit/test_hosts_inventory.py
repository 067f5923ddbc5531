"""The inventory file, node placement and the data-network plan of multi-host runs: every mistake in the file
is one `UsageError` naming the host and the field; plans never collide inside a run."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from chaos.hosts import datanet
from chaos.hosts.inventory import load, parse, place, placement_text
from node.errors import UsageError

GOOD = """
hosts:
  - {name: hosta, address: 192.0.2.10, key: id_test}
  - {name: hostb, address: lab-b.example, user: ops, port: 2222, sudo: true, data_address: 10.1.0.2}
"""


@pytest.fixture
def inv_dir(tmp_path: Path) -> Path:
    (tmp_path / "id_test").write_text("not a real key")
    return tmp_path


def test_a_good_inventory_reads_with_defaults_and_keys_relative_to_the_file(inv_dir: Path) -> None:
    (inv_dir / "hosts.yaml").write_text(GOOD)
    inv = load(inv_dir / "hosts.yaml")
    a, b = inv.hosts
    assert (a.name, a.address, a.user, a.port, a.sudo, a.key) == ("hosta", "192.0.2.10", "root", 22, False,
                                                                   str(inv_dir / "id_test"))
    assert (b.user, b.port, b.sudo, b.vxlan_address, b.key) == ("ops", 2222, True, "10.1.0.2", None)
    assert inv.names == ["hosta", "hostb"]


@pytest.mark.parametrize("text, words", [
    ("hosts: []", "lists no host"),
    ("- a", "one key, 'hosts'"),
    ("hosts: [{name: a}]", "address is missing"),
    ("hosts: [{name: A1, address: 192.0.2.1}]", "name 'A1'"),
    ("hosts: [{name: a, address: 192.0.2.1, colour: red}]", "unknown field(s) colour"),
    ("hosts: [{name: a, address: 192.0.2.1, port: 70000}]", "port 70000"),
    ("hosts: [{name: a, address: 192.0.2.1, port: true}]", "port True"),
    ("hosts: [{name: a, address: 192.0.2.1, sudo: 'yes'}]", "sudo must be true or false"),
    ("hosts: [{name: a, address: 192.0.2.1, key: missing_key}]", "does not exist"),
    ("hosts: [{name: a, address: '300.1.1.1'}]", "neither an IP address nor a host name"),
    ("hosts: [{name: a, address: 'bad host'}]", "neither an IP address nor a host name"),
    ("hosts: [{name: a, address: 192.0.2.1}, {name: a, address: 192.0.2.2}]", "share the name a"),
    ("hosts: [{name: a, address: 192.0.2.1}, {name: b, address: 192.0.2.1}]", "share the data address"),
    ("hosts: [{name: a, address: 192.0.2.1, user: 'root; rm'}]", "is not a user name"),
    ("hosts: {", "not valid YAML"),
])
def test_every_mistake_is_one_usage_error_naming_what(inv_dir: Path, text: str, words: str) -> None:
    with pytest.raises(UsageError) as info:
        parse(text, inv_dir / "hosts.yaml")
    assert words in info.value.message and "hosts.yaml" in info.value.message


def test_round_robin_and_explicit_placement() -> None:
    nodes = [f"n{i}" for i in range(1, 6)]
    assert place(nodes, ["a", "b"], None) == {"n1": "a", "n2": "b", "n3": "a", "n4": "b", "n5": "a"}
    assert place(nodes, ["a", "b"], "n1,n2@b; n3,n4,n5@a") == {"n1": "b", "n2": "b", "n3": "a", "n4": "a", "n5": "a"}


def test_a_placement_written_back_gives_the_same_placement() -> None:
    nodes = [f"n{i}" for i in range(1, 6)]
    where = place(nodes, ["a", "b", "c"], None)
    assert placement_text(where) == "n1,n4@a;n2,n5@b;n3@c"
    assert place(nodes, ["a", "b", "c"], placement_text(where)) == where


@pytest.mark.parametrize("spec, words", [
    ("n1,n2@a", "leaves node(s) n3 without a host"),
    ("n1,n2,n3@c", "host 'c', not in the inventory"),
    ("n1,n2@a;n2,n3@b", "puts node n2 on both a and b"),
    ("n1,n2,n3,n9@a", "names node 'n9'"),
    ("n1 n2 n3", "must read 'n1,n2@host'"),
])
def test_a_bad_placement_says_what_is_wrong(spec: str, words: str) -> None:
    with pytest.raises(UsageError) as info:
        place(["n1", "n2", "n3"], ["a", "b"], spec)
    assert words in info.value.message


def test_the_data_network_plan_gives_distinct_addresses_in_one_subnet_and_short_interface_names() -> None:
    nodes = [f"n{i}" for i in range(1, 191)]
    plan = datanet.plan("261124-030000-abcd", ["h1", "h2", "h3"], nodes)
    net = ipaddress.ip_network(plan.subnet)
    addresses = list(plan.gateways.values()) + list(plan.node_ips.values())
    assert len(set(addresses)) == len(addresses) == 3 + 190
    assert all(ipaddress.ip_address(a) in net and a != str(net.broadcast_address) for a in addresses)
    assert len(plan.bridge) <= 15 and len(plan.vxlan) <= 15 and 0 < plan.vni < 2**24
    assert datanet.plan("261124-030000-abcd", ["h1", "h2", "h3"], nodes) == plan  # the run id decides
    with pytest.raises(UsageError):
        datanet.plan("r", ["h1"], [f"n{i}" for i in range(1, 192)])


def test_the_create_script_joins_every_peer_for_flooding() -> None:
    plan = datanet.plan("run-x", ["h1", "h2", "h3"], ["n1", "n2", "n3"])
    script = datanet.create_script(plan, "h2", "192.0.2.2", ["192.0.2.1", "192.0.2.3"])
    assert "local 192.0.2.2" in script and "--internal" in script
    assert script.count("bridge fdb append 00:00:00:00:00:00") == 2 and "dst 192.0.2.3" in script
