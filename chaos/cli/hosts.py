"""The test-bed verbs of `splitlab`: `bed up` starts lab hosts as containers (sshd and a Docker engine each) and
writes their inventory; `bed down` removes them. For trying and testing multi-host runs on one machine."""
from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from chaos.cli.verbs import add_verb, progress, subverbs

console = Console(highlight=False)
DEFAULT_DIR = "runs/bed"


def cmd_bed_up(args: argparse.Namespace) -> int:
    from chaos.hosts import bed

    inventory = bed.up(Path(args.dir), args.hosts, log=progress)
    console.print(f"inventory: {inventory.path}")
    console.print(f"try: splitlab up --inventory {inventory.path} -n 6    stop with: splitlab bed down --dir {args.dir}")
    return 0


def cmd_bed_down(args: argparse.Namespace) -> int:
    from chaos.hosts import bed

    count = bed.down(Path(args.dir))
    console.print(f"bed {args.dir}: removed {count} host(s)")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, "bed", "a test bed of lab hosts as containers (sshd and Docker each), for multi-host runs",
                 None)
    verbs = subverbs(p)
    q = add_verb(verbs, "up", "start the bed's hosts and write their inventory DIR/hosts.yaml", cmd_bed_up,
                 examples=["splitlab bed up --hosts 3", "splitlab up --inventory runs/bed/hosts.yaml -n 6"])
    q.add_argument("--hosts", type=int, default=3, metavar="N", help="number of hosts (default 3, at most 8)")
    q.add_argument("--dir", default=DEFAULT_DIR, help=f"the bed's directory (default {DEFAULT_DIR})")
    q = add_verb(verbs, "down", "remove the bed's hosts, network and engine directories", cmd_bed_down,
                 examples=["splitlab bed down"])
    q.add_argument("--dir", default=DEFAULT_DIR, help=f"the bed's directory (default {DEFAULT_DIR})")
