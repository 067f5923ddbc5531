"""The shaper of a node on another host (a multi-host run): a container of the agent image
(`chaos.cluster.images.build_agent`) in the node's network namespace there (`--network container:<node>`), run
with NET_ADMIN (the queue), NET_RAW (the extra packets) and SYS_NICE (its real-time priority) only.

It is the very process of one machine (`python -m chaos.net.shaper`), driven the same way: the spec is a file
(in the run's directory on the host, mounted at the same path), SIGHUP reloads it (`docker kill -s HUP`), the
shaper writes `<spec>.gen` once it runs a generation and `<spec>.stats` with its counters; SIGTERM
(`docker stop`) releases what it holds and ends it, then the container is removed (not `--rm`: a shaper that
ended by itself keeps its output for the error the next change raises). One SSH script per change writes the
spec, starts or signals the container and waits for the generation.

The ledger entry names the container, not a PID or a namespace: it is stopped whatever became of the node, also
by a `heal` after the controller died. The controller keeps a copy of every spec it
sent under the run's `chaos/` directory (the generation counts on from it) and fetches the counters when the
shaper ends.
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from chaos.cluster.naming import container_name
from chaos.host.ledger import Entry, Ledger
from chaos.host.netns import Netns
from chaos.hosts import multi
from chaos.hosts.remote import RemoteHost
from chaos.net import iptables
from chaos.net.shaper.spec import ShaperSpec
from node.errors import CommandFailed, EnvironmentProblem

SHAPER_CAPS = ("NET_ADMIN", "NET_RAW", "SYS_NICE")  # the queue, the extra packets, its real-time priority
START_TIMEOUT_S = 10.0
STOP_GRACE_S = 5


def _container(spec: ShaperSpec, ns: Netns) -> str:
    return f"{container_name(spec.run_id, ns.node)}-shaper-{ns.inode}"


def _entry(ns: Netns, name: str) -> Entry:
    """Bound to the container, not to a PID or namespace: it is stopped whatever became of the node."""
    return Entry(group=iptables.QUEUE.group, key=f"shaper-proc:{ns.host}:{ns.inode}", node=ns.node, host=ns.host,
                 what=f"NFQUEUE shaper container {name} for {ns.node} on {ns.host}",
                 undo=[stop_argv(name), ["docker", "rm", name]],
                 present={"argv": ["docker", "inspect", name]})


def remote_spec_path(spec: ShaperSpec, local_path: Path) -> str:
    return f"{multi.remote_dir(spec.run_id)}/chaos/{local_path.name}"


def ensure(ledger: Ledger, ns: Netns, spec: ShaperSpec, local_path: Path) -> None:
    """Make the shaper of `ns`'s node on its host run `spec`: start its container or reload it, and wait until
    it runs the new generation. Raises `EnvironmentProblem` naming the host, with the shaper's output."""
    host = ns.remote
    name = _container(spec, ns)
    try:
        previous = ShaperSpec.from_json(local_path.read_text()).generation
    except FileNotFoundError:
        previous = 0
    spec.generation = previous + 1
    spec.write(local_path)  # the controller's copy: what was sent, and where the next generation counts from
    ledger.record(_entry(ns, name))
    path = remote_spec_path(spec, local_path)
    q = shlex.quote
    folder = str(Path(path).parent)
    run_cmd = shlex.join(multi.agent_run(ledger.run_dir, spec.run_id, ns.node, SHAPER_CAPS,
                                         ["-d", "--name", name, "-v", f"{folder}:{folder}"],
                                         ["--spec", path, "--marker", name])) + " >/dev/null"
    polls = int(START_TIMEOUT_S / 0.02)
    status = f"$(docker inspect -f '{{{{.State.Status}}}}' {q(name)} 2>/dev/null)"
    script = "\n".join([
        "set -u", f"mkdir -p {q(str(Path(path).parent))}",
        f"cat > {q(path)}.tmp <<'SPLITLAB_SPEC'", spec.to_json(), "SPLITLAB_SPEC", f"mv {q(path)}.tmp {q(path)}",
        f"state={status} || state=none",
        'case "$state" in',
        f"  running) docker kill -s HUP {q(name)} >/dev/null || exit 3 ;;",
        f"  none) rm -f {q(path)}.gen; {run_cmd} || exit 3 ;;",
        f"  *) echo \"it has ended ($state); its last output:\"; docker logs --tail 30 {q(name)} 2>&1; exit 5 ;;",
        "esac",
        f"i=0; while [ $i -lt {polls} ]; do",
        f"  g=$(cat {q(path)}.gen 2>/dev/null || true)",
        f"  [ -n \"$g\" ] && [ \"$g\" -ge {spec.generation} ] && exit 0",
        f"  [ {status} = running ] || break",
        "  i=$((i+1)); sleep 0.02", "done",
        f"echo \"it does not run generation {spec.generation}; its last output:\"",
        f"docker logs --tail 30 {q(name)} 2>&1; exit 4"])
    try:
        host.run_script(script + "\n", timeout_s=START_TIMEOUT_S + 30,
                        what=f"shaper for {ns.node} (generation {spec.generation})")
    except CommandFailed as exc:
        raise EnvironmentProblem(f"the shaper for {ns.node} on host {ns.host} (container {name}): "
                                 f"{exc.output.strip()[-1500:]}",
                                 hint="'splitlab doctor --inventory FILE' checks NFQUEUE on every host") from None


def fetch_stats(host: RemoteHost, run_dir: Path, local_path: Path) -> None:
    """Copy the counters the shaper wrote on its host next to the controller's copy of its spec (nothing when
    it wrote none)."""
    remote = f"{multi.read_state(run_dir)['remote_dir']}/chaos/{local_path.name}.stats"
    proc = host.run(["cat", remote], check=False, timeout_s=30)
    if proc.returncode == 0 and proc.stdout.strip():
        try:
            json.loads(proc.stdout)
        except json.JSONDecodeError:
            return  # written atomically: a bad file is not ours to report as counters
        local_path.with_name(local_path.name + ".stats").write_text(proc.stdout)


def stop_argv(name: str) -> list[str]:
    """How the ledger ends a shaper container (SIGTERM releases every held packet); it is removed after."""
    return ["docker", "stop", "-t", str(STOP_GRACE_S), name]
