"""Shrinking for `splitlab fuzz --shrink`: the datagrams blamed for a failure, delta-debugged down to the few that
cause it (`chaos.ddmin.ddmin`, shared with `splitlab shrink`). Every trial restarts every member (`_fresh`: no
state a datagram left survives), replays a subset and pokes the failure with a small workload (`_breaks`): a
target that hung or died must answer /health and keep its process; a stuck stream must deliver again.
"""
from __future__ import annotations

import time

from chaos.ddmin import MAX_TRIALS, ddmin
from chaos.fuzz import gen as fuzzgen
from chaos.cluster.lifecycle import Cluster
from chaos.fuzz.run import Culprits, Log, Outcome, Settings, _client, _views_agree, health, process_status, send_cases, states, stuck_streams
from node.errors import EnvironmentProblem


def _fresh(cluster: Cluster, settings: Settings, log: Log) -> Cluster:
    """Restart every member (SIGKILL and start; just start one whose process already ended), so that no state a
    datagram left anywhere survives, and wait until all hear all in one view; returns the reloaded cluster (new
    PIDs). Raises `EnvironmentProblem` when it does not come back."""
    from chaos.cluster import lifecycle as clusters
    from chaos.net.docker import DockerNet
    from chaos.host.proc import run as run_argv

    net = DockerNet(cluster, log=lambda _: None, verify=False)
    exited = [n for n in cluster.names if process_status(cluster, n) is not None]
    for node in cluster.names:
        if node not in exited:
            net.kill(node)
    for node in cluster.names:
        if node in exited:
            run_argv(["docker", "start", cluster.node(node).container])
        net.start(node)  # docker start (the kill's undo), then the run's faults on the new namespace
    fresh = clusters.Cluster(cluster.run_id, cluster.run_dir, cluster.token, clusters.load(cluster.run_id).nodes)
    deadline = time.monotonic() + settings.recover_timeout_s
    wrong = "no answer yet"
    while True:
        try:
            wrong = _views_agree(states(fresh, fresh.names), fresh.names)
        except EnvironmentProblem as exc:
            wrong = exc.message  # a restarted node's control API is not up yet
        if wrong is None:
            return fresh
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"the cluster did not come back within {settings.recover_timeout_s:g} s after "
                                     f"restarting every member while shrinking: {wrong}")
        time.sleep(0.25)


POKE_COUNT = 10   # messages of the shrinking trials' small workload, per kind and peer


STREAM_WAIT_S = 5.0


def _breaks(cluster: Cluster, cases: list[fuzzgen.Case], target: str, settings: Settings,
            stream: dict[str, str] | None = None) -> bool:
    """Send `cases` (to their targets), then tell whether they broke `target`: with `stream`, whether a small
    workload on that stream is still not delivered after `STREAM_WAIT_S`; else whether the target stops
    answering /health within `hang_timeout_s` or its process ends after a small workload (it unicasts and
    multicasts to every peer, each peer unicasts to it: timers and sends that a datagram broke run too)."""
    trial = Settings(**{**settings.__dict__, "targets": sorted({c.target for c in cases} | {target})})
    send_cases(cluster, cases, trial, Outcome(), None, lambda _: None)
    time.sleep(settings.settle_s)
    if stream is not None:
        return _stream_stuck(cluster, stream)
    try:
        client = _client(cluster, target, settings.hang_timeout_s)
        peers = [n for n in cluster.names if n != target]
        for peer in peers:
            client.unicast(peer, count=POKE_COUNT, size=100, rate=0)
            cluster.client(peer).unicast(target, count=POKE_COUNT, size=100, rate=0)
        if peers and client.state().get("layers", {}).get("multicast"):
            client.multicast(count=POKE_COUNT, size=100, rate=0)
    except EnvironmentProblem:
        return True
    deadline = time.monotonic() + settings.shrink_watch_s
    while True:  # a broken state may take a while to hurt (timers, merges, the history's next flush)
        time.sleep(0.5)
        if not health(cluster, target, settings.hang_timeout_s)["ok"] or process_status(cluster, target):
            return True
        if time.monotonic() > deadline:
            return False


def _stream_stuck(cluster: Cluster, stream: dict[str, str]) -> bool:
    """Send `POKE_COUNT` messages on `stream` (sender to receiver, unicast or multicast); True when the stream is
    still stuck (`stuck_streams`) after `STREAM_WAIT_S`."""
    sender, receiver = stream["sender"], stream["receiver"]
    client = cluster.client(sender)
    if stream["layer"] == "unicast":
        client.unicast(receiver, count=POKE_COUNT, size=100, rate=0)
    else:
        client.multicast(count=POKE_COUNT, size=100, rate=0)
    deadline = time.monotonic() + STREAM_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.25)
        stuck = stuck_streams(states(cluster, [sender, receiver]))
        if not any((s["sender"], s["receiver"], s["layer"]) == (sender, receiver, stream["layer"]) for s in stuck):
            return False
    return True


def shrink(cluster: Cluster, culprits: Culprits, settings: Settings, log: Log) -> tuple[Culprits, Cluster]:
    """Delta-debug the suspects of a target that hung or died, or of a stuck stream (`ddmin`). Every trial starts
    from a fresh cluster (every member restarted), sends a subset and pokes the target or the stream with a small
    workload (`_breaks`). First the target must survive a trial without datagrams and break with all suspects.
    The result is `confirmed` (it broke the target from a fresh start). Leaves a fresh cluster; returns it."""
    target, suspects = culprits.target, list(culprits.cases)
    state = {"cluster": cluster, "trials": 0}

    def breaks(cases: list[fuzzgen.Case]) -> bool:
        state["cluster"] = _fresh(state["cluster"], settings, log)
        state["trials"] += 1
        broke = _breaks(state["cluster"], cases, target, settings, culprits.stream)
        log(f"shrink: trial {state['trials']}: {len(cases)} datagram(s) {'break' if broke else 'spare'} {target}")
        return broke

    note, confirmed = "", False
    if breaks([]):
        note = " (shrinking stopped: the target breaks from a fresh start without any datagram)"
    elif not breaks(suspects):
        note = " (shrinking stopped: the suspects do not break the target from a fresh start)"
    else:
        suspects, minimal = ddmin(suspects, breaks)
        confirmed = True
        if not minimal:
            note = f" (shrinking stopped after {MAX_TRIALS} trials)"
    final = _fresh(state["cluster"], settings, log)
    log(f"shrink: {len(suspects)} datagram(s) after {state['trials']} trials; every member restarted")
    return Culprits(target, culprits.check, culprits.symptom + note, suspects, confirmed, culprits.stream), final
