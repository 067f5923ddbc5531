"""Apply one scenario step to a run through its network backend (`chaos.net.base.Net`: containers or the
simulator): workloads and admin operations through the nodes' control API (`net.client`), everything else
through the Net's verbs (which record it in the controller history, and on containers in the ledger).

`apply(step, target)` returns what the realised schedule keeps: the fault id (if the step started a fault), a
small detail (e.g. the workload ids), and for a restart with `delay_s` what to do later (`then`: the start).
`end_fault(step, fault_id, target)` ends the fault one step started (`end: <id>`, `duration_s`): a partition
is healed, a pause resumed, a killed node started; a message rule is removed (`Net.end_rule`) and the link faults
are rebuilt from the steps still open (`chaos.harness.faultstate`, `Net.end_links`), touching nothing else. Both
raise what the Net and the node client raise; `StepError` when an inject step finds no live connection to aim its
conn_id at.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from chaos.faults.grudge import describe as describe_grudge
from chaos.harness.faultstate import link_faults, rule_of
from chaos.harness.schema import ENDABLE, LINK_ACTIONS, Step
from chaos.net.base import Net


@dataclass
class Target:
    """The run a timeline acts on, the workloads it started (node -> [(workload id, boot, count)]) and the steps
    that opened faults (fault id -> step, in the order they were applied)."""

    net: Net
    workloads: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    opened: dict[str, Step] = field(default_factory=dict)


Result = dict[str, Any]


def _workload(step: Step, t: Target) -> Result:
    w = step.workload
    senders = w.from_ if isinstance(w.from_, list) else [w.from_]
    started = {}
    for sender in senders:
        client = t.net.client(sender)
        boot = client.health().get("boot")
        t.net.record("workload", sender=sender, kind=w.kind, to=w.to or "*", count=w.count, size=w.size,
                     rate=float(w.rate))
        if w.kind == "unicast":
            wid = client.unicast(w.to, count=w.count, size=w.size, rate=w.rate)
        else:
            wid = client.multicast(count=w.count, size=w.size, rate=w.rate)
        t.workloads.setdefault(sender, []).append({"id": wid, "boot": boot, "count": w.count, "kind": w.kind,
                                                   "to": w.to or "*"})
        started[sender] = wid
    return {"detail": {"workload_ids": started}}


def _partition(step: Step, t: Target) -> Result:
    return {"fault_id": t.net.partition(step.grudge, step.jam)}


def _heal(step: Step, t: Target) -> Result:
    if step.heal == "all":
        return {"detail": {"settled": t.net.heal_all()}}
    t.net.heal()
    return {}


def _links(text: str | None, t: Target) -> list[tuple[str, str]] | None:
    from chaos.faults.grudge import parse_links

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


def _msg_fault(step: Step, t: Target) -> Result:
    return {"fault_id": t.net.msg_fault(rule_of(step.msg_fault))}


def _inject(step: Step, t: Target) -> Result:
    from chaos.harness.injection import datagram, relative_conn_id
    from chaos.wire.dissect import message_type

    i = step.inject
    code = message_type(i.type)
    fields = dict(i.fields)
    detail: dict[str, Any] = {}
    if isinstance(i.conn_id, str):
        state = t.net.client(i.to).state()["layers"].get("unicast", {})
        fields["conn_id"] = detail["conn_id"] = relative_conn_id(state, i.to, i.from_, code, i.conn_id)
    elif i.conn_id is not None:
        fields["conn_id"] = i.conn_id
    data = datagram(t.net.cluster_id, i.from_, code, fields, i.payload)
    return {"fault_id": t.net.inject(i.from_, i.to, data, count=i.count, sign=i.sign), "detail": detail}


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
    return {}


def _restart(step: Step, t: Target) -> Result:
    node, delay_s = step.restart_node, step.restart_delay_s
    if not delay_s:
        return {"fault_id": t.net.restart(node)}
    kill_id = t.net.kill(node)

    def start() -> dict[str, Any]:
        t.net.start(node)
        restart_id = f"restart-{uuid.uuid4().hex[:8]}"
        t.net.record("fault_start", fault_id=restart_id, kind="restart",
                     detail={"node": node, "kill": kill_id, "delay_s": delay_s}, applied_ts=time.time(),
                     effective_ts=None)
        return {"restart_id": restart_id}
    return {"fault_id": kill_id, "then": {"delay_s": delay_s, "run": start, "node": node}}


def _fault(step: Step, t: Target) -> Result:
    from chaos.faults.registry import lookup

    defn, args = lookup(step.fault.name, step.fault.args)
    return {"fault_id": defn.apply(t.net, args)}


def _admin(step: Step, t: Target) -> Result:
    a = step.admin
    return {"detail": {"answer": t.net.client(a.node).admin(a.op, a.peer)}}


APPLY: dict[str, Callable[[Step, Target], Result]] = {
    "workload": _workload, "partition": _partition, "heal": _heal, "slow": _slow, "fast": _fast,
    "flaky": _flaky, "shape": _shape, "msg_fault": _msg_fault, "inject": _inject, "pause": _pause,
    "resume": _resume, "kill": _kill, "start": _start, "restart": _restart,
    "admin": _admin, "fault": _fault,
}


def apply(step: Step, target: Target) -> Result:
    """Apply `step` now; returns {"fault_id"?: ..., "detail"?: {...}, "then"?: {delay_s, run, node}}."""
    result = APPLY[step.action](step, target)
    if step.action in ENDABLE and result.get("fault_id"):
        target.opened[result["fault_id"]] = step
        if step.ttl_s is not None:
            target.net.lease(result["fault_id"], step.ttl_s)
    return result


def end_fault(step: Step, fault_id: str | None, t: Target) -> dict[str, Any]:
    """End the fault that `step` started as `fault_id`; a no-op when it already ended (a heal, fast, another
    partition, the node started again). Returns the detail the realised schedule keeps."""
    net = t.net
    if fault_id is None or not net.is_active(fault_id):
        return {"already_ended": fault_id}
    action = step.action
    if action == "partition":
        net.heal()
    elif action == "pause":
        net.resume(step.pause if isinstance(step.pause, str) else step.pause.node)
    elif action == "kill":
        net.start(step.kill)
    elif action == "msg_fault":
        net.end_rule(fault_id, rule_of(step.msg_fault))
    elif action == "fault":
        _end_registered(step, fault_id, t)
    elif action in LINK_ACTIONS:
        still = [s for fid, s in t.opened.items() if fid != fault_id and net.is_active(fid) and s.action in LINK_ACTIONS]
        net.end_links(fault_id, link_faults(still, net.nodes))
    return {"ended": fault_id}


def _end_registered(step: Step, fault_id: str, t: Target) -> None:
    """End a registered fault: its own `end`, else heal for a partition and fast for link and message faults."""
    from chaos.faults.registry import lookup

    defn, args = lookup(step.fault.name, step.fault.args)
    if defn.end is not None:
        defn.end(t.net, fault_id, args)
    elif fault_id.startswith("partition-"):
        t.net.heal()
    else:
        t.net.fast()


def describe(step: Step) -> str:
    """A one-line description of a step for the terminal, e.g. `partition n2<-n1`."""
    text = _describe_action(step)
    when = f" [after {step.after}{f' + {step.delay_s:g} s' if step.delay_s else ''}]" if step.after else ""
    lasts = f" for {step.duration_s:g} s" if step.duration_s is not None else ""
    named = f" (id {step.id})" if step.id else ""
    return f"{text}{lasts}{named}{when}"


def _describe_action(step: Step) -> str:
    args = step.args
    if step.action == "workload":
        src = ",".join(args.from_) if isinstance(args.from_, list) else args.from_
        dest = f" -> {args.to}" if args.to else " -> view"
        rate = f" at {args.rate:g}/s" if args.rate else ""
        return f"workload {args.kind} {src}{dest}: {args.count} x {args.size} B{rate}"
    if step.action == "msg_fault":
        extra = "".join(f" {k}={v}" for k, v in (("conn_id", args.conn_id), ("seqno", args.seqno),
                                                 ("first", args.first)) if v is not None)
        return f"msg-fault {args.action} {args.type} {args.from_}->{args.to}{extra}"
    if step.action == "inject":
        extra = "".join(f" {k}={v!r}" for k, v in (("conn_id", args.conn_id), ("payload", args.payload))
                        if v is not None)
        signed = ", signed" if args.sign else ""
        return f"inject {args.count} x {args.type}{args.fields or ''} {args.from_}->{args.to}{extra}{signed}"
    if step.action == "restart":
        delay = f" after {step.restart_delay_s:g} s down" if step.restart_delay_s else ""
        return f"restart {step.restart_node}{delay}"
    if step.action == "end":
        return f"end {args}"
    if step.action == "partition":
        grudge = step.grudge if isinstance(step.grudge, str) else describe_grudge(step.grudge)
        return f"partition {grudge}" + (f" ({step.jam.describe()})" if step.jam else "")
    if step.action == "fault":
        shown = ", ".join(f"{k}={v}" for k, v in args.args.items())
        return f"fault {args.name}({shown})"
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
