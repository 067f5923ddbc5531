"""The seeded in-memory simulator: virtual time, faulty links and message faults, the real protocol objects.

- `Simulator` (simulator.py): members as `node.stack.Stack`s, an event heap, wire encoding of every message,
  records of deliveries and emitted events, `run_until` / `run_for` / `run_until_quiet` / `run_until_true`.
- `LinkSpec`, `Network` (network.py): per-link loss, delay, jitter, duplication, reordering; one-way cuts.
- `MsgFault`, `FaultTable` (faults.py): drop / delay / hold messages of one type in one direction.
- `unicast_sim`, `send_many` (harness.py): a simulator of unicast members and a workload helper.
"""
import importlib
from typing import Any

# name -> the module that defines it, imported on first use (PEP 562): the NFQUEUE shaper and the CLI import
# node.sim.jam alone, and the whole simulator took a tenth of a second of their start
_EXPORTS = {"FaultTable": "faults", "MsgFault": "faults", "message_class": "faults", "send_many": "harness",
            "unicast_sim": "harness", "LinkSpec": "network", "Network": "network", "Simulator": "simulator"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
