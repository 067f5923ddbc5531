"""The live-metrics verbs of `splitlab`: `metrics serve` (the run's fault matrix for Prometheus) and `top` (the
nodes' metrics and the fault matrix in the terminal, every second)."""
from __future__ import annotations

import argparse
import threading

from rich.console import Console

from chaos.cli.verbs import add_verb, progress, run_id_flag, subverbs

DEFAULT_PORT = 9310


def cmd_metrics_serve(args: argparse.Namespace) -> int:
    from chaos.cluster import lifecycle
    from chaos.live import faultmatrix

    run_id = lifecycle.resolve_run_id(args.run_id)
    server = faultmatrix.serve(lifecycle.load(run_id).run_dir, args.port)
    print(f"fault matrix of run {run_id}: http://127.0.0.1:{server.server_port}/metrics", flush=True)
    progress("serving until Ctrl-C")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    from chaos.cluster import lifecycle
    from chaos.live import top

    console = Console(highlight=False)
    if not console.is_terminal:  # a pipe or a file: wide enough for a row per line
        console = Console(highlight=False, width=160)
    watcher = top.Watcher(lifecycle.resolve_run_id(args.run_id))
    return top.watch(watcher, console, once=args.once)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, "metrics", "live metrics for Prometheus (each node serves its own /metrics on the control API)",
                 None)
    verbs = subverbs(p)
    q = add_verb(verbs, "serve", "serve the run's live fault matrix (which link has which fault, since when, verified "
                 "or not) in the Prometheus text format on 127.0.0.1", cmd_metrics_serve,
                 examples=["splitlab metrics serve --port 9310",
                           "curl -s http://127.0.0.1:9310/metrics | grep splitlab_fault_active"])
    run_id_flag(q)
    q.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="P",
                   help=f"TCP port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free port)")

    p = add_verb(sub, "top", "the nodes' live metrics and the run's fault matrix, refreshed every second "
                 "(Ctrl-C quits)", cmd_top, examples=["splitlab top", "splitlab top --run-id ID --once"])
    run_id_flag(p)
    p.add_argument("--once", action="store_true", help="print one frame and exit")
