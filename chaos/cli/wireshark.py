"""The Wireshark verbs of `splitlab`: `splitlab wireshark lua` prints the dissector of the node's wire format
(generated from the codec's message registry: chaos.wire.wireshark), `splitlab wireshark install` puts it where
Wireshark and tshark load personal Lua plugins. Exit codes: 0 done, 1 the folder cannot be written, 2 bad
arguments."""
from __future__ import annotations

import argparse
from pathlib import Path

from chaos.cli.verbs import add_verb, subverbs
from chaos.wire import wireshark


def cmd_lua(args: argparse.Namespace) -> int:
    print(wireshark.lua(), end="")
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    path = wireshark.install(Path(args.dir) if args.dir else None)
    print(f"installed the splitlab dissector: {path}\n"
          f"  tshark -r runs/<run-id>/capture.pcap -Y splitlab        # UDP port {wireshark.wire.DATA_PORT}, "
          f"and any other by its magic")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, "wireshark", "a Wireshark/tshark dissector of the node's wire format", None,
                 description="A Lua dissector of splitlab's datagrams (header, every message type with its fields, "
                             "bundles, signed datagrams), generated from node/wire.py's registry, so it never "
                             "drifts from what the nodes send.")
    verbs = subverbs(p)
    add_verb(verbs, "lua", "print the dissector's Lua source", cmd_lua,
             examples=["splitlab wireshark lua > splitlab.lua && tshark -X lua_script:splitlab.lua -r run.pcap"])
    install = add_verb(verbs, "install", "write the dissector into Wireshark's personal Lua plugin folder",
                       cmd_install, examples=["splitlab wireshark install",
                                              "splitlab wireshark install --dir ~/.config/wireshark/plugins"])
    install.add_argument("--dir", metavar="DIR",
                         help=f"the plugin folder (default {wireshark.DEFAULT_PLUGIN_DIR}; `tshark -G folders` "
                              f"lists Wireshark's)")
