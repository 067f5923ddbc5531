"""The `splitlab` command: one argparse tree for every verb, each room's verbs added by its module under
chaos/cli/ (cluster, faults, scenarios, analysis, fuzz, live, wireshark), and the one place where errors become
exit codes.

A command names its verb first, so only that verb's room is imported (`VERB_ROOMS`): the rooms import what their
verbs use (the fault verbs the docker SDK, paramiko and fabric through the host ledger: 0.17 s), and a served
`splitlab analyze` started in 0.66 s of imports with every room against 0.34 s with its own. `--help`, no verb or
an unknown one build the whole tree.

Exit codes: 0 success, 1 the environment or a check failed, 2 bad usage. Errors are one line (plus a hint).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import Sequence

from chaos.cli.verbs import Parser
from node.errors import SplitlabError, report_error

ROOMS = ("cluster", "node", "hosts", "faults", "scenarios", "analysis", "spark", "fuzz", "live", "wireshark")
# the room (module under chaos/cli/) that adds each top-level verb; a unit test keeps it equal to what they add
VERB_ROOMS = {
    "compose-template": "cluster", "doctor": "cluster", "down": "cluster", "images": "cluster", "ps": "cluster",
    "up": "cluster", "node": "node", "bed": "hosts", "chaos": "faults", "heal": "faults", "demo": "scenarios",
    "replay": "scenarios", "run": "scenarios", "shrink": "scenarios", "sim": "scenarios", "torture": "scenarios",
    "analyze": "analysis", "spark": "analysis", "spark-cluster": "spark", "fuzz": "fuzz", "metrics": "live",
    "top": "live", "wireshark": "wireshark",
}


def room(name: str) -> ModuleType:
    """The module of room `name` (one of `ROOMS`)."""
    return importlib.import_module(f"chaos.cli.{name}")


def build_parser(rooms: Sequence[str] = ROOMS) -> Parser:
    """The tree of `rooms` (default: the whole tree): `splitlab VERB [SUBVERB] ...` with every verb's real
    arguments and help."""
    parser = Parser(prog="splitlab", description="A testbed for reliable-messaging protocols under network faults.",
                    epilog="'splitlab VERB --help' shows a verb's arguments and examples.")
    sub = parser.add_subparsers(required=True, metavar="VERB")
    for name in rooms:
        room(name).add_parsers(sub)
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse `argv` (without the program name), building only the tree of its verb's room when it names one.
    Raises `SystemExit` (0 after --help, 2 for bad arguments, with one line on stderr naming the verb)."""
    argv = list(argv)
    parser = build_parser([VERB_ROOMS[argv[0]]] if argv and argv[0] in VERB_ROOMS else ROOMS)
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported by the verb that got them, not by the top level
        getattr(args, "verb_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run `splitlab` with `argv` (default: the process's); returns the exit code."""
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help (0) and bad arguments (2)
        return int(exc.code or 0)
    prog = args.verb_parser.prog
    try:
        return args.func(args)
    except SplitlabError as exc:
        return report_error(prog, exc)
    except KeyboardInterrupt:
        print(f"{prog}: {args.interrupted}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
