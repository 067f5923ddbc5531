"""How a multi-host run's nodes start on a host (`chaos.hosts.multi`): each node's container as the engine API's
arguments (control network with the published control port first, then the data network at the planned address,
every member's address in its environment), and `engine.start_containers` starting them all at once, the
engine's refusal of one raised after every other one started. The API calls go to a recording client here; the
multi-host tests (tests/cluster/test_multihost.py) start real nodes on the bed's engines through SSH."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import docker
import pytest

from chaos.cluster import compose, engine
from chaos.cluster.naming import LABEL_NODE, LABEL_RUN
from chaos.hosts import datanet, multi
from node.config import CONTROL_PORT, DATA_PORT

NODES = ["n1", "n2", "n3", "n4"]
PLAN = datanet.plan("r1", ["h1", "h2"], NODES)


def spec(node: str) -> engine.ContainerSpec:
    return multi._node_spec("r1", node, NODES, PLAN, "img:1", "tok", "10.0.0.1", Path("/runs/r1"), "h1",
                            {"SPLITLAB_BUNDLE_MAX_BYTES": "0"} if node == "n2" else {})


def test_a_nodes_container_joins_control_then_data_at_its_planned_address_with_every_members_address():
    s = spec("n2")
    assert (s.create["image"], s.create["name"], s.create["hostname"]) == ("img:1", "splitlab-r1-n2", "n2")
    assert s.create["labels"] == {LABEL_RUN: "r1", LABEL_NODE: "n2", multi.LABEL_HOST: "h1",
                                  multi.LABEL_DIR: "/runs/r1"}
    env = s.create["environment"]
    assert env["SPLITLAB_ADDRESSES"] == ",".join(f"{n}={PLAN.node_ips[n]}:{DATA_PORT}" for n in NODES)
    assert env["SPLITLAB_MEMBERS"] == ",".join(NODES) and env["SPLITLAB_BUNDLE_MAX_BYTES"] == "0"
    assert "SPLITLAB_BUNDLE_MAX_BYTES" not in spec("n1").create["environment"]
    assert s.create["user"] == f"{compose.NODE_UID}:{compose.NODE_UID}" and s.create["ports"] == [CONTROL_PORT]
    assert s.host["port_bindings"] == {CONTROL_PORT: ("10.0.0.1",)}
    assert s.host["binds"] == [f"{multi.remote_dir('r1')}:{compose.RUN_MOUNT}"] and s.host["cap_drop"] == ["ALL"]
    assert s.networks == [engine.Endpoint(PLAN.control_network, ["n2-control"]),
                          engine.Endpoint(PLAN.data_network, ["n2-data"], ipv4_address=PLAN.node_ips["n2"])]


class RecordingAPI(docker.APIClient):
    """The SDK's API client (its argument builders are the real ones) with the three calls that would reach an
    engine recorded instead, each taking `delay_s`; `refuse` is a container whose start the engine refuses."""

    def __init__(self, delay_s: float, refuse: str | None) -> None:
        super().__init__(base_url="tcp://engine.invalid:2375", version="1.41")
        self.delay_s, self.refuse = delay_s, refuse
        self.calls: list[tuple[str, str, float]] = []
        self.lock = threading.Lock()

    def _record(self, what: str, name: str) -> None:
        time.sleep(self.delay_s)
        with self.lock:
            self.calls.append((what, name, time.monotonic()))

    def create_container(self, image, **kwargs):
        network, = kwargs["networking_config"]["EndpointsConfig"]
        self._record(f"create on {network}", kwargs["name"])
        return {"Id": kwargs["name"]}

    def connect_container_to_network(self, container, net_id, **kwargs):
        self._record(f"connect {kwargs['ipv4_address']}", container)

    def start(self, container, *args, **kwargs):
        self._record("start", container)
        if container == self.refuse:
            raise docker.errors.APIError(f"refused {container}")


def test_every_node_is_created_connected_and_started_at_once():
    api = RecordingAPI(delay_s=0.3, refuse=None)
    engine.start_containers(SimpleNamespace(api=api), [spec(n) for n in NODES])
    by_node = {n: [what for what, name, _ in api.calls if name == f"splitlab-r1-{n}"] for n in NODES}
    assert by_node == {n: [f"create on {PLAN.control_network}", f"connect {PLAN.node_ips[n]}", "start"]
                       for n in NODES}
    times = sorted(t for *_, t in api.calls)
    assert times[-1] - times[0] < 2.0, "12 calls of 0.3 s took 3.6 s one after the other"


def test_the_engines_refusal_of_one_node_is_raised_after_every_other_node_started():
    api = RecordingAPI(delay_s=0.0, refuse="splitlab-r1-n2")
    with pytest.raises(docker.errors.APIError, match="refused splitlab-r1-n2"):
        engine.start_containers(SimpleNamespace(api=api), [spec(n) for n in NODES])
    assert sorted(name for what, name, _ in api.calls if what == "start") == [f"splitlab-r1-{n}" for n in NODES]
