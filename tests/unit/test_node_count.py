"""One limit on a cluster's size (node.config.MAX_NODES, bound by the view's one-byte member count on the
wire): the scenario loader, `splitlab up` and the node itself take MAX_NODES nodes and refuse one more with the
same message."""
from __future__ import annotations

import pytest

from chaos.cli.main import main
from chaos.cluster import lifecycle
from chaos.harness.errors import ScenarioError
from chaos.harness.load import load_text
from node import wire
from node.config import MAX_NODES, from_env
from node.errors import ConfigError

SCENARIO = "name: big\ncluster:\n  nodes: {count}\nsteps:\n  - at_s: 0\n    heal:\n"
REFUSAL = f"expected a whole number of nodes from 1 to {MAX_NODES}, got {MAX_NODES + 1}"


def test_the_limit_is_what_a_view_can_carry():
    members = tuple(f"n{i}" for i in range(1, MAX_NODES + 1))
    view = wire.ViewMsg("n1", 7, False, members)
    assert wire.ViewMsg.decode_body(view.encode_body()) == view
    with pytest.raises(ValueError):
        wire.ViewMsg("n1", 7, False, members + (f"n{MAX_NODES + 1}",)).encode_body()


def test_the_scenario_loader_takes_max_nodes_and_refuses_one_more():
    assert len(load_text(SCENARIO.format(count=MAX_NODES), "big.yaml").scenario.node_names) == MAX_NODES
    with pytest.raises(ScenarioError) as info:
        load_text(SCENARIO.format(count=MAX_NODES + 1), "big.yaml")
    assert [str(p) for p in info.value.problems] == [f"big.yaml:3: cluster.nodes: {REFUSAL}"]


def test_splitlab_up_refuses_one_more_with_the_same_message(capsys, monkeypatch):
    def no_docker():
        raise AssertionError("splitlab up reached Docker with too many nodes")

    monkeypatch.setattr(lifecycle, "docker_client", no_docker)  # refused before Docker is asked anything
    assert main(["up", "-n", str(MAX_NODES + 1)]) == 2
    assert capsys.readouterr().err.splitlines()[0].endswith(f": -n: {REFUSAL}")


def test_a_node_refuses_more_members_than_a_view_carries():
    env = {"SPLITLAB_NODE": "n1", "SPLITLAB_RUN": "r1", "SPLITLAB_TOKEN": "t"}
    members = ",".join(f"n{i}" for i in range(1, MAX_NODES + 2))
    with pytest.raises(ConfigError, match=f"SPLITLAB_MEMBERS: {REFUSAL}"):
        from_env({**env, "SPLITLAB_MEMBERS": members})
    assert len(from_env({**env, "SPLITLAB_MEMBERS": members.rpartition(",")[0]}).members) == MAX_NODES
