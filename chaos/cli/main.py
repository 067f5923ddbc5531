"""The `splitlab` command: one argparse tree for every verb, each room's verbs added by its module under
chaos/cli/ (cluster, faults, scenarios, analysis, fuzz, live, wireshark), and the one place where errors become
exit codes.

Exit codes: 0 success, 1 the environment or a check failed, 2 bad usage. Errors are one line (plus a hint).
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from chaos.cli import analysis, cluster, faults, fuzz, hosts, live, node, scenarios, spark, wireshark
from chaos.cli.verbs import Parser
from node.errors import SplitlabError, report_error

ROOMS = (cluster, node, hosts, faults, scenarios, analysis, spark, fuzz, live, wireshark)


def build_parser() -> Parser:
    """The whole tree: `splitlab VERB [SUBVERB] ...` with every verb's real arguments and help."""
    parser = Parser(prog="splitlab", description="A testbed for reliable-messaging protocols under network faults.",
                    epilog="'splitlab VERB --help' shows a verb's arguments and examples.")
    sub = parser.add_subparsers(required=True, metavar="VERB")
    for room in ROOMS:
        room.add_parsers(sub)
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse `argv` (without the program name). Raises `SystemExit` (0 after --help, 2 for bad arguments, with
    one line on stderr naming the verb)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(list(argv))
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
