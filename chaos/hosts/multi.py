"""A run across the hosts of an inventory: up (ship the image, build the data network, start each host's
nodes, wait until all hear all), load, stop (collect the histories with the clock offsets applied), down, and
the list of multi-host runs on this controller.

The run directory on the controller holds `hosts.json`: the inventory, the placement, the data-network plan,
each host's clock offset (at `up` and at `stop`) and whether the run is up. Every later command (and `heal`
after the controller was killed) reaches the hosts from it, without the inventory file. On each host the nodes
write their histories under `/var/lib/splitlab/runs/<run>/`; `stop` and `down` bring them to the controller.
"""
from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import docker
import orjson
import requests

from chaos.cluster import compose, engine, neighbours
from chaos.cluster.model import Cluster, NodeInfo
from chaos.cluster.naming import LABEL_NODE, LABEL_RUN, container_name
from chaos.host.ledger import Ledger
from chaos.host.netns import Netns
from chaos.hosts import datanet, hostengine, ship
from chaos.hosts.inventory import HostSpec, Inventory, place, placement_text
from chaos.hosts.remote import HOSTS_FILE, RemoteHost, closing, connect_all, each, run_hosts
from node.config import CONTROL_PORT, DATA_PORT
from node.errors import EnvironmentProblem, SplitlabError, UsageError
from node.history import ROWS

REMOTE_RUNS = "/var/lib/splitlab/runs"
LABEL_HOST = "splitlab.host"
LABEL_DIR = "splitlab.dir"
Log = Callable[[str], None]


def registry() -> Path:
    """Where the controller finds its multi-host runs whatever their run directory: a symlink per run that is
    up, named by its id ($SPLITLAB_STATE_DIR/multihost, default ~/.local/state/splitlab/multihost). On one engine
    the containers' labels play this part."""
    return Path(os.environ.get("SPLITLAB_STATE_DIR", "~/.local/state/splitlab")).expanduser() / "multihost"


def find(run_id: str) -> Path | None:
    """The run directory of the multi-host run `run_id` when it is up, else None."""
    link = registry() / run_id
    return link.resolve() if link.is_symlink() and (link / HOSTS_FILE).is_file() else None


def read_state(run_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((Path(run_dir) / HOSTS_FILE).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EnvironmentProblem(f"cannot read {Path(run_dir) / HOSTS_FILE}: {exc}") from None


def _write_state(run_dir: Path, state: dict[str, Any]) -> None:
    tmp = Path(run_dir) / (HOSTS_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(Path(run_dir) / HOSTS_FILE)


def agent_image(run_dir: Path) -> str:
    """The agent image (the shaper and the wire agent) `up --inventory` shipped to the hosts of the run in
    `run_dir`."""
    image = read_state(run_dir).get("agent_image")
    if not image:
        raise EnvironmentProblem(f"run in {run_dir} was started without the shaper agent image",
                                 hint="start the run again with this version of splitlab")
    return image


def agent_run(run_dir: Path, run_id: str, node: str, caps: Sequence[str], options: Sequence[str],
              command: Sequence[str], entrypoint: Sequence[str] = ()) -> list[str]:
    """The `docker run` of the agent image in `node`'s network namespace on its host, with only `caps`;
    `options` go before the image, `command` after it (`entrypoint`: its first word, then the rest before
    `command`; default the image's, the shaper)."""
    entry = ["--entrypoint", entrypoint[0]] if entrypoint else []
    return ["docker", "run", "--label", f"{LABEL_RUN}={run_id}",
            "--network", f"container:{container_name(run_id, node)}", "--cap-drop", "ALL", *(arg for cap in caps for arg in ("--cap-add", cap)), *options, *entry,
            agent_image(run_dir), *entrypoint[1:], *command]


def remote_dir(run_id: str) -> str:
    return f"{REMOTE_RUNS}/{run_id}"


def _prepare_script(run_id: str, members: int) -> str:
    """The shell script that readies a host for its nodes: the run's directory, owned by the nodes' user, and
    the neighbour table's limits for `members` nodes."""
    q = shlex.quote
    rdir = remote_dir(run_id)
    return "\n".join(["set -eu", f"mkdir -p {q(rdir)}/events",
                      f"chown -R {compose.NODE_UID}:{compose.NODE_UID} {q(rdir)}",
                      *neighbours.raise_script(members)]) + "\n"


def _node_spec(run_id: str, node: str, members: list[str], p: datanet.Plan, image: str, token: str,
               publish_address: str, run_dir: Path, host: str, node_env: Mapping[str, str]) -> engine.ContainerSpec:
    """Node `node`'s container on its host: on the host's control network (its control port published on
    `publish_address`), then on the data network at its planned address."""
    addresses = ",".join(f"{n}={p.node_ips[n]}:{DATA_PORT}" for n in members)
    env = compose.node_environment(node, members, run_id, token, {"SPLITLAB_ADDRESSES": addresses, **node_env})
    labels = {LABEL_RUN: run_id, LABEL_NODE: node, LABEL_HOST: host, LABEL_DIR: str(run_dir)}
    create = {"image": image, "name": container_name(run_id, node), "hostname": node, "labels": labels,
              "environment": env, "user": f"{compose.NODE_UID}:{compose.NODE_UID}",
              "stop_timeout": compose.STOP_GRACE_S, "ports": [CONTROL_PORT]}
    host_config = {"binds": [f"{remote_dir(run_id)}:{compose.RUN_MOUNT}"], "cap_drop": ["ALL"],
                   "security_opt": ["no-new-privileges:true"], "port_bindings": {CONTROL_PORT: (publish_address,)}}
    return engine.ContainerSpec(node, create, host_config, [
        engine.Endpoint(p.control_network, [f"{node}-control"]),
        engine.Endpoint(p.data_network, [f"{node}-data"], ipv4_address=p.node_ips[node])])


def _start_nodes(host: RemoteHost, specs: Sequence[engine.ContainerSpec], members: int, run_id: str) -> None:
    """Start the host's nodes, all at once, through its engine's API over SSH (as `up` starts them on one
    machine: `chaos.cluster.engine`), not three docker CLI processes per node. Raises `EnvironmentProblem` with
    the engine's first refusal, after every other node was started."""
    host.run_script(_prepare_script(run_id, members), timeout_s=60, what="prepare the run's directory")
    client = host.engine()
    try:
        engine.start_containers(client, specs)
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"the Docker engine refused to start the nodes: {exc}") from None
    except requests.RequestException as exc:
        raise EnvironmentProblem(f"the Docker engine's API did not answer over SSH: {exc}",
                                 hint=hostengine.HINT) from None
    finally:
        client.close()


INSPECT_FORMAT = ('{{index .Config.Labels "splitlab.node"}} {{.Name}} {{.State.Pid}} '
                  '{{with index .NetworkSettings.Ports "%d/tcp"}}{{(index . 0).HostPort}}{{else}}0{{end}}'
                  % CONTROL_PORT)


def _node_infos(run_id: str, hosts: Mapping[str, RemoteHost], p: datanet.Plan) -> list[NodeInfo]:
    def query(host: RemoteHost) -> list[NodeInfo]:
        ids = host.run(["docker", "ps", "-aq", "--filter", f"label={LABEL_RUN}={run_id}", "--filter",
                        f"label={LABEL_NODE}"], timeout_s=30).stdout.split()  # not the shaper containers
        if not ids:
            return []
        out = []
        for line in host.run(["docker", "inspect", "-f", INSPECT_FORMAT, *ids], timeout_s=30).stdout.splitlines():
            node, name, pid, port = line.split()
            out.append(NodeInfo(node, name.lstrip("/"), p.node_ips.get(node, ""), host.spec.address, int(pid),
                                host=host.name, control_port=int(port)))
        return out

    infos = [i for found in each(hosts, query).values() for i in found]
    return sorted(infos, key=lambda n: (len(n.name), n.name))


def up(inventory: Inventory, names: list[str], run_id: str, run_dir: Path, token: str, image: str, agent_image: str,
       *, placement: str | None, wait: Callable[[Cluster], None], log: Log,
       node_env: Mapping[str, dict[str, str]] | None = None) -> Cluster:
    """Start `names` (containers of `image`) over the inventory's hosts and `wait` until all hear all (the
    caller's wait); `agent_image` (the shaper's, chaos.net.shaper.remote) travels with the node image. On any
    failure, what was started on any host is removed again. Raises `UsageError` / `EnvironmentProblem`."""
    where = place(names, inventory.names, placement)
    used = [h for h in inventory.hosts if h.name in set(where.values())]
    p = datanet.plan(run_id, [h.name for h in used], names)
    if find(run_id) is not None:
        raise UsageError(f"multi-host run {run_id} is up already", hint="choose another run id")
    state: dict[str, Any] = {"run_id": run_id, "inventory": {"hosts": [dict(vars(h)) for h in used]},
                             "placement": where, "plan": p.as_dict(), "remote_dir": remote_dir(run_id), "up": True,
                             "image": image, "agent_image": agent_image, "offsets_s": {}}
    with closing(connect_all(used)) as hosts:
        _write_state(run_dir, state)
        registry().mkdir(parents=True, exist_ok=True)
        (registry() / run_id).unlink(missing_ok=True)  # a link left by a run whose directory went
        (registry() / run_id).symlink_to(Path(run_dir).resolve())
        try:
            offsets = each(hosts, lambda h: h.clock_offset_s())
            state["offsets_s"]["up"] = {n: o for n, (o, _) in offsets.items()}
            state["rtt_s"] = {n: r for n, (_, r) in offsets.items()}
            _write_state(run_dir, state)
            ship.ship([image, agent_image], hosts, log)
            log(f"run {run_id}: data network {p.subnet} over {len(used)} host(s) (VXLAN id {p.vni})")
            each(hosts, lambda h: h.run_script(datanet.create_script(
                p, h.name, h.spec.vxlan_address, [o.vxlan_address for o in used if o.name != h.name]), timeout_s=60,
                what="create the data network"))
            each(hosts, lambda h: _start_nodes(h, [
                _node_spec(run_id, n, names, p, image, token, h.spec.address, run_dir, h.name,
                           (node_env or {}).get(n, {})) for n in names if where[n] == h.name], len(names), run_id))
            cluster = Cluster(run_id, run_dir, token, _node_infos(run_id, hosts, p))
            wait(cluster)
        except BaseException:
            log(f"run {run_id}: start failed, removing it from every host (the histories so far go to {run_dir})")
            try:
                _stop_and_collect(run_dir, hosts, run_id)
            except SplitlabError as exc:
                log(f"run {run_id}: histories not collected: {exc.message}")
            _remove(run_dir, hosts)
            raise
    return cluster


def container_log(host: RemoteHost, container: str, tail_lines: int | None = None) -> str:
    """A node container's output (its last `tail_lines` lines), read on its host, or why there is none."""
    tail = ["--tail", str(tail_lines)] if tail_lines is not None else []
    try:
        return host.run(["docker", "logs", *tail, container], check=False, timeout_s=60).stdout
    except SplitlabError as exc:
        return f"(no logs: {exc.message})\n"


def load(run_dir: Path) -> Cluster:
    """The running multi-host run in `run_dir`. Raises `UsageError` when it is down."""
    state = read_state(run_dir)
    if not state.get("up"):
        raise UsageError(f"run {state['run_id']} is down")
    with closing(run_hosts(run_dir)) as hosts:
        nodes = _node_infos(state["run_id"], hosts, datanet.Plan.from_dict(state["plan"]))
    token = (Path(run_dir) / "token").read_text().strip()
    return Cluster(state["run_id"], Path(run_dir), token, nodes)


def namespaces(cluster: Cluster, hosts: Mapping[str, RemoteHost] | None = None) -> dict[str, Netns]:
    """Every node's network namespace on its host, entered through `hosts` (default: new connections from the
    run's `hosts.json`, one per host, shared by its nodes; the caller closes them). Raises `EnvironmentProblem`
    for a node that is not running."""
    hosts = run_hosts(cluster.run_dir) if hosts is None else hosts
    out = {}
    for info in cluster.nodes:
        if info.pid <= 0:
            raise EnvironmentProblem(f"node {info.name} on host {info.host} is not running (no PID)",
                                     hint="start it first")
        out[info.name] = Netns(info.name, info.pid, host=info.host, remote=hosts[info.host])
    return out


def collect(run_dir: Path, hosts: Mapping[str, RemoteHost]) -> int:
    """Bring every host's node histories into `run_dir/events/`, each event's `ts` moved onto the controller's
    clock (minus the host's offset measured now); returns the number of files. Raises `EnvironmentProblem`."""
    state = read_state(run_dir)
    offsets = each(hosts, lambda h: h.clock_offset_s()[0])
    state["offsets_s"]["stop"] = offsets
    _write_state(run_dir, state)
    rdir = state["remote_dir"]

    def fetch(host: RemoteHost) -> int:
        listing = host.run(["sh", "-c", f"cd {shlex.quote(rdir)}/events 2>/dev/null && ls"], check=False).stdout.split()
        count = 0
        for name in listing:
            if not name.endswith(".jsonl"):
                continue
            text = host.run(["cat", f"{rdir}/events/{name}"], timeout_s=300).stdout
            _write_shifted(Path(run_dir) / "events" / name, text, offsets[host.name])
            count += 1
        return count

    return sum(each(hosts, fetch).values())


def _write_shifted(path: Path, text: str, offset_s: float) -> None:
    """Write a history with each event's `ts` minus `offset_s` (a run line's `rows.ts` too: node.history); a line
    that is not a JSON object (cut short by a kill) is kept as it is, for the reader to count."""
    out = bytearray()
    for line in text.splitlines():
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            out += line.encode() + b"\n"
            continue
        if isinstance(event, dict) and isinstance(event.get("ts"), (int, float)) and offset_s:
            event["ts"] = round(event["ts"] - offset_s, 6)
            rows = event.get(ROWS)
            if isinstance(rows, dict) and isinstance(rows.get("ts"), list):
                rows["ts"] = [round(ts - offset_s, 6) if isinstance(ts, (int, float)) else ts for ts in rows["ts"]]
            out += orjson.dumps(event) + b"\n"
        else:
            out += line.encode() + b"\n"
    path.write_bytes(bytes(out))


def _stop_and_collect(run_dir: Path, hosts: Mapping[str, RemoteHost], run_id: str) -> int:
    """Stop the run's containers on every host (each node closes its history), then collect the histories.
    As on one machine (`chaos.cluster.lifecycle._stop_nodes` says why): every node ends its history at once
    (`Cluster.quiesce`); then on each host, the hosts in parallel, the run's containers that did not (and the
    shapers) stop at once, and the others one at a time."""
    infos = _node_infos(run_id, hosts, datanet.Plan.from_dict(read_state(run_dir)["plan"]))
    token = (Path(run_dir) / "token").read_text().strip()
    quiesced = Cluster(run_id, Path(run_dir), token, infos).quiesce()
    last = {host: [i.container for i in infos if i.host == host and i.name in quiesced] for host in hosts}

    def stop(host: RemoteHost) -> None:
        running = host.run(["docker", "ps", "--format", "{{.Names}}", "--filter", f"label={LABEL_RUN}={run_id}"],
                           timeout_s=30).stdout.split()
        first = [name for name in running if name not in last[host.name]]
        if first:
            host.run(["docker", "stop", "-t", "10", *first], timeout_s=120)
        if last[host.name]:
            names = " ".join(shlex.quote(name) for name in last[host.name])
            host.run(["sh", "-c", f"for n in {names}; do docker stop -t 10 \"$n\" >/dev/null || exit 1; done"],
                     timeout_s=30 + 15 * len(last[host.name]))
    each(hosts, stop)
    return collect(run_dir, hosts)


def stop(run_dir: Path, log: Log) -> None:
    """Stop the run's containers on every host and collect their histories (the containers stay for `down`)."""
    run_id = read_state(run_dir)["run_id"]
    with closing(_reachable_hosts(run_dir)) as hosts:
        files = _stop_and_collect(run_dir, hosts, run_id)
    log(f"run {run_id}: stopped on {len(hosts)} host(s), {files} histories collected")


def _reachable_hosts(run_dir: Path) -> dict[str, RemoteHost]:
    """The run's hosts but those `abandon` gave up on (not connected yet)."""
    abandoned = read_state(run_dir).get("abandoned", {})
    return {name: host for name, host in run_hosts(run_dir).items() if name not in abandoned}


def down(run_dir: Path, log: Log) -> None:
    """Stop the nodes and collect their histories (a host that cannot be read keeps its run: nothing is
    lost), then remove the run's containers, VXLAN devices, networks and directories from every host but those
    `abandon` gave up on."""
    state = read_state(run_dir)
    with closing(_reachable_hosts(run_dir)) as hosts:
        if state.get("up"):
            _stop_and_collect(run_dir, hosts, state["run_id"])
        _remove(run_dir, hosts)
    log(f"run {state['run_id']}: removed from {', '.join(hosts) or 'no host'}")


LEFTOVERS = "leftovers-{host}.sh"  # in the run directory: what `abandon` could not remove from a host


def abandon(run_dir: Path, log: Log) -> dict[str, str]:
    """Give up on the hosts of the run that cannot be reached now (`down --force`): their ledger entries are
    settled as abandoned (a later heal does not try them), `hosts.json` names them, and for each a script that
    removes what is left there is written to the run directory. Returns {host: why}; {} when all answer."""
    state = read_state(run_dir)

    def reach(host: RemoteHost) -> str:
        try:
            host.reach()
        except EnvironmentProblem as exc:
            return exc.message
        return ""

    with closing(_reachable_hosts(run_dir)) as hosts:
        gone = {name: why for name, why in each(hosts, reach).items() if why}
    if not gone:
        return {}
    ledger = Ledger(run_dir)
    if ledger.path.exists():
        entries = ledger.outstanding(lambda e: e.host in gone)
        ledger.mark_undone(entries, "abandoned: host unreachable")
    script = (f"# what splitlab left of run {state['run_id']} on this host: run it there as root\n"
              f"rm -rf {shlex.quote(state['remote_dir'])}\n"
              + datanet.remove_script(datanet.Plan.from_dict(state["plan"])))
    for name, why in gone.items():
        path = Path(run_dir) / LEFTOVERS.format(host=name)
        path.write_text(script)
        log(f"run {state['run_id']}: giving up on host {name} ({why}); the histories of its nodes are lost, and "
            f"what is left there is removed by {path} (run it on {name} as root)")
    state["abandoned"] = {**state.get("abandoned", {}), **gone}
    _write_state(run_dir, state)
    return gone


def _remove(run_dir: Path, hosts: Mapping[str, RemoteHost]) -> None:
    state = read_state(run_dir)
    p = datanet.Plan.from_dict(state["plan"])
    each(hosts, lambda h: h.run_script(datanet.remove_script(p), timeout_s=180, what="remove the run"))
    each(hosts, lambda h: h.run(["rm", "-rf", state["remote_dir"]], timeout_s=60))
    state["up"] = False
    _write_state(run_dir, state)
    (registry() / state["run_id"]).unlink(missing_ok=True)


def hosts_of(run_dir: Path) -> tuple[Inventory, str] | None:
    """The hosts and the placement (as `--placement` text) a run in `run_dir` had, to run it again there; None
    for a run on one machine. The inventory is the one `hosts.json` recorded (its key paths as they were)."""
    path = Path(run_dir) / HOSTS_FILE
    if not path.is_file():
        return None
    state = read_state(run_dir)
    inventory = Inventory(path, tuple(HostSpec(**h) for h in state["inventory"]["hosts"]))
    return inventory, placement_text(state["placement"])


def running() -> list[Path]:
    """The run directories of the multi-host runs that are up."""
    root = registry()
    return [d for d in (find(link.name) for link in sorted(root.iterdir())) if d] if root.is_dir() else []
