"""Which Spark master an analysis uses: the one asked for, else `$SPLITLAB_SPARK_MASTER`, else `local[*]`
(without Spark: a client of the analysis service compares it with the service's)."""
from __future__ import annotations

import os

MASTER_ENV = "SPLITLAB_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"


def resolve_master(master: str | None = None) -> str:
    """The master to use: the argument, else `$SPLITLAB_SPARK_MASTER`, else `local[*]`."""
    return master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
