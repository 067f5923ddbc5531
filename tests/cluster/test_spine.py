"""The cluster spine on real containers: all hear all over UDP, a one-way iptables cut applied from the host on
the run's data bridge, heal, down leaves nothing, and bad input gets one clear line."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time

import docker
import pytest
from cluster_wait import wait_for

from chaos.cluster import compiled, images, lifecycle as cluster
from chaos.cluster.naming import LABEL_NODE, LABEL_RUN

from chaos.net.docker import DockerNet
from node import history
from node.errors import EnvironmentProblem, UsageError

pytestmark = pytest.mark.splitlab_cluster
SETTLE_S = 2.5  # more than the nodes' 1.5 s silence threshold




def host_iptables(chain: str | None = None) -> list[str]:
    """The host's filter table (or one chain of it), as `iptables -S` prints it."""
    return subprocess.run(["iptables", "-w", "-S", *([chain] if chain else [])], capture_output=True, text=True,
                          check=True).stdout.splitlines()


def labelled(run_id):
    client = docker.from_env()
    label = f"splitlab.run={run_id}"
    return (client.containers.list(all=True, filters={"label": label}),
            client.networks.list(filters={"label": label}))


def test_three_nodes_hear_each_other_over_udp_on_the_data_network(splitlab_up):
    run = splitlab_up(3)
    assert run.all_hear_all()
    data_ips = {n.data_ip for n in run.nodes}
    control_ips = {n.control_ip for n in run.nodes}
    assert len(data_ips) == 3 and not data_ips & control_ips
    for node in run.nodes:
        state = run.client(node.name).state()
        assert state["data_ip"] == node.data_ip  # the data socket is bound to the data network address
        assert state["counters"]["datagrams_received"] > 0
    n1 = run.client("n1")
    n1.ping("n3", count=20, interval_ms=1)
    wait_for(lambda: n1.state()["layers"]["ping"].get("n3", {}).get("answered") == 20, what="20 pongs")


def test_one_way_cut_from_the_host_then_heal_then_down_leaves_nothing(splitlab_up):
    run = splitlab_up(3)
    namespaces = cluster.namespaces(run)
    data_ips = {n.name: n.data_ip for n in run.nodes}
    with DockerNet(run) as net:  # the partition path production takes
        net.partition({"n2": {"n1"}})
        time.sleep(SETTLE_S)
        hearing = run.hearing()  # the control network keeps working during the cut
        assert "n1" not in hearing["n2"], hearing
        assert "n2" in hearing["n1"] and hearing["n3"] == {"n1", "n2"}, hearing
        # one chain on the host, on the run's data bridge: the cut link only, for every node in one commit
        rules = sorted(r for r in host_iptables() if f"SLB-{run.run_id}" in r)
        bridge = cluster.data_bridge_name(run.run_id)
        assert rules == [f"-A FORWARD -j SLB-{run.run_id}",
                         f"-A SLB-{run.run_id} -s {data_ips['n1']}/32 -d {data_ips['n2']}/32 -i {bridge} -o {bridge} "
                         f"-j DROP", f"-N SLB-{run.run_id}"], rules
        # ahead of Docker's accepts on the run's bridge (a network another run creates since puts Docker's own
        # jumps, which only drop between networks, above it)
        forward = host_iptables("FORWARD")
        accepts = [i for i, rule in enumerate(forward) if bridge in rule and rule.endswith("-j ACCEPT")]
        assert accepts and forward.index(f"-A FORWARD -j SLB-{run.run_id}") < min(accepts), forward
        assert all(f"SL-{run.run_id}" not in ns.exec(["iptables", "-S"]).stdout for ns in namespaces.values())
        net.heal()
        net.heal()  # idempotent
    wait_for(run.all_hear_all, what="all hear all after heal")
    assert not [r for r in host_iptables() if f"SLB-{run.run_id}" in r]
    for ns in namespaces.values():
        assert f"SL-{run.run_id}" not in ns.exec(["iptables", "-S"]).stdout
    DockerNet(run).partition({"n3": {"n1"}})  # a cut left applied, whose ledger is then lost: down removes it
    assert [r for r in host_iptables() if f"SLB-{run.run_id}" in r]
    (run.run_dir / "ledger.jsonl").unlink()
    cluster.down(run.run_id)
    assert not [r for r in host_iptables() if f"SLB-{run.run_id}" in r]
    assert labelled(run.run_id) == ([], [])
    for ns in namespaces.values():  # the namespaces went with the containers
        assert not os.path.exists(f"/proc/{ns.pid}/ns/net")
    # the history survives down and was flushed on SIGTERM
    for name in run.names:
        lines = (run.run_dir / "events" / f"{name}.jsonl").read_text().splitlines()
        assert '"type":"node_start"' in lines[0] and '"type":"node_stop"' in lines[-1]


def test_a_runs_nodes_end_their_histories_at_once_then_exit_one_at_a_time(splitlab_up):
    """`stop` quiesces every node, then stops them one at a time (lifecycle._stop_nodes: Docker 20.10 loses a
    network's endpoint count when many of its containers exit at once): the engine's own events show each node's
    SIGTERM after the previous node died, and every history ends at its quiesce, with nothing of the others'
    exits (each node went on for the others' stops)."""
    run = splitlab_up(4)
    client = docker.from_env()
    since = time.time() - 1
    cluster.stop(run.run_id)
    seen = client.events(since=since, until=time.time() + 1, decode=True,
                         filters={"type": "container", "label": f"{LABEL_RUN}={run.run_id}"})
    kills, dies = {}, {}
    for event in seen:
        if event["Action"] == "kill" and event["Actor"]["Attributes"].get("signal") == "15":
            kills[event["Actor"]["Attributes"][LABEL_NODE]] = event["timeNano"]
        elif event["Action"] == "die":
            dies[event["Actor"]["Attributes"][LABEL_NODE]] = event["timeNano"]
    order = sorted(kills, key=kills.get)
    assert sorted(order) == sorted(dies) == sorted(run.names), (kills, dies)
    assert all(dies[before] <= kills[after] for before, after in zip(order, order[1:])), (order, kills, dies)
    for name in run.names:
        events = history.read(run.run_dir / "events" / f"{name}.jsonl")
        stops = [e for e in events if e["type"] == "node_stop"]
        assert stops == [events[-1]] and stops[0]["reason"] == "quiesce", (name, events[-3:])


def test_runs_side_by_side_and_down_removes_exactly_one(splitlab_up):
    first = splitlab_up(1)
    second = splitlab_up(2)
    assert first.all_hear_all() and second.all_hear_all()
    ids = {r.run_id for r in cluster.ps()}
    assert {first.run_id, second.run_id} <= ids
    cluster.down(first.run_id)
    assert labelled(first.run_id) == ([], [])
    containers, networks = labelled(second.run_id)
    assert len(containers) == 2 and len(networks) == 2 and second.all_hear_all()


def test_a_failed_start_removes_what_it_started(splitlab_up, tmp_path):
    run_id = f"t-fail-{secrets.token_hex(3)}"
    with pytest.raises(EnvironmentProblem) as info:  # n2 is told it is alone: it never hears n1, however long
        splitlab_up(2, run_id=run_id, wait_timeout_s=2, node_env={"n2": {"SPLITLAB_MEMBERS": "n2"}})
    assert "nodes n1, n2 did not hear all others" in str(info.value)
    assert labelled(run_id) == ([], [])


def test_an_engine_refusal_is_one_clear_error_and_removes_what_was_started(splitlab_up):
    """The engine refuses the run's data network (a network of that name exists): the control network it made
    goes again, the other network is not the run's and stays."""
    run_id = f"t-eng-{secrets.token_hex(3)}"
    squatter = docker.from_env().networks.create(f"splitlab-{run_id}_data")
    try:
        with pytest.raises(EnvironmentProblem) as info:
            splitlab_up(2, run_id=run_id)
        assert "Docker engine refused to start it" in str(info.value) and "already exists" in str(info.value)
        assert labelled(run_id) == ([], [])
        squatter.reload()  # still there: only what carries the run's label is removed
    finally:
        squatter.remove()


def test_name_clash_is_refused_without_touching_the_existing_run(splitlab_up):
    run = splitlab_up(1)
    with pytest.raises(UsageError) as info:
        splitlab_up(1, run_id=run.run_id)
    assert "already has containers" in str(info.value)
    assert run.all_hear_all() and len(labelled(run.run_id)[0]) == 1


def test_a_node_starts_from_bytecode_compiled_in_its_image():
    # every module of the image's site a node imports has its bytecode in the image (it runs unprivileged with
    # PYTHONDONTWRITEBYTECODE: without it every start compiles them all again)
    script = ("import json, os, sys, node.__main__\n"
              "mods = [m for m in list(sys.modules.values()) if (getattr(m, '__file__', None) or '')"
              ".startswith('/opt/splitlab/') and m.__file__.endswith('.py')]\n"
              "print(json.dumps([len(mods), sorted(m.__name__ for m in mods if not os.path.exists(m.__cached__))]))")
    out = docker.from_env().containers.run(images.node_image(), entrypoint=["python3", "-c", script], remove=True)
    imported, uncompiled = json.loads(out)
    assert imported > 25 and uncompiled == [], (imported, uncompiled)  # the node's own modules and h11's


@pytest.mark.parametrize("env, build", [({}, "compiled"), (compiled.PURE_ENV, "pure")])
def test_the_image_runs_the_compiled_node_and_the_pure_one_when_asked(env, build):
    """Its nodes run the compiled build (made on the host for the image's own Python 3.11), and `PURE_ENV` (for
    flame graphs) the pure sources; either decodes what the other encodes."""
    modules = [m.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for m in compiled.COMPILED]
    script = ("import importlib, json, sys\n"
              "from node.wire import UnicastData, cluster_id_of, decode_datagram_from, encode_datagram\n"
              f"files = [importlib.import_module(m).__file__ for m in {modules!r}]\n"
              "sent = [UnicastData(7, 4096, True, b'x' * 100)]\n"
              "got = decode_datagram_from(encode_datagram(cluster_id_of('r'), 'n1', sent, 5), cluster_id_of('r'))\n"
              "print(json.dumps([sys.version.split()[0], files, got == ('n1', 5, sent)]))")
    out = docker.from_env().containers.run(images.node_image(), entrypoint=["python3", "-c", script], remove=True,
                                           environment=env)
    version, files, decoded = json.loads(out)
    suffix = compiled.extension_suffix() if build == "compiled" else ".py"
    assert version.startswith("3.11.") and decoded, (version, decoded)
    assert [f for f in files if not f.endswith(suffix)] == [], files


def test_refuses_containers_not_labelled_by_splitlab():
    from chaos.host.netns import target

    client = docker.from_env()
    ctr = client.containers.run(images.node_image(), entrypoint=["python3", "-c", "import time; time.sleep(30)"],
                                detach=True, labels={"purpose": "splitlab-refusal-test"})
    try:
        ctr.reload()
        with pytest.raises(UsageError) as info:
            target("stranger", ctr.attrs["State"]["Pid"], ctr.labels, "some-run")
        assert "not labelled splitlab.run=some-run" in str(info.value)
        with pytest.raises(UsageError) as info:
            target("host", os.getpid(), {"splitlab.run": "some-run"}, "some-run")
        assert "host's network namespace" in str(info.value)
    finally:
        ctr.remove(force=True)


def splitlab(*args, env=None):
    full_env = {k: v for k, v in os.environ.items() if k != "SPLITLAB_NODE_IMAGE"}  # never pinned here
    proc = subprocess.run([sys.executable, "-m", "chaos.cli.main", *args], capture_output=True, text=True,
                          env={**full_env, **(env or {})}, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("args, env, code, fragment", [
    (["up", "-n", "0"], None, 2, "-n: expected a whole number of nodes from 1 to 255, got 0"),
    (["down", "--run-id", "no-such-run"], None, 2, "no run 'no-such-run'"),
    (["down", "--run-id", "Bad Id"], None, 2, "invalid run id"),
    (["up", "-n", "2"], {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}, 1, "Docker engine not reachable"),
    (["up", "-n", "2"], {"BASE_IMAGE": "splitlab-no-such-base:0"}, 1, "is not built"),
])
def test_bad_input_gets_one_clear_line(args, env, code, fragment, tmp_path):
    # the command's runs get their directories under tmp_path: other tests' runs (the multi-host tests run beside
    # this module) are neither counted nor touched
    def started() -> set[str]:
        return {r.run_id for r in cluster.ps()} & {d.name for d in tmp_path.iterdir()}

    try:
        rc, out = splitlab(*args, env={"SPLITLAB_RUNS_DIR": str(tmp_path), **(env or {})})
        assert rc == code, out
        assert fragment in out and "Traceback" not in out
        assert started() == set()  # nothing half-started
    finally:
        for extra in started():
            cluster.down(extra)


@pytest.mark.parametrize("flags, build", [([], "compiled"), (["--pure"], "pure")])
def test_up_runs_the_compiled_node_and_the_pure_one_with_pure(flags, build, tmp_path):
    """What the running node process has mapped says which build it runs: the compiled modules' shared objects,
    or none of them with `--pure`."""
    try:
        rc, out = splitlab("up", "-n", "1", "--json", *flags, env={"SPLITLAB_RUNS_DIR": str(tmp_path)})
        assert rc == 0, out
        run_id = json.JSONDecoder().raw_decode(out[out.index("{"):])[0]["run_id"]  # progress lines follow
        ctr = labelled(run_id)[0][0]
        maps = ctr.exec_run(["cat", "/proc/1/maps"]).output.decode()
        mapped = {line.split()[-1] for line in maps.splitlines() if line.endswith(compiled.extension_suffix())}
        wire = f"/opt/splitlab/compiled/node/wire{compiled.extension_suffix()}"
        assert (wire in mapped) == (build == "compiled"), sorted(mapped)
    finally:  # whatever was started, even if its JSON did not come
        for started in {r.run_id for r in cluster.ps()} & {d.name for d in tmp_path.iterdir()}:
            cluster.down(started)
