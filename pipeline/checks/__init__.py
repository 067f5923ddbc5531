"""The checks run on every history, in report order. Each module holds one check and exposes `CHECK`."""
from __future__ import annotations

from pipeline.checks import delivery, duplicates, endless, fifo, heal, history, latency, retransmission, stale_link
from pipeline.checks import blocked, resends, spurious, sync, views
from pipeline.checks.base import FAIL, OK, UNKNOWN, Check, CheckContext, CheckResult, Verdict, run_check

CHECKS: tuple[Check, ...] = (
    history.CHECK, delivery.CHECK, duplicates.CHECK, fifo.CHECK, latency.CHECK, retransmission.CHECK,
    endless.CHECK, heal.CHECK, views.CHECK, stale_link.CHECK, spurious.CHECK, sync.CHECK, blocked.CHECK,
    resends.CHECK,
)

__all__ = ["CHECKS", "Check", "CheckContext", "CheckResult", "Verdict", "run_check", "OK", "FAIL", "UNKNOWN"]
