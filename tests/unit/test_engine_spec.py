"""A run's compose document as the engine API's arguments (chaos.cluster.engine): every key `render` writes, for
IPv4 and dual-stack runs with per-node environments, becomes an argument; Compose's own labels are added so
compose still sees the run; a key the engine does not handle is refused by name instead of being dropped. (Every
container test starts its cluster through `engine.start`.) A network whose endpoints linger after their containers
are gone is still removed."""
from __future__ import annotations

import time

import docker
import pytest

from chaos.cluster import compose, engine
from chaos.cluster.naming import LABEL_NODE, LABEL_RUN
from node.errors import EnvironmentProblem

RUN = "261125-000000-abcd"
PROJECT = f"splitlab-{RUN}"


def _document(ipv6: bool) -> dict:
    return compose.render(RUN, ["n1", "n2", "n3"], "splitlab-node:x", "/runs/x", "tok",
                          {"n2": {"SPLITLAB_BUNDLE_MAX_BYTES": "0"}}, ipv6=ipv6)


@pytest.mark.parametrize("ipv6", [False, True])
def test_every_service_becomes_create_arguments_with_composes_labels(ipv6: bool) -> None:
    document = _document(ipv6)
    for name, svc in document["services"].items():
        spec = engine.container_spec(PROJECT, name, svc)
        create = spec.create
        assert (create["image"], create["name"], create["hostname"], create["user"]) == \
            ("splitlab-node:x", svc["container_name"], name, svc["user"])
        assert create["environment"] == svc["environment"] and create["stop_timeout"] == compose.STOP_GRACE_S
        labels = create["labels"]
        assert labels[LABEL_RUN] == RUN and labels[LABEL_NODE] == name
        assert labels["com.docker.compose.project"] == PROJECT and labels["com.docker.compose.service"] == name
        assert spec.host == {"binds": ["/runs/x:" + compose.RUN_MOUNT], "cap_drop": ["ALL"],
                             "security_opt": ["no-new-privileges:true"]}
        by_key = {e.network.removeprefix(f"{PROJECT}_"): (e.aliases, e.ipv6_address) for e in spec.networks}
        assert [e.network for e in spec.networks] == [engine.network_name(PROJECT, k) for k in ("data", "control")]
        assert all(e.ipv4_address is None for e in spec.networks)
        assert by_key["data"][0] == [name, f"{name}-data"] and by_key["control"] == ([name, f"{name}-control"], None)
        assert (by_key["data"][1] is not None) == ipv6
        if ipv6:
            assert by_key["data"][1] == svc["networks"]["data"]["ipv6_address"]
    assert engine.container_spec(PROJECT, "n2", document["services"]["n2"]).create["environment"][
        "SPLITLAB_BUNDLE_MAX_BYTES"] == "0"


def test_a_key_the_engine_does_not_handle_is_refused_by_name() -> None:
    svc = _document(False)["services"]["n1"]
    with pytest.raises(ValueError, match="cpu_shares"):
        engine.container_spec(PROJECT, "n1", {**svc, "cpu_shares": 256})
    with pytest.raises(ValueError, match="priority"):
        engine.container_spec(PROJECT, "n1", {**svc, "networks": {"data": {"aliases": [], "priority": 1}}})
    with pytest.raises(ValueError, match="internal"):
        engine._create_network(None, PROJECT, "data", {"driver": "bridge", "internal": True})
    with pytest.raises(ValueError, match="whole seconds"):
        engine.container_spec(PROJECT, "n1", {**svc, "stop_grace_period": "1m30s"})


def test_networks_are_named_as_compose_names_them() -> None:
    assert engine.network_name(PROJECT, "data") == f"{PROJECT}_data"


class _Network:
    """A docker SDK network whose removal the engine refuses `refusals` times with `error`."""

    def __init__(self, refusals: int, error: str = "error while removing network: network x has active endpoints"):
        self.refusals, self.error = refusals, error
        self.calls: list[str] = []
        self.name = "splitlab-r_control"

    def remove(self) -> None:
        self.calls.append("remove")
        if self.refusals:
            self.refusals -= 1
            raise docker.errors.APIError(self.error)


def test_a_network_whose_endpoints_linger_is_removed_once_the_engine_lets_them_go():
    net = _Network(refusals=2)
    engine.remove_network(net, sleep=lambda s: None)
    assert net.calls == ["remove", "remove", "remove"]


def test_a_network_removal_gives_up_after_the_settle_time_and_other_errors_at_once():
    net = _Network(refusals=1000)
    with pytest.raises(EnvironmentProblem, match="still counts an endpoint on network splitlab-r_control") as info:
        engine.remove_network(net, settle_s=0.05, sleep=lambda s: time.sleep(0.01))
    assert "restart the Docker daemon" in info.value.hint
    other = _Network(refusals=1, error="conflict: something else")
    with pytest.raises(docker.errors.APIError, match="something else"):
        engine.remove_network(other, sleep=lambda s: None)
    assert other.calls == ["remove"]
