"""The seeded in-memory simulator: virtual time, faulty links and message faults, the real protocol objects.

- `Simulator` (simulator.py): members as `node.stack.Stack`s, an event heap, wire encoding of every message,
  records of deliveries and emitted events, `run_until` / `run_for` / `run_until_quiet` / `run_until_true`.
- `LinkSpec`, `Network` (network.py): per-link loss, delay, jitter, duplication, reordering; one-way cuts.
- `MsgFault`, `FaultTable` (faults.py): drop / delay / hold messages of one type in one direction.
- `unicast_sim`, `send_many` (harness.py): a simulator of unicast members and a workload helper.
"""
from node.sim.faults import FaultTable, MsgFault, message_class
from node.sim.harness import send_many, unicast_sim
from node.sim.network import LinkSpec, Network
from node.sim.simulator import Simulator

__all__ = ["FaultTable", "LinkSpec", "MsgFault", "Network", "Simulator", "message_class", "send_many",
           "unicast_sim"]
