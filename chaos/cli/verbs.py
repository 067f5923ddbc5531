"""What every verb of the `splitlab` tree shares: the parser class (one-line errors, help computed on demand),
the registration of a verb, the common flags with one spelling each, and the progress log.

Output rule of every verb: results go to stdout, progress lines to stderr, so that `--json` leaves nothing but
JSON on stdout.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn, Sequence

Command = Callable[[argparse.Namespace], int]


class Formatter(argparse.HelpFormatter):
    """Wraps the paragraphs of a description or epilog; keeps a paragraph with indented lines (examples) as
    written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for para in text.split("\n\n"):
            lines = para.splitlines()
            if any(line.startswith(" ") for line in lines):
                paragraphs.append("\n".join(indent + line for line in lines))
            else:
                paragraphs.append(super()._fill_text(para, width, indent))
        return "\n\n".join(paragraphs)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (`PROG: error: WHAT (see 'PROG --help')`, exit 2) and whose
    epilog may be a callable, computed only when the help is shown (so that building the tree imports nothing
    heavy)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        sys.exit(2)

    def format_help(self) -> str:
        if callable(self.epilog):
            self.epilog = self.epilog()
        return super().format_help()


def add_verb(sub: argparse._SubParsersAction, name: str, help_: str, func: Command | None, *,
             description: str | None = None, examples: Sequence[str] = (),
             epilog: str | Callable[[], str] | None = None, interrupted: str = "interrupted") -> Parser:
    """A verb of `sub` running `func(args) -> exit code` (None: a verb with sub-verbs, see `subverbs`);
    `examples` become the help's epilog (or `epilog`, text or a callable giving it). `interrupted` is what
    Ctrl-C prints (exit 130)."""
    if examples:
        epilog = "examples:\n  " + "\n  ".join(examples)
    p = sub.add_parser(name, help=help_, description=description or help_, epilog=epilog,
                       formatter_class=Formatter)
    p.set_defaults(func=func, verb_parser=p, interrupted=interrupted)
    return p


def subverbs(p: argparse.ArgumentParser, metavar: str = "VERB") -> argparse._SubParsersAction:
    """The sub-verbs of a verb (`splitlab chaos partition`); one of them is required."""
    return p.add_subparsers(required=True, metavar=metavar)


def run_id_flag(p: argparse.ArgumentParser, help_: str = "the run (default: the only one)") -> None:
    p.add_argument("--run-id", metavar="ID", help=help_)


def seed_flag(p: argparse.ArgumentParser, help_: str, *, default: int | None = None, required: bool = False) -> None:
    p.add_argument("--seed", type=int, default=default, required=required, metavar="N", help=help_)


def json_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON only (progress goes to stderr)")


def inventory_flag(p: argparse.ArgumentParser, help_: str) -> None:
    p.add_argument("--inventory", metavar="FILE", help=help_)


def nodes_flag(p: argparse.ArgumentParser, default: int) -> None:
    p.add_argument("-n", "--nodes", type=int, default=default, metavar="N",
                   help=f"number of nodes n1..nN (default {default})")


def node_kind_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node-kind", default="splitlab", metavar="KIND",
                   help="the node implementation: splitlab (default: splitlab's own node) or jgroups (the real "
                        "JGroups 2.12.2 from Debian; NODE_CONTRACT.md)")


def sign_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sign", action="store_true",
                   help="sign every datagram with the run's key (a run of 'splitlab up --auth'; its runs/<run>/"
                        "auth.key) so it reaches the protocols; without it such a run's nodes drop what is sent "
                        "and count it as 'unauthenticated'")


def progress(text: str) -> None:
    """The progress log of every verb: one line on stderr."""
    print(text, file=sys.stderr, flush=True)
