"""The script that starts a multi-host run's nodes on one host (`chaos.hosts.multi._start_script`), run by `sh`
with `docker` as a shell function that records its calls: every node is created, connected and started, all at
once, and one node's failure fails the whole script after the others finished."""
from __future__ import annotations

import subprocess
from pathlib import Path

from chaos.hosts import datanet, multi

NODES = ["n1", "n2", "n3", "n4"]


def run_script(tmp_path: Path, fail_start_of: str | None, delay_s: float = 0.0) -> tuple[int, list[str]]:
    plan = datanet.plan("r1", ["h1"], NODES)
    script = multi._start_script("r1", NODES, NODES, plan, "img:1", "tok", "10.0.0.1", tmp_path / "run", "h1", {})
    script = script.replace("mkdir -p", "true").replace("chown -R", "true")  # not on this machine's /var/lib
    script = script.replace("/proc/sys/", f"{tmp_path}/sys/")  # nor its neighbour table (test_neighbours.py)
    log = tmp_path / "calls"
    fake = (f'docker() {{ sleep {delay_s}; echo "$1 $(date +%s.%N)" >> {log}; '
            f'case "$*" in "start splitlab-r1-{fail_start_of}") return 3;; esac; }}\n')
    done = subprocess.run(["sh", "-c", fake + script], capture_output=True, text=True, timeout=60)
    return done.returncode, log.read_text().splitlines()


def test_every_node_is_created_connected_and_started(tmp_path):
    code, calls = run_script(tmp_path, None)
    assert code == 0
    assert sorted(c.split()[0] for c in calls) == sorted(["create", "network", "start"] * len(NODES))


def test_the_nodes_start_at_once_not_one_after_the_other(tmp_path):
    code, calls = run_script(tmp_path, None, delay_s=0.5)
    times = sorted(float(c.split()[1]) for c in calls)
    assert code == 0 and times[-1] - times[0] < 2.5, "12 calls of 0.5 s took 6 s one after the other"


def test_one_nodes_failure_fails_the_script_after_every_other_node_started(tmp_path):
    code, calls = run_script(tmp_path, "n2")
    assert code == 1
    assert sum(c.startswith("start") for c in calls) == len(NODES)
