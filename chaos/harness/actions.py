"""Apply one scenario step to a running cluster: workloads and admin operations through the nodes' control API,
everything else through `chaos.net.Net` (which records it in the ledger and the controller history).

`apply(step, target)` returns what the realised schedule keeps: the fault id (if the step started a fault) and
a small detail (e.g. the workload ids). It raises what `Net` and the node client raise.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from chaos.cluster import Cluster
from chaos.harness.schema import Step
from chaos.net import ControllerHistory, Net


@dataclass
class Target:
    """The run a timeline acts on, and the workloads it started (node -> [(workload id, boot, count)])."""

    cluster: Cluster
    net: Net
    history: ControllerHistory
    workloads: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


Result = dict[str, Any]


def _workload(step: Step, t: Target) -> Result:
    w = step.workload
    senders = w.from_ if isinstance(w.from_, list) else [w.from_]
    started = {}
    for sender in senders:
        client = t.cluster.client(sender)
        boot = client.health().get("boot")
        if w.kind == "unicast":
            wid = client.unicast(w.to, count=w.count, size=w.size, rate=w.rate)
        else:
            wid = client.multicast(count=w.count, size=w.size, rate=w.rate)
        t.history.emit("workload", sender=sender, kind=w.kind, to=w.to or "*", count=w.count, size=w.size,
                       rate=float(w.rate))
        t.workloads.setdefault(sender, []).append({"id": wid, "boot": boot, "count": w.count, "kind": w.kind,
                                                   "to": w.to or "*"})
        started[sender] = wid
    return {"detail": {"workload_ids": started}}


def _partition(step: Step, t: Target) -> Result:
    return {"fault_id": t.net.partition(step.partition)}


def _heal(step: Step, t: Target) -> Result:
    if step.heal == "all":
        return {"detail": {"settled": t.net.heal_all()}}
    t.net.heal()
    return {}


def _links(text: str | None, t: Target) -> list[tuple[str, str]] | None:
    from chaos.grudge import parse_links

    return None if text is None else parse_links(text, t.net.nodes)


def _slow(step: Step, t: Target) -> Result:
    s = step.slow
    more = s.model_dump(exclude={"delay_ms", "jitter_ms", "links"})
    return {"fault_id": t.net.slow(s.delay_ms, s.jitter_ms, links=_links(s.links, t), **more)}


def _fast(step: Step, t: Target) -> Result:
    t.net.fast()
    return {}


def _flaky(step: Step, t: Target) -> Result:
    return {"fault_id": t.net.flaky(step.flaky.loss_pct, links=_links(step.flaky.links, t))}


def _shape(step: Step, t: Target) -> Result:
    return {"fault_id": t.net.shape(step.shape)}


def msg_rule(m: Any) -> Any:
    """The `MsgRule` of a scenario's msg_fault arguments."""
    from chaos.dissect import message_type
    from chaos.shaper.msgrules import MsgRule, parse_action

    action, ms, n = parse_action(m.action)
    return MsgRule(type=message_type(m.type), src=m.from_, dst=m.to, action=action, ms=ms, n=n,
                   conn_id=m.conn_id, seqno=m.seqno)


def _msg_fault(step: Step, t: Target) -> Result:
    return {"fault_id": t.net.msg_fault(msg_rule(step.msg_fault))}


def _inject(step: Step, t: Target) -> Result:
    from chaos import inject

    i = step.inject
    return {"fault_id": t.net.inject(i.from_, i.to, [inject.message(str(i.type), **i.fields)], count=i.count)}


def _pause(step: Step, t: Target) -> Result:
    p = step.pause
    node, method = (p, "docker") if isinstance(p, str) else (p.node, p.method)
    return {"fault_id": t.net.pause(node, method=method)}


def _resume(step: Step, t: Target) -> Result:
    t.net.resume(step.resume)
    return {}


def _kill(step: Step, t: Target) -> Result:
    return {"fault_id": t.net.kill(step.kill)}


def _start(step: Step, t: Target) -> Result:
    t.net.start(step.start)
    t.cluster = t.net.cluster  # the restarted node has a new PID (and maybe address)
    return {}


def _restart(step: Step, t: Target) -> Result:
    fault_id = t.net.restart(step.restart)
    t.cluster = t.net.cluster
    return {"fault_id": fault_id}


def _admin(step: Step, t: Target) -> Result:
    a = step.admin
    return {"detail": {"answer": t.cluster.client(a.node).admin(a.op, a.peer)}}


APPLY: dict[str, Callable[[Step, Target], Result]] = {
    "workload": _workload, "partition": _partition, "heal": _heal, "slow": _slow, "fast": _fast,
    "flaky": _flaky, "shape": _shape, "msg_fault": _msg_fault, "inject": _inject, "pause": _pause,
    "resume": _resume, "kill": _kill, "start": _start, "restart": _restart,
    "admin": _admin,
}


def apply(step: Step, target: Target) -> Result:
    """Apply `step` now; returns {"fault_id"?: ..., "detail"?: {...}}."""
    return APPLY[step.action](step, target)


def describe(step: Step) -> str:
    """A one-line description of a step for the terminal, e.g. `partition n2<-n1`."""
    args = step.args
    if step.action == "workload":
        src = ",".join(args.from_) if isinstance(args.from_, list) else args.from_
        dest = f" -> {args.to}" if args.to else " -> view"
        rate = f" at {args.rate:g}/s" if args.rate else ""
        return f"workload {args.kind} {src}{dest}: {args.count} x {args.size} B{rate}"
    if step.action == "msg_fault":
        extra = "".join(f" {k}={v}" for k, v in (("conn_id", args.conn_id), ("seqno", args.seqno)) if v is not None)
        return f"msg-fault {args.action} {args.type} {args.from_}->{args.to}{extra}"
    if step.action == "inject":
        return f"inject {args.count} x {args.type}{args.fields or ''} {args.from_}->{args.to}"
    if step.action == "admin":
        return f"admin {args.op} at {args.node} toward {args.peer}"
    if step.action in ("heal", "fast"):
        return f"{step.action}{' ' + args if args else ''}"
    if step.action == "pause" and not isinstance(args, str):
        return f"pause {args.node} ({args.method})"
    if hasattr(args, "model_dump"):
        shown = ", ".join(f"{k}={v}" for k, v in args.model_dump(exclude_none=True).items() if v)
        return f"{step.action} {shown}"
    return f"{step.action} {args}"
