"""`splitlab chaos VERB ...` and `splitlab heal`: the Net interface on the command line.

A verb applies its fault and exits, leaving the fault in place (undo it with its pair verb, or everything with
`splitlab heal`); with `--duration-s S` or `--hold` the command keeps the fault for that long (or until
Ctrl-C / SIGTERM) and then heals everything it applied. Every change is in the run's ledger before it is
applied, so `splitlab heal` cleans up also after this command was killed.

Exit codes: 0 done, 1 the environment failed, 2 bad usage; errors are one line plus a hint.
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Callable

from chaos.grudge import DISTRIBUTIONS, FAULT_FIELDS
from node.errors import SplitlabError, UsageError, report_error

EXAMPLES = {
    "partition": ["splitlab chaos partition 'n2<-n1'            # n2 drops what n1 sends (one way)",
                  "splitlab chaos partition 'n1,n2|n3,n4,n5'    # symmetric split",
                  "splitlab chaos partition isolate:n3 --duration-s 10",
                  "splitlab chaos partition ring --seed 7"],
    "heal": ["splitlab chaos heal                          # end the partition (link faults stay)"],
    "slow": ["splitlab chaos slow --delay-ms 20 --jitter-ms 5",
             "splitlab chaos slow --delay-ms 50 --links 'n1->n2;n3<->n1' --backend nfqueue",
             "splitlab chaos slow --delay-ms 100 --jitter-ms 20 --distribution normal --delay-corr-pct 25"],
    "fast": ["splitlab chaos fast                          # end every link and message fault"],
    "flaky": ["splitlab chaos flaky --loss-pct 10 --links 'n1->n2'",
              "splitlab chaos flaky --loss-pct 5 --backend iptables"],
    "shape": ["splitlab chaos shape 'n1->n2:delay_ms=20,loss_pct=1;n2<->n3:duplicate_pct=10,delay_ms=5,reorder_pct=25'"],
    "msg-fault": ["splitlab chaos msg-fault --type Heartbeat --from n1 --to n2 --action drop",
                  "splitlab chaos msg-fault --type UnicastAck --from n2 --to n1 --action drop-first:3 --conn-id 4",
                  "splitlab chaos msg-fault --type UnicastData --from n1 --to n2 --action hold:2000 --seqno 1"],
    "inject": ["splitlab chaos inject --from n2 --to n1 --type UnicastAck --field seqno=5 --field conn_id=3",
               "splitlab chaos inject --pcap runs/RUN/chaos/capture.pcap     # replay captured packets"],
    "capture": ["splitlab chaos capture --duration-s 10 --out /tmp/run.pcap"],
    "pause": ["splitlab chaos pause n3", "splitlab chaos pause n3 --sigstop --duration-s 5"],
    "resume": ["splitlab chaos resume n3"],
    "kill": ["splitlab chaos kill n2"],
    "start": ["splitlab chaos start n2                     # and re-apply the run's faults to it"],
    "restart": ["splitlab chaos restart n2                   # SIGKILL, then start again with the run's faults"],
}


class _Stop(Exception):
    """SIGTERM while holding a fault."""


def _log(text: str) -> None:
    print(text, flush=True)


def _links(text: str | None, nodes: list[str]) -> list[tuple[str, str]] | None:
    from chaos.grudge import parse_links

    return None if text is None else parse_links(text, nodes)


def _net(args: argparse.Namespace):
    from chaos import cluster
    from chaos.net import Net

    run_id = cluster.resolve_run_id(args.run_id)
    return Net(cluster.load(run_id), seed=args.seed, backend=getattr(args, "backend", None), log=_log,
               verify=not args.no_verify)


def _hold(args: argparse.Namespace, net) -> None:
    """Keep the fault for --duration-s (or until a signal with --hold), then heal everything."""
    if not (args.hold or args.duration_s):
        print(f"fault left in place; undo with its pair verb or 'splitlab heal --run-id {net.run_id}'")
        return

    def stop(signum: int, _frame: object) -> None:
        raise _Stop()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        deadline = time.monotonic() + (args.duration_s or float("inf"))
        while time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    except (KeyboardInterrupt, _Stop):
        print("interrupted: healing")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the heal short
        try:
            net.heal_all()
        finally:
            signal.signal(signal.SIGTERM, previous)


def cmd_partition(args: argparse.Namespace) -> int:
    net = _net(args)
    net.partition(args.grudge)
    _hold(args, net)
    return 0


def cmd_heal_partition(args: argparse.Namespace) -> int:
    _net(args).heal()
    return 0


def cmd_slow(args: argparse.Namespace) -> int:
    net = _net(args)
    net.slow(args.delay_ms, args.jitter_ms, links=_links(args.links, net.nodes), distribution=args.distribution,
             delay_corr_pct=args.delay_corr_pct)
    _hold(args, net)
    return 0


def cmd_fast(args: argparse.Namespace) -> int:
    _net(args).fast()
    return 0


def cmd_flaky(args: argparse.Namespace) -> int:
    net = _net(args)
    net.flaky(args.loss_pct, links=_links(args.links, net.nodes))
    _hold(args, net)
    return 0


def cmd_shape(args: argparse.Namespace) -> int:
    net = _net(args)
    net.shape(args.matrix)
    _hold(args, net)
    return 0


def cmd_msg_fault(args: argparse.Namespace) -> int:
    from chaos.dissect import message_type
    from chaos.shaper.msgrules import MsgRule, parse_action

    net = _net(args)
    action, ms, n = parse_action(args.action)
    for node in (args.src, args.dst):
        net.cluster.node(node)
    net.msg_fault(MsgRule(type=message_type(args.type), src=args.src, dst=args.dst, action=action, ms=ms, n=n,
                          conn_id=args.conn_id, seqno=args.seqno))
    _hold(args, net)
    return 0


def _fields(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise UsageError(f"--field {item!r} must be name=integer, e.g. --field seqno=5")
        out[key.strip()] = int(value)
    return out


def cmd_inject(args: argparse.Namespace) -> int:
    from chaos import capture, inject

    net = _net(args)
    if args.pcap:
        sent = net.replay([pkt for _, pkt in capture.read_pcap(Path(args.pcap))])
        print(f"replayed {sent} packet(s) from {args.pcap}")
        return 0
    if not (args.src and args.dst and args.type):
        raise UsageError("inject needs --from, --to and --type (or --pcap FILE to replay)")
    for node in (args.src, args.dst):
        net.cluster.node(node)
    net.inject(args.src, args.dst, [inject.message(args.type, **_fields(args.field))], count=args.count)
    return 0


def cmd_capture(args: argparse.Namespace) -> int:
    net = _net(args)
    out = Path(args.out) if args.out else net.cluster.run_dir / "chaos" / "capture.pcap"
    with net.capture(out) as cap:
        try:
            time.sleep(args.duration_s)
        except KeyboardInterrupt:
            pass  # Ctrl-C ends the capture early; the file is closed below
    print(f"captured {cap.count} packet(s) into {out}")
    return 0


def _node_verb(method: str) -> Callable[[argparse.Namespace], int]:
    def cmd(args: argparse.Namespace) -> int:
        net = _net(args)
        if method == "pause":
            net.pause(args.node, method="sigstop" if args.sigstop else "docker")
        else:
            getattr(net, method)(args.node)
        if method in ("pause", "kill"):
            _hold(args, net)
        return 0
    return cmd


def _common(p: argparse.ArgumentParser, hold: bool = False, backend: bool = False) -> None:
    p.add_argument("--run-id", help="the run (default: the only one)")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    p.add_argument("--no-verify", action="store_true", help="do not probe that a partition/heal took effect")
    if backend:
        p.add_argument("--backend", choices=["netem", "nfqueue", "iptables"],
                       help="force a link-fault backend (default: probed: netem, else nfqueue, else iptables "
                            "for pure loss)")
    if hold:
        p.add_argument("--duration-s", type=float, default=0.0,
                       help="keep the fault this long, then heal everything (also on Ctrl-C / SIGTERM)")
        p.add_argument("--hold", action="store_true", help="keep the fault until Ctrl-C / SIGTERM, then heal")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="splitlab chaos", description="Network and process faults on a run. "
                                     "Verbs come in pairs: partition/heal, slow|flaky|shape|msg-fault/fast, "
                                     "pause/resume, kill/start; 'splitlab heal' undoes everything.")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def add(name: str, help_: str, func, **kw) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_, epilog="examples:\n  " + "\n  ".join(EXAMPLES[name]),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        _common(p, **kw)
        p.set_defaults(func=func)
        return p

    p = add("partition", "cut data traffic as a grudge says (iptables on the receivers)", cmd_partition, hold=True)
    p.add_argument("grudge", help="'n2<-n1', 'n1->n2', 'n1<->n2', 'n1,n2|n3', 'isolate:n1', bisect, bridge, ring, "
                                  "majority, minority-third; ';' unites clauses")
    add("heal", "end the partition (link faults stay; see fast)", cmd_heal_partition)
    p = add("slow", "delay (and jitter) data traffic on links", cmd_slow, hold=True, backend=True)
    p.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--distribution", default="uniform", help="of the jitter: " + " | ".join(DISTRIBUTIONS))
    p.add_argument("--delay-corr-pct", type=float, default=0.0, help="correlation of each delay with the last")
    p.add_argument("--links", help="'n1->n2;n2<->n3;*->n1' (default: every link)")
    add("fast", "end every link fault and message fault", cmd_fast)
    p = add("flaky", "lose a share of data traffic on links", cmd_flaky, hold=True, backend=True)
    p.add_argument("--loss-pct", type=float, required=True)
    p.add_argument("--links", help="'n1->n2;n2<->n3;*->n1' (default: every link)")
    p = add("shape", "set the whole per-link fault matrix", cmd_shape, hold=True, backend=True)
    p.add_argument("matrix", help="'src->dst:field=value,...;...' fields: " + " ".join(FAULT_FIELDS) +
                                  " (rate may be written rate=1mbit)")
    p = add("msg-fault", "a fault on one message type between two nodes (NFQUEUE shaper)", cmd_msg_fault, hold=True)
    p.add_argument("--type", required=True, help="wire message type: Heartbeat, Ping, UnicastAck, ... or a code")
    p.add_argument("--from", dest="src", required=True, help="sending node")
    p.add_argument("--to", dest="dst", required=True, help="receiving node")
    p.add_argument("--action", required=True,
                   help="drop | delay:MS | duplicate | hold:MS | drop-first:N | drop-nth:N")
    p.add_argument("--conn-id", type=int, help="match this conn_id only")
    p.add_argument("--seqno", type=int, help="match this seqno only")
    p = add("inject", "send a forged datagram from inside the claimed sender's namespace, or replay a pcap",
            cmd_inject)
    p.add_argument("--from", dest="src", help="claimed sender node (its real address and port are used)")
    p.add_argument("--to", dest="dst", help="receiving node")
    p.add_argument("--type", help="wire message type")
    p.add_argument("--field", action="append", default=[], help="name=value of the message (repeatable)")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--pcap", help="replay the packets of this capture instead")
    p = add("capture", "record every node's received data traffic into a pcap", cmd_capture)
    p.add_argument("--duration-s", type=float, default=10.0)
    p.add_argument("--out", help="pcap file (default: runs/<run>/chaos/capture.pcap)")
    for name, help_ in (("pause", "freeze a node (docker pause; --sigstop: SIGSTOP)"), ("resume", "unfreeze a node"),
                        ("kill", "SIGKILL a node's container"), ("start", "start a killed node again"),
                        ("restart", "SIGKILL a node's container and start it again at once")):
        p = add(name, help_, _node_verb(name), hold=name in ("pause", "kill"))
        p.add_argument("node")
        if name == "pause":
            p.add_argument("--sigstop", action="store_true", help="SIGSTOP the node process instead")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`splitlab chaos VERB ...`; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SplitlabError as exc:
        return report_error(f"splitlab chaos {args.verb}", exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def heal_main(argv: list[str] | None = None) -> int:
    """`splitlab heal [--run-id ID] [--run-dir DIR]`: undo everything the run's ledger lists."""
    parser = argparse.ArgumentParser(prog="splitlab heal", description="Undo every fault the run's ledger lists "
                                     "(rules, chains, qdiscs, shaper processes, paused and killed nodes), also "
                                     "after the controller was killed. Idempotent.",
                                     epilog="examples:\n  splitlab heal\n  splitlab heal --run-id 261121-221530-a3f9",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-id", help="the run (default: the only one)")
    parser.add_argument("--run-dir", help="the run directory, when its containers are gone")
    parser.add_argument("--no-verify", action="store_true", help="do not probe that all nodes pass again")
    args = parser.parse_args(argv)
    try:
        from chaos import cluster
        from chaos.naming import check_run_id
        from chaos.net import heal_run

        if args.run_dir:
            run_dir = Path(args.run_dir)
            run_id = check_run_id(args.run_id or run_dir.name)
        else:
            run_id = cluster.resolve_run_id(args.run_id)
            try:
                run_dir = cluster.load(run_id).run_dir
            except UsageError:
                run_dir = cluster.runs_root() / run_id
                if not run_dir.is_dir():
                    raise UsageError(f"no run {run_id!r}: no containers and no directory {run_dir}",
                                     hint="see 'splitlab ps', or give --run-dir") from None
        heal_run(run_dir, run_id, log=_log, verify=not args.no_verify)
        return 0
    except SplitlabError as exc:
        return report_error("splitlab heal", exc)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
