"""Cluster lifecycle on Docker: `up` a run of N nodes, wait until all hear all, `stop` or `down` it, list runs.

A run owns: the compose project `splitlab-<run>`, its containers and its two networks (all labelled
`splitlab.run=<run>`), and the directory `runs/<run>/` (history, compose file, run.json, the control token and,
on the authenticated wire, the key: chaos.cluster.authkey). `up` writes the compose
file and starts it through the engine's API (`chaos.cluster.engine`); `stop` and `down` act on the labelled
containers and networks the same way, every container at once. `down` removes the containers and networks and
keeps the directory. Whatever fails during `up` removes what it started.
"""
from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import docker
import docker.errors

from chaos.cluster import authkey, compose, engine, images, kinds, neighbours, scaling
from chaos.cluster.naming import LABEL_NODE, LABEL_RUN, check_run_id, container_name, new_run_id, node_names, project_name
from chaos.host.netns import Netns, target
from chaos.cluster.model import Cluster, NodeInfo
from chaos.hosts import multi
from chaos.hosts.inventory import Inventory
from chaos.hosts.remote import RemoteHost
from node.errors import EnvironmentProblem, SplitlabError, UsageError

LABEL_DIR = "splitlab.dir"
ENGINE_URL_POOLS = 100_000  # see docker_client
READY_POLL_S = 0.05  # nodes hear each other within a heartbeat (250 ms) of starting: a poll adds at most this
# how long one view of all must hold before a kind that is ready on its view is ready: JGroups members that started
# as singletons merge, and multicasts sent 0.1 s after the merged view were once not delivered (node check, loaded)
VIEW_HOLD_S = 1.0
EXIT_LOOK_S = 1.0  # how often a starting run's containers are looked at for one that exited
Log = Callable[[str], None]


def run_containers(client: Any, run_id: str | None) -> list[Any]:
    """The containers of `run_id` (None: of every run), stopped ones too. One removed while they are listed
    (another run's teardown, a node restarting) is left out instead of failing the listing."""
    label = LABEL_RUN if run_id is None else f"{LABEL_RUN}={run_id}"
    return client.containers.list(all=True, filters={"label": label}, ignore_removed=True)


def _quiet(_: str) -> None:
    pass


def docker_client() -> docker.DockerClient:
    """A Docker SDK client of the engine `DOCKER_HOST` names (default: the local socket) that threads may share;
    raises `EnvironmentProblem` when the engine does not answer.

    docker-py keeps a connection pool per request URL in an LRU of 25 and closes the least recently used one even
    while another thread is still reading from it: 50 containers started at once (`engine.at_once`) crashed in
    urllib3 ("'NoneType' object has no attribute 'qsize'"). `ENGINE_URL_POOLS` keeps every pool of a run open.
    """
    try:
        client = docker.DockerClient(timeout=60, num_pools=ENGINE_URL_POOLS, max_pool_size=engine.MAX_THREADS,
                                     **docker.utils.kwargs_from_env())
        client.ping()
        return client
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"Docker engine not reachable: {exc}",
                                 hint="start it (systemctl start docker / service docker start) and check "
                                      "DOCKER_HOST") from None


def runs_root() -> Path:
    """Where run directories go: $SPLITLAB_RUNS_DIR, else ./runs."""
    return Path(os.environ.get("SPLITLAB_RUNS_DIR", "runs")).resolve()


def _node_infos(client: docker.DockerClient, run_id: str) -> list[NodeInfo]:
    infos = []
    project = project_name(run_id)
    for ctr in run_containers(client, run_id):
        nets = ctr.attrs["NetworkSettings"]["Networks"]
        data = nets.get(f"{project}_data", {})
        control = nets.get(f"{project}_control", {}).get("IPAddress", "")
        infos.append(NodeInfo(ctr.labels.get(LABEL_NODE, ctr.name), ctr.name, data.get("IPAddress", ""), control,
                              int(ctr.attrs["State"].get("Pid") or 0), data_ip6=_data_ip6(data)))
    return sorted(infos, key=lambda n: (len(n.name), n.name))


def _data_ip6(endpoint: Mapping[str, Any]) -> str:
    """A node's IPv6 data address from its data-network endpoint: the pinned one (`--ipv6`), else ""; a stopped
    container has no `GlobalIPv6Address` but keeps its pinned address in `IPAMConfig`."""
    return endpoint.get("GlobalIPv6Address") or (endpoint.get("IPAMConfig") or {}).get("IPv6Address") or ""


def _prepare_run_dir(run_dir: Path) -> None:
    events = run_dir / "events"
    events.mkdir(parents=True, exist_ok=False)
    # The node runs as an unprivileged user and appends its history into this bind mount.
    if os.geteuid() == 0:
        os.chown(events, compose.NODE_UID, compose.NODE_UID)
    else:
        events.chmod(0o777)


def _built_image(kind: str, image: str | None) -> str:
    """The image a run of `kind` uses: `image` if given (it must exist), else the kind's. Raises
    `EnvironmentProblem` when it is not built, `UsageError` for an unknown kind."""
    if image is None:
        return kinds.kind(kind).built_image()
    kinds.kind(kind)
    if not images.image_exists(image):
        raise EnvironmentProblem(f"image {image} does not exist on this engine", hint="see 'docker images'")
    return image


def _new_run_dir(runs_dir: Path | None, run_id: str) -> tuple[Path, str]:
    """A new run directory (with its events/ the nodes write to) and a fresh control token. Raises `UsageError`
    when the directory exists."""
    run_dir = (runs_dir or runs_root()) / run_id
    if run_dir.exists():
        raise UsageError(f"run directory {run_dir} already exists", hint="choose another run id")
    _prepare_run_dir(run_dir)
    return run_dir, secrets.token_hex(16)


def _write_run_files(run_dir: Path, token: str, meta: dict[str, Any], names: list[str], auth: bool,
                     node_env: dict[str, dict[str, str]] | None) -> dict[str, dict[str, str]] | None:
    """`run.json` (what started the run, and when), the control token and, with `auth`, the run's key, both
    readable by their owner only. Returns the nodes' environments (with the key when `auth`)."""
    (run_dir / "run.json").write_text(json.dumps({**meta, "auth": auth, "created_s": time.time()}, indent=2))
    token_file = run_dir / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    return authkey.with_key(node_env, names, authkey.create(run_dir)) if auth else node_env


def up(count: int, *, log: Log = _quiet, wait_timeout_s: float = 60, node_env: dict[str, dict[str, str]] | None = None,
       runs_dir: Path | None = None, run_id: str | None = None, inventory: Inventory | None = None,
       placement: str | None = None, ipv6: bool = False, kind: str = kinds.DEFAULT_KIND,
       image: str | None = None, auth: bool = False) -> Cluster:
    """Start a run of `count` nodes and wait until every node hears every other one: on this machine's engine,
    or over the hosts of `inventory` (placed round-robin or by `placement`, see `chaos.hosts.multi`). `ipv6`: a
    dual-stack data network over which the nodes talk IPv6 (chaos.cluster.datanet6; this machine only). `kind`:
    the node implementation (chaos.cluster.kinds; `image` another image of that contract, e.g. for
    `splitlab node check`). `auth`: the authenticated wire, with a fresh key for the run (chaos.cluster.authkey).

    Raises `UsageError` for bad input, `EnvironmentProblem` when Docker, compose or the images are missing or
    the nodes do not come up (with the logs of the nodes that did not); nothing half-started is left behind.
    """
    names = node_names(count)
    if inventory is not None and ipv6:
        raise UsageError("--ipv6 is not supported with --inventory yet (the VXLAN data network is IPv4)")
    if kind != kinds.DEFAULT_KIND and (inventory is not None or ipv6):
        raise UsageError(f"node kind {kind!r} runs on this machine's engine over IPv4 only, for now",
                         hint="drop --inventory / --ipv6, or use the splitlab kind")
    if auth and (refused := kinds.auth_refusal(kind)):
        raise UsageError(f"--auth: {refused}")
    neighbours.ensure(count, log, ("ipv4", "ipv6") if ipv6 else ("ipv4",))
    if kind == kinds.DEFAULT_KIND and (timing := scaling.detector_env(count)):
        node_env = scaling.with_detector_timing(node_env, names)
        log(f"{count} nodes: " + ", ".join(f"{k.removeprefix('SPLITLAB_').lower()}={v}" for k, v in timing.items())
            + " (chaos.cluster.scaling), where a node's environment does not set them")
    if inventory is not None:
        return _up_multi(inventory, names, log, wait_timeout_s, node_env, runs_dir, run_id, placement, auth)
    if placement:
        raise UsageError("--placement needs --inventory")
    client = docker_client()
    image = _built_image(kind, image)
    run_id = check_run_id(run_id) if run_id else new_run_id()
    clash = [c.name for c in run_containers(client, run_id)]
    clash += [n for n in (container_name(run_id, x) for x in names) if _container_exists(client, n)]
    if clash:
        raise UsageError(f"run {run_id} already has containers: {', '.join(sorted(set(clash)))}",
                         hint="choose another run id or 'splitlab down --run-id " + run_id + "'")
    run_dir, token = _new_run_dir(runs_dir, run_id)
    compose_file = run_dir / "docker-compose.yml"
    node_env = _write_run_files(run_dir, token, {"run_id": run_id, "nodes": names, "image": image, "kind": kind,
                                                 "compose_file": str(compose_file), "ipv6": ipv6},
                                names, auth, node_env)
    document = compose.render(run_id, names, image, str(run_dir), token, node_env, ipv6=ipv6)
    for svc in document["services"].values():
        svc["labels"][LABEL_DIR] = str(run_dir)
    compose_file.write_text(compose.dump(document))
    compose_file.chmod(0o600)  # it holds the token and the key in the nodes' environment
    log(f"run {run_id}: starting {count} {kind} node(s) from {image}" + (" on a dual-stack data network, over IPv6"
                                                                  if ipv6 else "")
        + (f", authenticated wire (key in {run_dir / authkey.KEY_FILE})" if auth else ""))
    try:
        try:
            engine.start(client, project_name(run_id), document)
        except docker.errors.DockerException as exc:
            raise EnvironmentProblem(f"run {run_id}: the Docker engine refused to start it: {exc}",
                                     hint=f"the run's compose file is {compose_file}; 'splitlab doctor' checks the "
                                          f"machine") from None
        cluster = Cluster(run_id, run_dir, token, _node_infos(client, run_id))
        _wait_all_hear(client, cluster, wait_timeout_s, log, kinds.kind(kind).ready_on_view)
    except BaseException:
        log(f"run {run_id}: start failed, removing what was started")
        _remove(client, run_id)
        raise
    log(f"run {run_id}: all {count} node(s) hear each other")
    return cluster


def _up_multi(inventory: Inventory, names: list[str], log: Log, wait_timeout_s: float,
              node_env: dict[str, dict[str, str]] | None, runs_dir: Path | None, run_id: str | None,
              placement: str | None, auth: bool) -> Cluster:
    image = _built_image(kinds.DEFAULT_KIND, None)
    run_id = check_run_id(run_id) if run_id else new_run_id()
    run_dir, token = _new_run_dir(runs_dir, run_id)
    node_env = _write_run_files(run_dir, token, {"run_id": run_id, "nodes": names, "image": image,
                                                 "inventory": str(inventory.path)}, names, auth, node_env)
    agent = images.build_agent(log)  # faults on the hosts run the shaper from it
    log(f"run {run_id}: starting {len(names)} node(s) from {image} on {len(inventory.hosts)} host(s)")
    cluster = multi.up(inventory, names, run_id, run_dir, token, image, agent, placement=placement, log=log,
                       node_env=node_env, wait=lambda c: _wait_all_hear(None, c, wait_timeout_s, log))
    log(f"run {run_id}: all {len(names)} node(s) hear each other")
    return cluster


def _container_exists(client: docker.DockerClient, name: str) -> bool:
    try:
        client.containers.get(name)
        return True
    except docker.errors.NotFound:
        return False


def _wait_all_hear(client: docker.DockerClient | None, cluster: Cluster, timeout_s: float, log: Log,
                   one_view: bool = False) -> None:
    """Wait until every node hears every other one; `one_view`: and every node holds one view of all of them, the
    same for `VIEW_HOLD_S` (a kind whose members hear each other's discovery before they joined, as JGroups' do)."""
    names = set(cluster.names)
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] = {}
    views: dict[str, Any] = {}
    heard = False
    held: tuple[str, float] | None = None  # the one view of all, and since when it is seen
    next_look = time.monotonic() + EXIT_LOOK_S
    while time.monotonic() < deadline:
        if client is not None and time.monotonic() > next_look:
            _no_exited_node(client, cluster)
            next_look = time.monotonic() + EXIT_LOOK_S
        for info in cluster.nodes:
            try:
                state = cluster.client(info.name).state()
                last[info.name] = {peer for peer, rec in state["layers"]["liveness"].items() if rec["heard"]}
                views[info.name] = state.get("view")
            except EnvironmentProblem as exc:
                last[info.name] = exc
        heard = all(isinstance(h, set) and h == names - {n} for n, h in last.items())
        seen = {str(v) for v in views.values()}
        viewed = not one_view or (len(seen) == 1 and all(
            v is not None and set(v["members"]) == names for v in views.values()))
        if one_view and viewed:
            view = seen.pop()
            held = held if held is not None and held[0] == view else (view, time.monotonic())
            viewed = time.monotonic() - held[1] >= VIEW_HOLD_S
        if heard and viewed:
            return
        time.sleep(READY_POLL_S)
    if heard:
        raise EnvironmentProblem(f"run {cluster.run_id}: the nodes hear each other but hold no one view of all "
                                 f"within {timeout_s:g} s: {views}", hint="check the node logs ('docker logs')")
    lagging = [n for n, h in last.items() if not (isinstance(h, set) and h == names - {n})]
    logs = []
    for node in lagging:
        if client is None:  # a multi-host run: the logs stay on the hosts
            info = cluster.node(node)
            logs.append(f"--- {node} on {info.host}: {last[node]}  (docker logs {info.container} there)")
            continue
        try:
            text = client.containers.get(container_name(cluster.run_id, node)).logs(tail=30).decode(errors="replace")
        except docker.errors.DockerException as exc:
            text = f"(no logs: {exc})"
        detail = last[node] if isinstance(last[node], Exception) else f"hears {sorted(last[node])}"
        logs.append(f"--- {node}: {detail}\n{text.rstrip()}")
    raise EnvironmentProblem(f"run {cluster.run_id}: nodes {', '.join(lagging)} did not hear all others within "
                             f"{timeout_s:g} s\n" + "\n".join(logs),
                             hint="check the node logs above; 'splitlab doctor' checks the machine")


def _no_exited_node(client: docker.DockerClient, cluster: Cluster) -> None:
    """Raise EnvironmentProblem, with its last log lines, when a node's container has exited while the run
    starts: waiting out the whole timeout for it would only delay the same error."""
    for ctr in run_containers(client, cluster.run_id):
        if ctr.status in ("exited", "dead"):
            code = ctr.attrs["State"].get("ExitCode")
            text = ctr.logs(tail=15).decode(errors="replace").rstrip()
            raise EnvironmentProblem(f"run {cluster.run_id}: node {ctr.labels.get(LABEL_NODE, ctr.name)} exited "
                                     f"(code {code}) while the run started\n{text}",
                                     hint="its image must run a node that keeps the node contract (NODE_CONTRACT.md)")


def load(run_id: str) -> Cluster:
    """The cluster of a running run. Raises `UsageError` when no such run exists."""
    check_run_id(run_id)
    if (multi_dir := multi.find(run_id)) is not None:
        return multi.load(multi_dir)
    client = docker_client()
    nodes = _node_infos(client, run_id)
    if not nodes:
        raise UsageError(f"no run {run_id!r}", hint="see 'splitlab ps'")
    run_dir = Path(client.containers.get(nodes[0].container).labels.get(LABEL_DIR, runs_root() / run_id))
    try:
        token = (run_dir / "token").read_text().strip()
    except OSError as exc:
        raise EnvironmentProblem(f"run {run_id}: cannot read its token in {run_dir}: {exc}") from None
    return Cluster(run_id, run_dir, token, nodes)


def _remove(client: docker.DockerClient, run_id: str) -> None:
    """Stop every container of `run_id` (`_stop_nodes`), remove them at once, then its networks (at once too),
    through the engine's API (`docker-compose down`, v1 here, is a Python program that paid 0.35 s before doing
    anything, beside the analysis that a run's removal overlaps)."""
    from chaos.net.partition import sweep_host

    sweep_host(run_id)  # a bridge chain no ledger holds any more (its run directory deleted): gone with the bridge
    ctrs = run_containers(client, run_id)
    if ctrs:
        _stop_nodes(client, ctrs, run_id)
    _each_container(ctrs, lambda ctr: ctr.remove(force=True))
    engine.at_once(client.networks.list(filters={"label": f"{LABEL_RUN}={run_id}"}), engine.remove_network)


def _stop_nodes(client: docker.DockerClient, ctrs: list[Any], run_id: str) -> None:
    """Stop a run's containers (SIGTERM first: a node writes `node_stop` and closes its history) so that the
    engine releases their network endpoints one container at a time, and no history records another node's exit:
    every running node ends its history at once (`Cluster.quiesce`); those that did not stop at once, first
    (each history ends as its node stops, before any other node goes); then the others exit one at a time.
    Docker 20.10 loses a network's count of endpoints when many of its containers exit at once (1 `down` of 100
    nodes in 3; the network then cannot be removed until the daemon restarts); one at a time it did not
    (DESIGN.md, "Stopping a run")."""
    run_dir = _run_dir_of(ctrs)
    token = _token(run_dir)
    quiesced = set() if token is None else Cluster(run_id, run_dir, token, _node_infos(client, run_id)).quiesce()
    last = [ctr for ctr in ctrs if ctr.labels.get(LABEL_NODE) in quiesced]
    _each_container([ctr for ctr in ctrs if ctr not in last], lambda ctr: ctr.stop(timeout=compose.STOP_GRACE_S))
    for ctr in last:
        try:
            ctr.stop(timeout=compose.STOP_GRACE_S)
        except docker.errors.NotFound:  # removed meanwhile (another teardown)
            pass


def _token(run_dir: Path) -> str | None:
    """The run's control token (`<run dir>/token`), or None where it cannot be read (a run directory deleted)."""
    try:
        return (run_dir / "token").read_text().strip()
    except OSError:
        return None


def _each_container(ctrs: list[Any], action: Callable[[Any], Any]) -> None:
    """`action` on every container at once; one removed meanwhile (another teardown) is skipped."""
    def one(ctr: Any) -> None:
        try:
            action(ctr)
        except docker.errors.NotFound:
            pass

    engine.at_once(ctrs, one)


def _heal(run_dir: Path, run_id: str, log: Log) -> None:
    """Heal the run before its nodes stop or go (shaper processes and paused nodes first, chains on every host)."""
    from chaos.host.heal import heal_run

    heal_run(run_dir, run_id, log=log, missing_ok=True)


def _run_dir_of(ctrs: list[Any]) -> Path:
    """The run directory of a run's containers (their label)."""
    return Path(ctrs[0].labels.get(LABEL_DIR, ""))


def stop(run_id: str, log: Log = _quiet) -> None:
    """Heal the run, then stop its containers (each node closes its history as it stops), leaving them and the
    networks for `down`: what must be on disk before an analysis is there when this returns, and the slower
    removal can run beside the analysis."""
    check_run_id(run_id)
    if (multi_dir := multi.find(run_id)) is not None:
        _heal(multi_dir, run_id, log)
        multi.stop(multi_dir, log)
        return
    client = docker_client()
    ctrs = run_containers(client, run_id)
    if not ctrs:
        return
    _heal(_run_dir_of(ctrs), run_id, log)
    # through the engine's API (`docker-compose stop` took 0.8 s for what the engine does in 0.2 s)
    _stop_nodes(client, ctrs, run_id)
    log(f"run {run_id}: stopped {len(ctrs)} container(s)")


def down(run_id: str, log: Log = _quiet, force: bool = False) -> None:
    """Remove exactly the containers and networks of `run_id` (the run directory stays). `force`, for a run on
    many hosts: give up on the hosts that cannot be reached (`multi.abandon`) and remove it from the others.

    Raises `UsageError` when nothing of that run exists.
    """
    check_run_id(run_id)
    if (multi_dir := multi.find(run_id)) is not None:
        try:
            if force:
                multi.abandon(multi_dir, log)
            _heal(multi_dir, run_id, log)
            multi.down(multi_dir, log)
        except EnvironmentProblem as exc:
            gone = (f"for a host gone for good, 'splitlab down --run-id {run_id} --force' removes the run from "
                    f"the others")
            raise EnvironmentProblem(exc.message, hint=f"{exc.hint}; {gone}" if exc.hint else gone) from None
        return
    client = docker_client()
    ctrs = run_containers(client, run_id)
    nets = client.networks.list(filters={"label": f"{LABEL_RUN}={run_id}"})
    if not ctrs and not nets:
        raise UsageError(f"no run {run_id!r}", hint="see 'splitlab ps'")
    if ctrs:
        _heal(_run_dir_of(ctrs), run_id, log)
    _remove(client, run_id)
    log(f"run {run_id}: removed {len(ctrs)} container(s) and {len(nets)} network(s)")


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    nodes: int
    running: int
    run_dir: str
    hosts: str = ""  # a multi-host run: its hosts


def ps() -> list[RunSummary]:
    """Every run that has containers or networks on this engine, and every multi-host run that is up."""
    client = docker_client()
    out = []
    for run_dir in multi.running():
        try:
            nodes = multi.load(run_dir).nodes
        except SplitlabError as exc:  # a host that does not answer must not hide the other runs
            state = multi.read_state(run_dir)
            out.append(RunSummary(run_dir.name, len(state["placement"]), 0, str(run_dir),
                                  f"{','.join(sorted(set(state['placement'].values())))} (unreachable: "
                                  f"{exc.message.splitlines()[0]})"))
            continue
        out.append(RunSummary(run_dir.name, len(nodes), sum(n.pid > 0 for n in nodes), str(run_dir),
                              ",".join(sorted({n.host for n in nodes}))))
    runs: dict[str, list[Any]] = {}
    for ctr in run_containers(client, None):
        runs.setdefault(ctr.labels[LABEL_RUN], []).append(ctr)
    for net in client.networks.list(filters={"label": LABEL_RUN}):
        runs.setdefault(net.attrs["Labels"][LABEL_RUN], [])
    for run_id, ctrs in sorted(runs.items()):
        run_dir = ctrs[0].labels.get(LABEL_DIR, "") if ctrs else ""
        out.append(RunSummary(run_id, len(ctrs), sum(c.status == "running" for c in ctrs), run_dir))
    return out


def resolve_run_id(run_id: str | None) -> str:
    """`run_id` if given, else the only run there is. Raises `UsageError` when that is ambiguous or empty."""
    if run_id:
        return check_run_id(run_id)
    runs = ps()
    if len(runs) == 1:
        return runs[0].run_id
    if not runs:
        raise UsageError("no splitlab run exists", hint="start one with 'splitlab up'")
    raise UsageError(f"{len(runs)} runs exist ({', '.join(r.run_id for r in runs)}); say which with --run-id")


def as_dict(cluster: Cluster) -> dict[str, Any]:
    return {"run_id": cluster.run_id, "run_dir": str(cluster.run_dir),
            "auth": (cluster.run_dir / authkey.KEY_FILE).exists(),
            "nodes": [dict(asdict(n), control_url=n.control_url) for n in cluster.nodes]}


def data_bridge_name(run_id: str) -> str | None:
    """The host interface of the run's data network on this machine's engine (Docker names it `br-<network id>`
    unless the network names its own), None when this engine has no data network of the run."""
    labels = [f"{LABEL_RUN}={run_id}", "splitlab.network=data"]
    for net in docker_client().networks.list(filters={"label": labels}):
        return (net.attrs.get("Options") or {}).get("com.docker.network.bridge.name") or f"br-{net.id[:12]}"
    return None


def namespaces(cluster: Cluster, hosts: Mapping[str, RemoteHost] | None = None) -> dict[str, Netns]:
    """Every node's network namespace, after the labelling and host-namespace refusals of `chaos.host.netns`
    (on a multi-host run: on the node's host, entered over SSH through `hosts`, default new connections)."""
    if any(n.host for n in cluster.nodes):
        return multi.namespaces(cluster, hosts)
    client = docker_client()
    out = {}
    for info in cluster.nodes:
        ctr = client.containers.get(info.container)
        out[info.name] = target(info.name, int(ctr.attrs["State"].get("Pid") or 0), ctr.labels, cluster.run_id)
    return out
