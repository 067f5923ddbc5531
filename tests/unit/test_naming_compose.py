"""Run ids, node names and the compose definition (the repository's file is the rendered template)."""
from pathlib import Path

import pytest
import yaml

from chaos.cluster import compose
from chaos.cluster.naming import check_run_id, new_run_id, node_names
from chaos.net import iptables
from node.config import MAX_NODES
from node.errors import UsageError

REPO = Path(__file__).resolve().parents[2]


def test_run_ids_are_valid_unique_and_fit_a_chain_name():
    ids = {new_run_id(0) for _ in range(50)}
    assert len(ids) > 40  # random suffix
    for run_id in ids:
        assert check_run_id(run_id) == run_id
        assert run_id.startswith("700101-000000-")
        for kind in (iptables.PARTITION, iptables.STATLOSS, iptables.QUEUE):
            assert len(kind.name(run_id)) <= 28  # raises UsageError beyond


@pytest.mark.parametrize("bad", ["", "ab", "UPPER-case", "x" * 25, "a b c", "-abc"])
def test_bad_run_ids(bad):
    with pytest.raises(UsageError):
        check_run_id(bad)


@pytest.mark.parametrize("count", [0, -1, MAX_NODES + 1, "3", True])
def test_node_count_bounds(count):
    with pytest.raises(UsageError) as info:
        node_names(count)
    assert str(info.value) == f"-n: expected a whole number of nodes from 1 to {MAX_NODES}, got {count!r}"


def test_node_names_are_readable():
    assert node_names(1) == ["n1"]
    assert node_names(5) == ["n1", "n2", "n3", "n4", "n5"]


def test_repository_compose_file_is_the_rendered_template():
    text = (REPO / "docker-compose.yml").read_text()
    assert yaml.safe_load(text) == compose.render_template(3)


def test_rendered_run_is_labelled_unprivileged_and_on_two_networks():
    doc = compose.render("r-abc", node_names(5), "img:1", "/runs/r-abc", "tok", {"n2": {"SPLITLAB_X": "1"}})
    assert set(doc["services"]) == {"n1", "n2", "n3", "n4", "n5"}
    for name, svc in doc["services"].items():
        assert svc["labels"]["splitlab.run"] == "r-abc"
        assert svc["container_name"] == f"splitlab-r-abc-{name}"
        assert svc["cap_drop"] == ["ALL"] and svc["user"] == "10001:10001"
        assert svc["networks"]["data"]["aliases"] == [f"{name}-data"]
        assert svc["networks"]["control"]["aliases"] == [f"{name}-control"]
        assert svc["environment"]["SPLITLAB_MEMBERS"] == "n1,n2,n3,n4,n5"
        assert "privileged" not in svc and "cap_add" not in svc
    assert doc["services"]["n2"]["environment"]["SPLITLAB_X"] == "1"
    assert all(net["labels"]["splitlab.run"] == "r-abc" for net in doc["networks"].values())
