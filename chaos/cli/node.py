"""The node verbs of `splitlab`: `node check IMAGE`, the node contract's conformance check (NODE_CONTRACT.md)."""
from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from chaos.cli.verbs import add_verb, progress, subverbs

console = Console(highlight=False)
_STYLE = {"keeps": "[green]keeps[/]", "lacks": "[red]lacks[/]", "optional": "[yellow]optional, not offered[/]",
          "not reached": "[red]not reached[/]"}


def cmd_check(args: argparse.Namespace) -> int:
    from chaos.cluster import kinds
    from chaos.contract import conformance

    image = args.image or kinds.kind(args.kind).built_image()
    items = conformance.check(image, progress)
    table = Table(title=f"splitlab node check {image}")
    for col in ("section", "item", "status", "detail"):
        table.add_column(col)
    for item in items:
        table.add_row(item.section, item.name, _STYLE[item.status], item.detail)
    console.print(table)
    failed = [i for i in items if i.failed]
    console.print(f"[red]{image} lacks {len(failed)} item(s) of the node contract[/]" if failed
                  else f"{image} keeps the node contract (NODE_CONTRACT.md)")
    return 1 if failed else 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, "node", "the node contract: check an image against it", None)
    verbs = subverbs(p)
    p = add_verb(verbs, "check", "start two nodes of IMAGE on real containers and say, item by item, what of the "
                 "node contract (NODE_CONTRACT.md) it keeps and lacks; exit 1 when it lacks a required item",
                 cmd_check, examples=["splitlab node check splitlab-node:latest",
                                      "splitlab node check --kind jgroups   # the current JGroups node image",
                                      "splitlab node check my-protocol-node:1.2"])
    p.add_argument("image", nargs="?", help="the image (default: the current image of --kind)")
    p.add_argument("--kind", default="splitlab", metavar="KIND",
                   help="without IMAGE: check the current image of this node kind (splitlab, jgroups)")
