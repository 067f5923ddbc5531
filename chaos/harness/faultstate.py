"""The faults a timeline's steps open, as data both backends (containers and the simulator) share: the message
rule of a msg-fault step, and the link matrix that the still-open slow, flaky and shape steps add up to, rebuilt
when one of them ends (`end: <id>` or its `duration_s`).

The matrix is what applying the open steps again, in their order, gives: slow and flaky merge into what a link
already has, shape replaces every link's fault. So ending a slow keeps a flaky on the same link, and ending a
shape brings back the slow and flaky steps it replaced that are still open.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from chaos.faults.grudge import LinkFault


def rule_of(m: Any) -> Any:
    """The `chaos.faults.msgrules.MsgRule` of a scenario's msg-fault arguments. Raises `UsageError`."""
    from chaos.wire.dissect import message_type
    from chaos.faults.msgrules import MsgRule, action_spec

    return MsgRule(type=message_type(m.type), src=m.from_, dst=m.to, conn_id=m.conn_id, seqno=m.seqno,
                   first=m.first, **action_spec(m.action))


def step_matrix(step: Any, nodes: Sequence[str]) -> tuple[dict[tuple[str, str], LinkFault], bool]:
    """The links one slow, flaky or shape step sets, and whether it replaces every other link's fault."""
    from chaos.faults import grudge

    if step.action == "shape":
        return dict(grudge.parse_matrix(step.shape, nodes)), True
    args = step.args
    pairs = grudge.parse_links(args.links, nodes) if args.links else grudge.all_links(nodes)
    return grudge.matrix(pairs, grudge.link_fault(args.model_dump(exclude={"links"}))), False


def link_faults(steps: Iterable[Any], nodes: Sequence[str]) -> dict[tuple[str, str], LinkFault]:
    """Every link's fault after applying `steps` (slow, flaky, shape) in order; links left untouched are absent."""
    links: dict[tuple[str, str], LinkFault] = {}
    for step in steps:
        updates, replace = step_matrix(step, nodes)
        if replace:
            links = {}
        for pair, fault in updates.items():
            merged = links[pair].merged(fault) if pair in links else fault
            if merged.empty:
                links.pop(pair, None)
            else:
                links[pair] = merged
    return links
