"""The fault verbs of `splitlab`: `splitlab chaos VERB ...` (the Net interface on the command line) and
`splitlab heal` (undo everything a run's ledger lists).

A chaos verb applies its fault and exits, leaving the fault in place (undo it with its pair verb, or everything
with `splitlab heal`); with `--duration-s S` or `--hold` the command keeps the fault for that long (or until
Ctrl-C / SIGTERM) and then heals everything it applied. Every change is in the run's ledger before it is
applied, so `splitlab heal` cleans up also after this command was killed.
"""
from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path
from typing import Any, Callable

from chaos.cli.verbs import Parser, add_verb, progress, run_id_flag, seed_flag, sign_flag, subverbs
from chaos.faults.grudge import DISTRIBUTIONS, FAULT_FIELDS, Jam, parse_links
from chaos.faults.msgrules import ACTION_HINT, MsgRule, action_spec
from chaos.net import lease
from node.errors import UsageError
from node.sim.jam import MAX_HELD, RELEASES

EXAMPLES = {
    "partition": ["splitlab chaos partition 'n2<-n1'            # n2 drops what n1 sends (one way)",
                  "splitlab chaos partition 'n1,n2|n3,n4,n5'    # symmetric split",
                  "splitlab chaos partition isolate:n3 --duration-s 10",
                  "splitlab chaos partition ring --seed 7",
                  "splitlab chaos partition 'n2<-n1' --jam --release shuffle --cap 500 --duration-s 5"],
    "unpartition": ["splitlab chaos unpartition                   # end the partition (link faults stay)",
                    "splitlab heal                                # end every fault instead"],
    "slow": ["splitlab chaos slow --delay-ms 20 --jitter-ms 5",
             "splitlab chaos slow --delay-ms 50 --links 'n1->n2;n3<->n1' --backend nfqueue",
             "splitlab chaos slow --delay-ms 100 --jitter-ms 20 --distribution normal --delay-corr-pct 25"],
    "fast": ["splitlab chaos fast                          # end every link and message fault"],
    "flaky": ["splitlab chaos flaky --loss-pct 10 --links 'n1->n2'",
              "splitlab chaos flaky --loss-pct 5 --backend iptables"],
    "shape": ["splitlab chaos shape 'n1->n2:delay_ms=20,loss_pct=1;n2<->n3:duplicate_pct=10,delay_ms=5,reorder_pct=25'"],
    "msg-fault": ["splitlab chaos msg-fault --type Heartbeat --from n1 --to n2 --action drop",
                  "splitlab chaos msg-fault --type UnicastAck --from n2 --to n1 --action drop-first:3 --conn-id 4",
                  "splitlab chaos msg-fault --type UnicastData --from n1 --to n2 --action hold:2000 --seqno 1",
                  "splitlab chaos msg-fault --type UnicastData --from n1 --to n2 --action drop-range:3-7"],
    "inject": ["splitlab chaos inject --from n2 --to n1 --type UnicastAck --field seqno=5 --field conn_id=3",
               "splitlab chaos inject --pcap runs/RUN/chaos/capture.pcap     # replay captured packets",
               "splitlab chaos inject --from n2 --to n1 --type UnicastAck --field seqno=5 --sign   # a run of --auth"],
    "capture": ["splitlab chaos capture --duration-s 10 --out /tmp/run.pcap"],
    "pause": ["splitlab chaos pause n3", "splitlab chaos pause n3 --sigstop --duration-s 5"],
    "resume": ["splitlab chaos resume n3"],
    "kill": ["splitlab chaos kill n2"],
    "start": ["splitlab chaos start n2                     # and re-apply the run's faults to it"],
    "restart": ["splitlab chaos restart n2                   # SIGKILL, then start again with the run's faults"],
}
HEAL_EXAMPLES = ["splitlab heal", "splitlab heal --run-id 261121-221530-a3f9",
                 "splitlab heal --run-dir runs/261121-221530-a3f9      # its containers are gone"]


class _Stop(Exception):
    """SIGTERM while holding a fault."""


def _links(text: str | None, nodes: list[str]) -> list[tuple[str, str]] | None:
    return None if text is None else parse_links(text, nodes)


def _net(args: argparse.Namespace):
    from chaos.cluster import lifecycle
    from chaos.net.docker import DockerNet

    run_id = lifecycle.resolve_run_id(args.run_id)
    return DockerNet(lifecycle.load(run_id), seed=args.seed, backend=getattr(args, "backend", None), log=progress,
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
        progress("interrupted: healing")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the heal short
        try:
            net.heal_all()
        finally:
            signal.signal(signal.SIGTERM, previous)


def _on_net(apply: Callable[[Any, argparse.Namespace], object], hold: bool) -> Callable[[argparse.Namespace], int]:
    """The command that does `apply(net, args)` on the run's Net; a fault verb (`hold`) then keeps its fault as
    --duration-s / --hold say, or leaves it in place."""
    def cmd(args: argparse.Namespace) -> int:
        ttl_s = getattr(args, "ttl_s", None)
        if ttl_s is not None:
            lease.check_ttl(ttl_s)  # bad input is refused before the cluster is looked up
        net = _net(args)
        fault_id = apply(net, args)
        if ttl_s is not None:
            net.lease(fault_id, ttl_s)
        if hold:
            _hold(args, net)
        return 0
    return cmd


def _slow(net, args: argparse.Namespace) -> str:
    return net.slow(args.delay_ms, args.jitter_ms, links=_links(args.links, net.nodes), distribution=args.distribution,
             delay_corr_pct=args.delay_corr_pct)


def _flaky(net, args: argparse.Namespace) -> str:
    return net.flaky(args.loss_pct, links=_links(args.links, net.nodes))


def _pause(net, args: argparse.Namespace) -> str:
    return net.pause(args.node, method="sigstop" if args.sigstop else "docker")


def _node_method(method: str) -> Callable[[Any, argparse.Namespace], object]:
    return lambda net, args: getattr(net, method)(args.node)


def msg_rule(args: argparse.Namespace) -> MsgRule:
    """The MsgRule of `splitlab chaos msg-fault`'s arguments; every action msgrules knows. Raises `UsageError`."""
    from chaos.wire.dissect import message_type

    return MsgRule(type=message_type(args.type), src=args.src, dst=args.dst, conn_id=args.conn_id,
                   seqno=args.seqno, **action_spec(args.action))


def cmd_msg_fault(args: argparse.Namespace) -> int:
    rule = msg_rule(args)  # bad input is refused before the cluster is looked up

    def apply(net, args: argparse.Namespace) -> str:
        for node in (args.src, args.dst):
            net.cluster.node(node)
        return net.msg_fault(rule)

    return _on_net(apply, hold=True)(args)


def _fields(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise UsageError(f"--field {item!r} must be name=integer, e.g. --field seqno=5")
        out[key.strip()] = int(value)
    return out


def cmd_partition(args: argparse.Namespace) -> int:
    if not args.jam and (args.release or args.cap is not None):
        raise UsageError("--release and --cap belong to a jammed partition: add --jam")
    jam = Jam(args.release or "fifo", args.cap) if args.jam else None  # bad input refused before the cluster
    return _on_net(lambda net, args: net.partition(args.grudge, jam), hold=True)(args)


def cmd_inject(args: argparse.Namespace) -> int:
    from chaos.wire import capture, inject

    if not args.pcap and not (args.src and args.dst and args.type):
        raise UsageError("inject needs --from, --to and --type (or --pcap FILE to replay)")
    body = None if args.pcap else inject.message(args.type, **_fields(args.field))  # bad input before the cluster
    net = _net(args)
    if args.pcap:
        captured = capture.read_pcap(Path(args.pcap))
        sent = net.replay([pkt for _, pkt in captured], sign=args.sign)
        skipped = f" ({captured.skipped} frame(s) without an IP packet skipped)" if captured.skipped else ""
        print(f"replayed {sent} packet(s) from {args.pcap}{skipped}")
        return 0
    for node in (args.src, args.dst):
        net.cluster.node(node)
    net.inject(args.src, args.dst, [body], count=args.count, sign=args.sign)
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


def _run_dir(args: argparse.Namespace) -> tuple[Path, str]:
    """The run directory and id `splitlab heal` works on. Raises `UsageError` when there is no such run."""
    from chaos.cluster import lifecycle
    from chaos.cluster.naming import check_run_id

    if args.run_dir:
        run_dir = Path(args.run_dir)
        if not run_dir.is_dir():
            raise UsageError(f"no run directory {run_dir}", hint="give a directory under runs/")
        return run_dir, check_run_id(args.run_id or run_dir.resolve().name)
    run_id = lifecycle.resolve_run_id(args.run_id)
    try:
        return lifecycle.load(run_id).run_dir, run_id
    except UsageError:
        run_dir = lifecycle.runs_root() / run_id
        if not run_dir.is_dir():
            raise UsageError(f"no run {run_id!r}: no containers and no directory {run_dir}",
                             hint="see 'splitlab ps', or give --run-dir") from None
        return run_dir, run_id


def cmd_heal(args: argparse.Namespace) -> int:
    """Undo everything the run's ledger lists; "nothing to heal" (exit 0) when nothing is outstanding."""
    from chaos.host.heal import heal_run
    from chaos.net.docker import running_endpoints

    run_dir, run_id = _run_dir(args)
    said: list[str] = []

    def log(text: str) -> None:
        said.append(text)
        progress(text)

    heal_run(run_dir, run_id, log=log, missing_ok=True,
             endpoints=None if args.no_verify else (lambda: running_endpoints(run_id)))
    print(f"run {run_id}: healed" if said else f"run {run_id}: nothing to heal")
    return 0


def _common(p: argparse.ArgumentParser, hold: bool = False, backend: bool = False) -> None:
    run_id_flag(p)
    seed_flag(p, "seed of every random choice (default 0)", default=0)
    p.add_argument("--no-verify", action="store_true", help="do not probe that a partition/heal took effect")
    if backend:
        p.add_argument("--backend", choices=["netem", "nfqueue", "iptables"],
                       help="force a link-fault backend (default: probed: netem, else nfqueue, else iptables "
                            "for pure loss)")
    if hold:
        p.add_argument("--duration-s", type=float, default=0.0, metavar="S",
                       help="keep the fault this long, then heal everything (also on Ctrl-C / SIGTERM)")
        p.add_argument("--hold", action="store_true", help="keep the fault until Ctrl-C / SIGTERM, then heal")
        p.add_argument("--ttl-s", type=float, metavar="S",
                       help="a lease: this command renews it while it runs; once nobody did for S seconds (the "
                            "command ended or was killed), a watchdog in the node's namespace ends the fault")


def _add_chaos_verbs(chaos: Parser) -> None:
    sub = subverbs(chaos)

    def add(name: str, help_: str, apply=None, *, func=None, hold: bool = False, backend: bool = False,
            description: str | None = None) -> argparse.ArgumentParser:
        """A chaos verb: `apply(net, args)` on the run's Net (or its own command `func`)."""
        p = add_verb(sub, name, help_, func or _on_net(apply, hold), description=description,
                     examples=EXAMPLES[name])
        _common(p, hold=hold, backend=backend)
        return p

    p = add("partition", "cut data traffic as a grudge says (iptables on the receivers; --jam: held, not dropped)",
            func=cmd_partition, hold=True)
    p.add_argument("grudge", help="'n2<-n1', 'n1->n2', 'n1<->n2', 'n1,n2|n3', 'isolate:n1', bisect, bridge, ring, "
                                  "majority, minority-third; ';' unites clauses")
    p.add_argument("--jam", action="store_true",
                   help="hold what crosses the cut (the senders' NFQUEUE shapers) and release it at the heal")
    p.add_argument("--release", choices=RELEASES, help="with --jam: the order held packets go at the heal "
                                                       "(default fifo)")
    p.add_argument("--cap", type=int, metavar="N", help=f"with --jam: hold at most N packets per link (1..{MAX_HELD}; "
                                                        f"default {MAX_HELD}), the oldest dropped beyond it")
    add("unpartition", "end the partition only (link and message faults stay)", lambda net, args: net.heal(),
        description="End the partition only; link and message faults stay (fast ends those). Named as the pair "
                    "of partition, as fast is of slow, so that 'heal' means one thing: 'splitlab heal' undoes "
                    "every fault the run's ledger lists. (This verb was 'splitlab chaos heal'.)")
    p = add("slow", "delay (and jitter) data traffic on links", _slow, hold=True, backend=True)
    p.add_argument("--delay-ms", type=float, required=True)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--distribution", default="uniform", help="of the jitter: " + " | ".join(DISTRIBUTIONS))
    p.add_argument("--delay-corr-pct", type=float, default=0.0, help="correlation of each delay with the last")
    p.add_argument("--links", help="'n1->n2;n2<->n3;*->n1' (default: every link)")
    add("fast", "end every link fault and message fault (the partition stays: see unpartition)",
        lambda net, args: net.fast())
    p = add("flaky", "lose a share of data traffic on links", _flaky, hold=True, backend=True)
    p.add_argument("--loss-pct", type=float, required=True)
    p.add_argument("--links", help="'n1->n2;n2<->n3;*->n1' (default: every link)")
    p = add("shape", "set the whole per-link fault matrix", lambda net, args: net.shape(args.matrix), hold=True,
            backend=True)
    p.add_argument("matrix", help="'src->dst:field=value,...;...' fields: " + " ".join(FAULT_FIELDS) +
                                  " (rate may be written rate=1mbit)")
    p = add("msg-fault", "a fault on one message type between two nodes (NFQUEUE shaper)", func=cmd_msg_fault,
            hold=True)
    p.add_argument("--type", required=True, help="wire message type: Heartbeat, Ping, UnicastAck, ... or a code")
    p.add_argument("--from", dest="src", required=True, help="sending node")
    p.add_argument("--to", dest="dst", required=True, help="receiving node")
    p.add_argument("--action", required=True, help=ACTION_HINT)
    p.add_argument("--conn-id", type=int, help="match this conn_id only")
    p.add_argument("--seqno", type=int, help="match this seqno only")
    p = add("inject", "send a forged datagram from inside the claimed sender's namespace, or replay a pcap",
            func=cmd_inject)
    p.add_argument("--from", dest="src", help="claimed sender node (its real address and port are used)")
    p.add_argument("--to", dest="dst", help="receiving node")
    p.add_argument("--type", help="wire message type")
    p.add_argument("--field", action="append", default=[], help="name=value of the message (repeatable)")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--pcap", help="replay the packets of this capture instead")
    sign_flag(p)
    p = add("capture", "record every node's received data traffic into a pcap", func=cmd_capture)
    p.add_argument("--duration-s", type=float, default=10.0, metavar="S")
    p.add_argument("--out", metavar="FILE", help="pcap file (default: runs/<run>/chaos/capture.pcap)")
    for name, help_ in (("pause", "freeze a node (docker pause; --sigstop: SIGSTOP)"), ("resume", "unfreeze a node"),
                        ("kill", "SIGKILL a node's container"), ("start", "start a killed node again"),
                        ("restart", "SIGKILL a node's container and start it again at once")):
        p = add(name, help_, _pause if name == "pause" else _node_method(name), hold=name in ("pause", "kill"))
        p.add_argument("node")
        if name == "pause":
            p.add_argument("--sigstop", action="store_true", help="SIGSTOP the node process instead")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    chaos = add_verb(sub, "chaos", "network and process faults, in pairs: partition/unpartition, "
                     "slow|flaky|shape|msg-fault/fast, pause/resume, kill/start; also restart, inject, capture",
                     None,
                     description="Network and process faults on a run. Verbs come in pairs: partition/unpartition, "
                                 "slow|flaky|shape|msg-fault/fast, pause/resume, kill/start; 'splitlab heal' undoes "
                                 "everything.")
    _add_chaos_verbs(chaos)
    p = add_verb(sub, "heal", "undo every fault the run's ledger lists, also after a crash (idempotent)", cmd_heal,
                 description="Undo every fault the run's ledger lists (rules, chains, qdiscs, shaper processes, "
                             "paused and killed nodes), also after the controller was killed. Idempotent: a run "
                             "with nothing applied prints 'nothing to heal' and exits 0.",
                 examples=HEAL_EXAMPLES)
    run_id_flag(p)
    p.add_argument("--run-dir", metavar="DIR", help="the run directory, when its containers are gone")
    p.add_argument("--no-verify", action="store_true", help="do not probe that all nodes pass again")
