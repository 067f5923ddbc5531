"""Names the controller gives things: run ids, node names, container, network and chain names.

Everything splitlab creates carries the run id, so cleanup finds exactly what one run owns.
"""
from __future__ import annotations

import re
import secrets
import time

from node.config import check_node_count
from node.errors import UsageError

LABEL_RUN = "splitlab.run"
LABEL_NODE = "splitlab.node"
RUN_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{2,23}$")


def new_run_id(now_s: float | None = None) -> str:
    """A fresh, sortable run id such as `261121-221530-a3f9` (UTC time plus 4 random hex digits)."""
    stamp = time.strftime("%y%m%d-%H%M%S", time.gmtime(time.time() if now_s is None else now_s))
    return f"{stamp}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    """Validate a run id given by the user. Raises `UsageError`."""
    if not RUN_ID_RE.match(run_id or ""):
        raise UsageError(f"invalid run id {run_id!r}",
                         hint="3-24 characters: lowercase letters, digits and '-'; see 'splitlab ps'")
    return run_id


def node_names(count: int) -> list[str]:
    """`n1..nN`. Raises `UsageError` unless 1 <= count <= node.config.MAX_NODES (`check_node_count`)."""
    check_node_count(count, "-n")
    return [f"n{i}" for i in range(1, count + 1)]


def project_name(run_id: str) -> str:
    """The compose project of a run."""
    return f"splitlab-{run_id}"


def container_name(run_id: str, node: str) -> str:
    return f"splitlab-{run_id}-{node}"
