"""The cluster verbs of `splitlab`: images, up, down, ps, doctor, compose-template (on this machine or over
the hosts of an inventory)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from chaos.cli.verbs import add_verb, inventory_flag, json_flag, node_kind_flag, nodes_flag, progress, run_id_flag
from node.errors import UsageError

console = Console(highlight=False)


def cmd_images(args: argparse.Namespace) -> int:
    from chaos.cluster import kinds

    chosen = sorted(kinds.KINDS) if args.kind == "all" else [kinds.kind(args.kind).name]
    for name, tag in kinds.build_kinds(chosen, progress, bed=args.bed).items():
        console.print(f"{name}{' node' if name in kinds.KINDS else ''} image ready: {tag}")
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from chaos.cluster import lifecycle

    inventory = None
    if args.inventory:
        from chaos.hosts.inventory import load

        inventory = load(args.inventory)
    node_env = None
    if args.pure:
        from chaos.cluster.compiled import PURE_ENV

        if args.node_kind != "splitlab":
            raise UsageError(f"--pure runs splitlab's node from its Python sources; the {args.node_kind} kind has no "
                             f"compiled build", hint="drop --pure, or use --node-kind splitlab")
        node_env = {f"n{i}": dict(PURE_ENV) for i in range(1, args.nodes + 1)}
    run = lifecycle.up(args.nodes, log=progress, wait_timeout_s=args.timeout_s, run_id=args.run_id,
                       inventory=inventory, placement=args.placement, ipv6=args.ipv6, kind=args.node_kind,
                       auth=args.auth, node_env=node_env)
    if args.json:
        print(json.dumps(lifecycle.as_dict(run), indent=2))
        return 0
    table = Table(title=f"run {run.run_id}  ({run.run_dir})")
    columns = ["name", "host", "data IP", "data IPv6", "control URL"]
    keep = [c for c in columns if (c != "host" or inventory) and (c != "data IPv6" or run.ipv6)]
    for col in keep:
        table.add_column(col)
    for node in run.nodes:
        row = dict(zip(columns, (node.name, node.host, node.data_ip, node.data_ip6, node.control_url)))
        table.add_row(*(row[c] for c in keep))
    console.print(table)
    console.print(f"token: {run.run_dir / 'token'}    stop with: splitlab down --run-id {run.run_id}")
    if args.auth:
        from chaos.cluster.authkey import KEY_FILE

        console.print(f"authenticated wire: key in {run.run_dir / KEY_FILE}; inject, replay and fuzz sign with it "
                      f"when given --sign")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from chaos.cluster import lifecycle

    run_ids = [r.run_id for r in lifecycle.ps()] if args.all else [lifecycle.resolve_run_id(args.run_id)]
    for run_id in run_ids:
        lifecycle.down(run_id, log=progress, force=args.force)
    if args.all and not run_ids:
        console.print("no splitlab run exists")
    return 0


def cmd_ps(args: argparse.Namespace) -> int:
    from chaos.cluster import lifecycle

    runs = lifecycle.ps()
    table = Table()
    for col in ("run", "nodes", "running", "hosts", "directory"):
        table.add_column(col)
    for r in runs:
        table.add_row(r.run_id, str(r.nodes), str(r.running), r.hosts or "(this machine)", r.run_dir)
    console.print(table if runs else "no splitlab run exists")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from chaos.cluster import doctor, images

    if args.inventory:
        return _doctor_inventory(args.inventory)

    def present() -> dict[str, bool]:
        return {s.tag: s.present for s in images.status()}

    checks = doctor.run_checks(doctor.system_probe, present, Path.cwd())
    table = Table(title="splitlab doctor")
    for col in ("capability", "status", "detail", "hint"):
        table.add_column(col)
    for c in checks:
        status = "[green]ok[/]" if c.ok else ("[red]missing[/]" if c.required else "[yellow]missing[/]")
        table.add_row(c.name, status, c.detail, c.hint)
    console.print(table)
    by_name = {c.name: c for c in checks}
    backends = doctor.fault_backends(by_name["sch_netem (tc netem)"], by_name["NFQUEUE"])
    console.print("fault backends on this machine:")
    for fault, backend in backends.items():
        console.print(f"  {fault}: {backend}")
    ok = doctor.can_run(checks)
    console.print("the testbed can run" if ok else "[red]the testbed cannot run: fix what is missing above[/]")
    return 0 if ok else 1


def _doctor_inventory(path: str) -> int:
    from chaos.cluster import doctor
    from chaos.hosts import doctor as host_doctor
    from chaos.hosts.inventory import load

    inventory = load(path)
    results = host_doctor.check_inventory(inventory)
    table = Table(title=f"splitlab doctor --inventory {inventory.path}")
    for col in ("host", "capability", "status", "detail", "hint"):
        table.add_column(col)
    for host in inventory.names:
        for c in results[host]:
            status = "[green]ok[/]" if c.ok else ("[red]missing[/]" if c.required else "[yellow]missing[/]")
            table.add_row(host, c.name, status, c.detail, c.hint)
    console.print(table)
    bad = [h for h in inventory.names if not doctor.can_run(results[h])]
    console.print(f"[red]host(s) {', '.join(bad)} cannot run nodes: fix what is missing above[/]" if bad
                  else f"all {len(inventory.names)} host(s) can run nodes")
    return 1 if bad else 0


def cmd_compose_template(args: argparse.Namespace) -> int:
    from chaos.cluster import compose

    sys.stdout.write(compose.HEADER + compose.dump(compose.render_template(3)))
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, "images", "build the base and node images (only what changed)", cmd_images,
                 examples=["splitlab images", "splitlab images --kind all   # also the real JGroups node's",
                           "splitlab images --kind all --bed   # and the multi-host test bed's (make test)",
                           "BASE_IMAGE=python:3.11-slim splitlab images   # skip mmdebstrap"])
    p.add_argument("--kind", default="splitlab", metavar="KIND",
                   help="the node kind whose image to build: splitlab (default), jgroups, or all")
    p.add_argument("--bed", action="store_true",
                   help="also the images of multi-host runs on the test bed (`splitlab bed up`): its hosts' and the "
                        "shaper agent's, which multi-host runs otherwise build when they first need them")

    p = add_verb(sub, "up", "start a cluster and wait until every node hears every other one", cmd_up,
                 examples=["splitlab up -n 5", "splitlab up -n 3 --run-id mytest --json",
                           "splitlab up -n 3 --ipv6   # dual-stack data network, the nodes talk IPv6",
                           "splitlab up -n 3 --auth   # every datagram signed (HMAC) with a fresh key of the run",
                           "splitlab up -n 2 --pure   # the node's Python sources, for py-spy flame graphs"])
    nodes_flag(p, 3)
    run_id_flag(p, "run id to use (default: a fresh one)")
    # '--timeout 60', the older spelling, still parses: argparse takes an unambiguous prefix of a flag
    p.add_argument("--timeout-s", type=float, default=60, metavar="S",
                   help="seconds to wait for all-hear-all (default 60)")
    json_flag(p, "the cluster (run id, directory, nodes)")
    inventory_flag(p, "start the nodes over the hosts of this inventory (YAML; see README 'Beyond one machine')")
    p.add_argument("--ipv6", action="store_true",
                   help="a dual-stack data network (a ULA /64 derived from the run id); the nodes talk over IPv6. "
                        "Partitions, process faults and the NFQUEUE shaper work on it; inject, capture and fuzz "
                        "refuse it for now")
    p.add_argument("--placement", metavar="SPEC",
                   help="with --inventory: 'round-robin' (default) or 'n1,n2@hosta;n3@hostb' naming every node")
    node_kind_flag(p)
    p.add_argument("--auth", action="store_true",
                   help="the authenticated wire: a fresh key for the run (runs/<run>/auth.key, owner only), every "
                        "datagram signed with it (HMAC-SHA256), one without its tag dropped and counted as "
                        "'unauthenticated' (the splitlab kind only)")
    p.add_argument("--pure", action="store_true",
                   help="the nodes run the node's Python sources instead of its compiled build (what py-spy's flame "
                        "graphs need: it sees nothing inside a compiled function); the splitlab kind only")

    p = add_verb(sub, "down", "remove a run's containers and networks after healing it (its directory stays)",
                 cmd_down, examples=["splitlab down --run-id 261121-221530-a3f9", "splitlab down --all"])
    run_id_flag(p)
    p.add_argument("--all", action="store_true", help="every splitlab run")
    p.add_argument("--force", action="store_true",
                   help="a run on many hosts: give up on the hosts that cannot be reached (their histories are lost; "
                        "a script that removes what is left there is written to the run directory)")

    add_verb(sub, "ps", "list runs", cmd_ps, examples=["splitlab ps"])
    p = add_verb(sub, "doctor", "what this machine (or each host of an inventory) can do, and which backend serves "
                 "each fault; exit 1 when the testbed cannot run", cmd_doctor,
                 examples=["splitlab doctor", "splitlab doctor --inventory hosts.yaml"])
    inventory_flag(p, "check every host of this inventory over SSH instead of this machine")
    add_verb(sub, "compose-template", "print the default docker-compose.yml", cmd_compose_template,
             examples=["splitlab compose-template > docker-compose.yml"])
