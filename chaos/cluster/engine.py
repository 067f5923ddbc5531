"""Start a run's compose document (`chaos.cluster.compose.render`) through the engine's API: its networks, then
every container at once (created, joined to its second network, started). A multi-host run starts each host's
nodes the same way (`start_containers`, through the host's engine over SSH: chaos.hosts.multi).

The document stays the one description of a cluster: it is written into the run directory, and what is created
here carries the labels Docker Compose gives its own (project, service, network), so `docker-compose -p <project>
-f <run dir>/docker-compose.yml ps` or `logs` still see the run. Compose itself (v1 here, a Python program) took
1.1 s to start two nodes, 0.35 s of it before doing anything; the API takes 0.7 to 0.9 s.

Only the keys `render` writes are understood; any other key raises `ValueError` (a key added to the document
must be added here too, and a unit test renders every variant of the document through `container_spec`).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

import docker
from docker.types import IPAMConfig, IPAMPool

from node.errors import EnvironmentProblem

COMPOSE_VERSION = "1.29.2"  # what the labels say made the run (compose's own labels carry its version)
_SERVICE_KEYS = {"image", "container_name", "hostname", "labels", "environment", "volumes", "networks", "user",
                 "cap_drop", "security_opt", "stop_grace_period"}
_NETWORK_KEYS = {"driver", "labels", "enable_ipv6", "ipam"}
_ENDPOINT_KEYS = {"aliases", "ipv6_address"}
T = TypeVar("T")
NETWORK_SETTLE_S = 5.0  # how long a network's last endpoints may take to go after their containers
NETWORK_RETRY_S = 0.2
MAX_THREADS = 32  # engine requests in flight at once (the engine serialises much of a container's start anyway)


@dataclass(frozen=True)
class Endpoint:
    """A container's place on one network: the engine's network name, its aliases there, pinned addresses."""

    network: str
    aliases: list[str]
    ipv4_address: str | None = None
    ipv6_address: str | None = None


@dataclass
class ContainerSpec:
    """One container as API arguments: `create` for `create_container` (without the networking config), `host`
    for `create_host_config`, `networks` in the order it joins them (the first at creation)."""

    name: str
    create: dict[str, Any]
    host: dict[str, Any]
    networks: list[Endpoint] = field(default_factory=list)


def network_name(project: str, key: str) -> str:
    """The engine's name of the document's network `key`, as Compose names it."""
    return f"{project}_{key}"


def _unknown(where: str, keys: set[str], known: set[str]) -> None:
    extra = keys - known
    if extra:
        raise ValueError(f"{where}: compose key(s) {', '.join(sorted(extra))} are not handled by chaos.cluster.engine")


def _seconds(value: str) -> int:
    """Compose's `10s` as 10."""
    if not value.endswith("s") or not value[:-1].isdigit():
        raise ValueError(f"stop_grace_period {value!r}: only whole seconds ('10s') are handled")
    return int(value[:-1])


def container_spec(project: str, service: str, svc: dict[str, Any]) -> ContainerSpec:
    """The API arguments of the document's service `service`. Raises ValueError for a key it does not handle."""
    _unknown(f"service {service}", set(svc), _SERVICE_KEYS)
    labels = {**svc["labels"], "com.docker.compose.project": project, "com.docker.compose.service": service,
              "com.docker.compose.oneoff": "False", "com.docker.compose.container-number": "1",
              "com.docker.compose.version": COMPOSE_VERSION}
    create = {"image": svc["image"], "name": svc["container_name"], "hostname": svc["hostname"], "labels": labels,
              "environment": svc["environment"], "user": svc["user"],
              "stop_timeout": _seconds(svc["stop_grace_period"])}
    host = {"binds": list(svc["volumes"]), "cap_drop": list(svc["cap_drop"]),
            "security_opt": list(svc["security_opt"])}
    spec = ContainerSpec(service, create, host)
    for key, endpoint in svc["networks"].items():
        _unknown(f"service {service}, network {key}", set(endpoint), _ENDPOINT_KEYS)
        # Compose also names the container by its service on every network it joins
        spec.networks.append(Endpoint(network_name(project, key), [service, *endpoint.get("aliases", [])],
                                      ipv6_address=endpoint.get("ipv6_address")))
    return spec


def _create_network(client: docker.DockerClient, project: str, key: str, net: dict[str, Any]) -> Any:
    _unknown(f"network {key}", set(net), _NETWORK_KEYS)
    labels = {**net.get("labels", {}), "com.docker.compose.project": project, "com.docker.compose.network": key,
              "com.docker.compose.version": COMPOSE_VERSION}
    ipam = None
    if "ipam" in net:
        ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=c["subnet"]) for c in net["ipam"]["config"]])
    # check_duplicate: at the API version the client speaks the engine would make a second network of the name
    return client.networks.create(network_name(project, key), driver=net.get("driver", "bridge"), labels=labels,
                                  enable_ipv6=bool(net.get("enable_ipv6", False)), ipam=ipam, check_duplicate=True)


def _start_container(client: docker.DockerClient, spec: ContainerSpec) -> None:
    api = client.api
    first, *others = spec.networks
    endpoint = api.create_endpoint_config(aliases=first.aliases, ipv4_address=first.ipv4_address,
                                          ipv6_address=first.ipv6_address)
    created = api.create_container(**spec.create, host_config=api.create_host_config(**spec.host),
                                   networking_config=api.create_networking_config({first.network: endpoint}))
    for more in others:
        api.connect_container_to_network(created["Id"], more.network, aliases=more.aliases,
                                         ipv4_address=more.ipv4_address, ipv6_address=more.ipv6_address)
    api.start(created["Id"])


def start_containers(client: docker.DockerClient, specs: Sequence[ContainerSpec]) -> None:
    """Create, connect and start every container of `specs` at once (their networks exist). Raises what the
    engine raises for the first that failed, after every other one finished."""
    at_once(specs, lambda spec: _start_container(client, spec))


def at_once(items: Sequence[T], action: Callable[[T], Any]) -> None:
    """`action` on every item at once, one thread each up to `MAX_THREADS` (the engine works on containers in
    parallel). Raises the first item's error after every other call finished."""
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_THREADS, len(items))), thread_name_prefix="engine") as pool:
        for done in [pool.submit(action, item) for item in items]:
            done.result()


def remove_network(net: Any, settle_s: float = NETWORK_SETTLE_S, sleep: Callable[[float], None] = time.sleep) -> None:
    """Remove network `net` (a docker SDK `Network`) once its containers are gone. The engine may refuse while it
    still counts an endpoint of a removed container ("has active endpoints"): the removal is tried again for at
    most `settle_s`. An engine that still refuses keeps a stale endpoint that no container holds (Docker 20.10
    loses count when many containers of a network exit at once: 1 in 3 downs of 100 nodes here when they did,
    which is why a run's nodes now exit one at a time; `docker network inspect` lists none, only a daemon restart
    clears it; DESIGN.md, "Stopping a run"): EnvironmentProblem says so. A network already gone is fine; another
    refusal is raised as the engine's error."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            net.remove()
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as exc:
            if "active endpoints" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise EnvironmentProblem(
                    f"the Docker engine still counts an endpoint on network {net.name} although no container of "
                    f"it is left ({settle_s:g} s after its containers were removed): a fault of the engine",
                    hint="restart the Docker daemon (e.g. 'service docker restart'), then 'splitlab down --all'"
                ) from None
        sleep(NETWORK_RETRY_S)


def start(client: docker.DockerClient, project: str, document: dict[str, Any]) -> None:
    """Create the document's networks and start its containers, all at once. Raises what the engine raises
    (`docker.errors.APIError`, ...) for the first that failed, after every other one finished; the caller removes
    what was made (everything carries the run's label)."""
    specs = [container_spec(project, name, svc) for name, svc in document["services"].items()]
    at_once(list(document.get("networks", {}).items()), lambda net: _create_network(client, project, *net))
    start_containers(client, specs)
