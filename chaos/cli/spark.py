"""The Spark cluster verbs of `splitlab`: `splitlab spark-cluster up | down | status` start, stop and show a Spark
standalone master and workers on 127.0.0.1 (pipeline.standalone) for `splitlab analyze RUN --master spark://...`.

(`splitlab spark up | down | status`, in chaos/cli/analysis.py, is the warm analysis service: one driver. It can
run on this cluster: `splitlab spark up --master spark://127.0.0.1:7077`.)

The cluster's state directory is `$SPLITLAB_SPARK_DIR`, else `spark/` under the runs root (`$SPLITLAB_RUNS_DIR`,
else ./runs). Exit codes: 0 done, 1 the machine cannot (no Java, a port taken, workers not up in time; for
`status`: no cluster runs), 2 bad arguments or a cluster already up.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from chaos.cli.verbs import add_verb, progress, subverbs

DESCRIPTION = ("A Spark standalone cluster on this machine, for the analysis: a master and workers started from "
               "the Spark that pyspark ships, bound to 127.0.0.1, each a detached process in its own process group, "
               "with pid and log files in the state directory ($SPLITLAB_SPARK_DIR, else <runs root>/spark).")


def state_dir() -> Path:
    """`$SPLITLAB_SPARK_DIR`, else `<runs root>/spark`."""
    from pipeline.standalone import STATE_DIR_ENV

    configured = os.environ.get(STATE_DIR_ENV)
    if configured:
        return Path(configured).resolve()
    from chaos.cluster.lifecycle import runs_root

    return runs_root() / "spark"


def show_cluster(state: dict[str, Any]) -> None:
    answers = "" if state["master_answers"] else " (the master does not answer now)"
    print(f"{state['master_url']}: {state['workers_alive']} of {state['workers']} worker(s) alive{answers}, "
          f"{state['cores']} cores ({state['cores_used']} in use), {state['memory_mb']} MiB for executors, "
          f"web UI {state['webui_url']}")
    apps = ", ".join(state["active_apps"]) or "none"
    print(f"applications: {apps}; {len(state['processes'])} processes; state and logs in {state['state_dir']}")


def cmd_up(args: argparse.Namespace) -> int:
    from pipeline import standalone

    state = standalone.start(state_dir(), workers=args.workers, cores_per_worker=args.cores_per_worker,
                             memory_per_worker=args.memory_per_worker, master_port=args.port,
                             webui_port=args.webui_port, timeout_s=args.timeout_s, log=progress)
    url = state["master_url"]
    print(url)  # the first line alone: URL=$(splitlab spark-cluster up | head -1)
    show_cluster(state)
    print(f"analyse a run on it:  splitlab analyze runs/<run-id> --master {url}\n"
          f"keep a warm driver on it:  splitlab spark up --master {url}\n"
          f"stop it:  splitlab spark-cluster down")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from pipeline import standalone

    where = state_dir()
    stopped = standalone.stop(where, grace_s=args.grace_s)
    if stopped is None:
        print(f"no Spark cluster runs from {where}")
    elif not stopped["processes"]:
        print(f"no Spark cluster ran from {where}; removed what one left there")
    else:
        if stopped.get("service"):
            print(f"stopped the analysis service on {stopped['master_url']} (pid {stopped['service']['pid']})")
        print(f"stopped the Spark cluster {stopped.get('master_url') or ''} ({len(stopped['processes'])} "
              f"processes) and removed {where}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from pipeline import standalone

    where = state_dir()
    state = standalone.status(where)
    if state is None:
        print(f"no Spark cluster runs from {where}")
        return 1
    show_cluster(state)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from pipeline.standalone import (DEFAULT_CORES_PER_WORKER, DEFAULT_MASTER_PORT, DEFAULT_MEMORY_PER_WORKER,
                                     DEFAULT_WEBUI_PORT, DEFAULT_WORKERS, START_TIMEOUT_S, STOP_GRACE_S)

    p = add_verb(sub, "spark-cluster", "a Spark standalone cluster on this machine (master and workers) to analyse on",
                 None, description=DESCRIPTION)
    verbs = subverbs(p)
    up = add_verb(verbs, "up", "start a master and workers; print the master URL once every worker is alive", cmd_up,
                  interrupted="interrupted: what it had started is stopped",
                  examples=["splitlab spark-cluster up",
                            "splitlab spark-cluster up --workers 3 --cores-per-worker 2 --memory-per-worker 2g",
                            "splitlab spark-cluster up --port 0 --webui-port 0      # any free ports",
                            "splitlab analyze runs/261121-231947-589f --master spark://127.0.0.1:7077"])
    up.add_argument("--workers", type=int, default=DEFAULT_WORKERS, metavar="N",
                    help=f"number of workers (default {DEFAULT_WORKERS})")
    up.add_argument("--cores-per-worker", type=int, default=DEFAULT_CORES_PER_WORKER, metavar="C",
                    help=f"cores each worker offers (default {DEFAULT_CORES_PER_WORKER})")
    up.add_argument("--memory-per-worker", default=DEFAULT_MEMORY_PER_WORKER, metavar="SIZE",
                    help=f"memory each worker offers to executors, at least 1g (default {DEFAULT_MEMORY_PER_WORKER})")
    up.add_argument("--port", type=int, default=DEFAULT_MASTER_PORT, metavar="P",
                    help=f"the master's port on 127.0.0.1 (default {DEFAULT_MASTER_PORT}; 0: any free port)")
    up.add_argument("--webui-port", type=int, default=DEFAULT_WEBUI_PORT, metavar="P",
                    help=f"the master's web UI and JSON status port (default {DEFAULT_WEBUI_PORT}; 0: any free port)")
    up.add_argument("--timeout-s", type=float, default=START_TIMEOUT_S, metavar="S",
                    help=f"give up (and stop everything) when the workers are not alive after S seconds "
                         f"(default {START_TIMEOUT_S:g})")
    down = add_verb(verbs, "down", "stop the master, the workers and their executors; remove the state (idempotent)",
                    cmd_down, examples=["splitlab spark-cluster down"])
    down.add_argument("--grace-s", type=float, default=STOP_GRACE_S, metavar="S",
                      help=f"SIGTERM, then SIGKILL what is left after S seconds (default {STOP_GRACE_S:g})")
    add_verb(verbs, "status", "show the cluster: master URL, workers alive, cores (exit 1 when none runs)",
             cmd_status, examples=["splitlab spark-cluster status",
                                   "SPLITLAB_SPARK_DIR=/tmp/my-spark splitlab spark-cluster status"])
