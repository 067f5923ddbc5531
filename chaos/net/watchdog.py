"""The lease watchdog: `python -m chaos.net.watchdog --run-dir D --run-id R --fault ID --marker M
[--host-netns-fd FD]`, started by `chaos.net.lease.start_watchdog` inside the namespace of the fault's first node.

It sleeps until the lease of fault ID expires (re-reading it, since its controller renews it) and then ends that
fault through the controller's own code (`DockerNet.end_fault`), recording `fault_end` with `lease_expired`; it
does so back in the controller's namespace (FD, inherited open), where a partition on the run's bridge lives.
It exits without doing anything when the lease file is gone (the fault ended otherwise) or the fault is no longer
open, and at once on SIGTERM (`splitlab heal` ends it, heals everything itself and settles its entry). Otherwise
it settles its own ledger entry before it exits, so nothing is left outstanding.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from chaos.host.ledger import Ledger
from chaos.net import lease

POLL_S = 0.1


def _settle_self(run_dir: Path, fault_id: str) -> None:
    ledger = Ledger(run_dir)
    mine = [e for e in ledger.outstanding(lambda e: e.key == f"watchdog:{fault_id}")]
    if mine:
        ledger.mark_undone(mine, "undone")


def watch(run_dir: Path, run_id: str, fault_id: str, host_netns_fd: int | None = None) -> str:
    """Wait for the lease to expire, then end the fault, back in the controller's (the host's) namespace open as
    `host_netns_fd` when given. Returns what happened (for the log)."""
    while True:
        current = lease.read(run_dir, fault_id)
        if current is None:
            return "lease removed: the fault ended otherwise"
        left_s = current["expires_ts"] - time.time()
        if left_s <= 0:
            break
        time.sleep(min(POLL_S, left_s))
    from chaos.cluster import lifecycle
    from chaos.host.netns import enter
    from chaos.net.docker import DockerNet

    if host_netns_fd is not None:
        enter(host_netns_fd)

    net = DockerNet(lifecycle.load(run_id), verify=False, log=lambda text: print(text, flush=True))
    ended = net.end_fault(fault_id, reason="lease_expired")
    lease.drop(run_dir, fault_id)
    return f"lease expired: {fault_id} {'ended' if ended else 'was no longer open'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.net.watchdog", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--fault", required=True)
    parser.add_argument("--marker", required=True, help="unique id on the command line, for the ledger")
    parser.add_argument("--host-netns-fd", type=int, help="the controller's network namespace, open: the fault is "
                                                          "ended from there")
    args = parser.parse_args(argv)
    # SIGTERM comes from a ledger heal, which holds the ledger's lock and settles this entry itself: exit at once
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    try:
        print(watch(args.run_dir, args.run_id, args.fault, args.host_netns_fd), flush=True)
    finally:
        _settle_self(args.run_dir, args.fault)
    return 0


if __name__ == "__main__":
    sys.exit(main())
