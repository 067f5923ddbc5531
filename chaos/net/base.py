"""The interface of a run's network, `Net`, that every backend implements and the scenario steps
(`chaos.harness.actions`) act through: the containers (`chaos.net.docker.DockerNet`) and the simulator
(`chaos.net.sim.SimNet`). A backend refuses what it cannot do with `UsageError` naming the reason.

Verbs come in pairs and return the fault id of what they start (an instant, inject or restart, has no end):

    partition(grudge, jam) / heal()            one-way cuts of the data traffic (jammed with `jam`: what crosses
                                               them is held, then released at the heal) / the partition removed
    slow, flaky, shape / fast()                link faults (delay, jitter, loss, duplication, reordering, ...)
    msg_fault(rule)                            a protocol-aware rule on one message type
    end_rule(fault_id, rule)                   exactly that rule removed
    end_links(fault_id, matrix)                the link faults set to `matrix` (what the still-open steps set)
    inject(src, dst, data, count, sign)        a forged datagram from `src`'s address (signed with the run's
                                               key: the authenticated wire of `splitlab up --auth`)
    pause/resume, kill/start, restart          process faults
    heal_all()                                 everything undone
    lease(fault_id, ttl_s)                     the fault ends by itself once its controller stopped renewing it

and the run's nodes through `client(node)` (the control API: health, state, workloads, admin), `node_state`
(None when the node does not answer), `record` (the controller history) and `clock(...)` (wall or virtual time).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol

from chaos.faults.grudge import Jam, LinkFault
from chaos.faults.msgrules import MsgRule

LinkMatrix = Mapping[tuple[str, str], LinkFault]


class NodeClient(Protocol):
    """What a step asks of one node (chaos.cluster.client.NodeClient on containers)."""

    def health(self) -> dict[str, Any]: ...
    def state(self) -> dict[str, Any]: ...
    def unicast(self, to: str, count: int, size: int = 100, rate: float = 0) -> int: ...
    def multicast(self, count: int, size: int = 100, rate: float = 0) -> int: ...
    def admin(self, op: str, peer: str, **extra: Any) -> dict[str, Any]: ...


class Clock(Protocol):
    """Time as a timeline sees it: seconds since the run started, unix seconds, passing and waiting."""

    def now_s(self) -> float: ...
    def now_ts(self) -> float: ...
    def pass_time(self, until_s: float, label: str) -> None: ...
    def wait_until(self, ready: Callable[[], bool], until_s: float, label: str) -> bool: ...


class Net(Protocol):
    """A run's network and processes; see the module docstring."""

    backend: str          # "docker" | "sim": what the realised schedule records
    run_id: str
    run_dir: Path
    cluster_id: int       # the wire's cluster id of this run (forged datagrams carry it)

    @property
    def nodes(self) -> list[str]: ...
    def client(self, node: str) -> NodeClient: ...
    def node_state(self, node: str) -> dict[str, Any] | None: ...
    def record(self, type_: str, **fields: Any) -> None: ...
    def partition(self, grudge: Mapping[str, Iterable[str]] | str, jam: Jam | None = None) -> str: ...
    def heal(self) -> None: ...
    def slow(self, delay_ms: float, jitter_ms: float = 0.0, links: Iterable[tuple[str, str]] | None = None,
             **more: float | str) -> str: ...
    def flaky(self, loss_pct: float, links: Iterable[tuple[str, str]] | None = None) -> str: ...
    def shape(self, matrix: LinkMatrix | str) -> str: ...
    def fast(self) -> None: ...
    def msg_fault(self, rule: MsgRule) -> str: ...
    def end_rule(self, fault_id: str, rule: MsgRule) -> None: ...
    def end_links(self, fault_id: str, matrix: LinkMatrix) -> None: ...
    def is_active(self, fault_id: str) -> bool: ...
    def inject(self, src: str, dst: str, data: bytes, count: int = 1, sign: bool = False) -> str: ...
    def pause(self, node: str, method: str = "docker") -> str: ...
    def resume(self, node: str) -> None: ...
    def kill(self, node: str) -> str: ...
    def start(self, node: str) -> None: ...
    def restart(self, node: str) -> str: ...
    def heal_all(self) -> int: ...
    def lease(self, fault_id: str, ttl_s: float) -> None: ...


class WallClock:
    """Real time: `wait(seconds, label)` shows the waits (chaos.harness.progress.Progress.wait)."""

    POLL_S = 0.1

    def __init__(self, wait: Callable[[float, str], None], log: Callable[[str], None]) -> None:
        self._wait = wait
        self._log = log
        self.t0 = time.monotonic()

    def now_s(self) -> float:
        return time.monotonic() - self.t0

    def now_ts(self) -> float:
        return time.time()

    def pass_time(self, until_s: float, label: str) -> None:
        self._wait(until_s - self.now_s(), label)

    def wait_until(self, ready: Callable[[], bool], until_s: float, label: str) -> bool:
        told = False
        while not ready():
            left = until_s - self.now_s()
            if left <= 0:
                return False
            if not told:
                self._log(f"waiting for {label} ...")
                told = True
            time.sleep(min(self.POLL_S, left))
        return True


__all__ = ["Clock", "LinkMatrix", "Net", "NodeClient", "WallClock"]
