"""The checks run on every history. Each module of this package holds one check and registers it
(`CHECK = register_check(Check(...))`, see registry.py); `CHECKS` lists every registered check in report order."""
from __future__ import annotations

from pipeline.checks.base import FAIL, OK, UNKNOWN, Check, CheckContext, CheckResult, Verdict, run_check
from pipeline.checks.registry import CHECKS, register_check, unregister_check

__all__ = ["CHECKS", "Check", "CheckContext", "CheckResult", "Verdict", "register_check", "run_check",
           "unregister_check", "OK", "FAIL", "UNKNOWN"]
