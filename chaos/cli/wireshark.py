"""The Wireshark verbs of `splitlab`: `splitlab wireshark lua` prints a dissector (`--kind splitlab`, the default:
the node's wire format, generated from the codec's message registry: chaos.wire.wireshark; `--kind jgroups`: the
real JGroups 2.12.2's datagrams, generated from jgnode.layout: chaos.wire.wireshark_jgroups), `splitlab wireshark
install` puts both (or the `--kind` given) where Wireshark and tshark load personal Lua plugins. Exit codes: 0
done, 1 the folder cannot be written, 2 bad arguments."""
from __future__ import annotations

import argparse
from pathlib import Path

from chaos.cli.verbs import add_verb, subverbs
from chaos.wire import wireshark, wireshark_jgroups
from chaos.wire.lua import DEFAULT_PLUGIN_DIR

DISSECTORS = {"splitlab": wireshark, "jgroups": wireshark_jgroups}
_FILTERS = {"splitlab": f"splitlab        # UDP port {wireshark.wire.DATA_PORT}, and any other by its magic",
            "jgroups": f"jgroups         # UDP ports {wireshark_jgroups.PORTS[0]}-{wireshark_jgroups.PORTS[1]}, "
                       f"and any other by its version (2.12)"}


def cmd_lua(args: argparse.Namespace) -> int:
    print(DISSECTORS[args.kind].lua(), end="")
    return 0


def cmd_install(args: argparse.Namespace) -> int:
    kinds = list(DISSECTORS) if args.kind == "all" else [args.kind]
    for kind in kinds:
        path = DISSECTORS[kind].install(Path(args.dir) if args.dir else None)
        print(f"installed the {kind} dissector: {path}\n"
              f"  tshark -r runs/<run-id>/capture.pcap -Y {_FILTERS[kind]}")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, "wireshark", "Wireshark/tshark dissectors of the node's wire format and of JGroups 2.12.2", None,
                 description="Lua dissectors, generated so they never drift from the codecs: splitlab's datagrams "
                             "(header, every message type with its fields, bundles, signed datagrams; from "
                             "node/wire.py's registry) and the real JGroups 2.12.2's (every header the codec "
                             "decodes, bundles; from jgnode/layout.py).")
    verbs = subverbs(p)
    lua = add_verb(verbs, "lua", "print a dissector's Lua source", cmd_lua,
                   examples=["splitlab wireshark lua > splitlab.lua && tshark -X lua_script:splitlab.lua -r run.pcap",
                             "splitlab wireshark lua --kind jgroups > jgroups.lua"])
    lua.add_argument("--kind", choices=sorted(DISSECTORS), default="splitlab",
                     help="which wire: splitlab's own (default) or the real JGroups 2.12.2's")
    install = add_verb(verbs, "install", "write the dissectors into Wireshark's personal Lua plugin folder",
                       cmd_install, examples=["splitlab wireshark install",
                                              "splitlab wireshark install --kind jgroups",
                                              "splitlab wireshark install --dir ~/.config/wireshark/plugins"])
    install.add_argument("--kind", choices=["all", *sorted(DISSECTORS)], default="all",
                         help="which dissector (default all: both)")
    install.add_argument("--dir", metavar="DIR",
                         help=f"the plugin folder (default {DEFAULT_PLUGIN_DIR}; `tshark -G folders` lists "
                              f"Wireshark's)")
