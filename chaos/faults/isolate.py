"""The `isolate` fault: one node cut off from every other node, both ways (a registered fault: see
`chaos.faults.registry`). Ends like a partition: `heal`, `end: <id>` or `duration_s`."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from chaos.faults.registry import register_fault


class IsolateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node: str


@register_fault("isolate", IsolateArgs)
def isolate(net, args: IsolateArgs) -> str:
    others = [n for n in net.nodes if n != args.node]
    return net.partition({args.node: others, **{other: [args.node] for other in others}})
