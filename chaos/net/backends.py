"""Which link-fault backend serves a fault: `netem` (tc, where sch_netem exists), else `nfqueue` (the userspace
shaper), else `iptables` (statistic loss; pure loss only). The kernel is probed once per process."""
from __future__ import annotations

import threading
from typing import Mapping

from chaos.faults.grudge import LinkFault
from node.errors import EnvironmentProblem, UsageError

BACKENDS = ("netem", "nfqueue", "iptables")
_caps: dict[str, tuple[bool, str]] = {}
_probing = threading.Lock()  # runs side by side (scenario variants) probe once


def capabilities() -> dict[str, tuple[bool, str]]:
    """Which link-fault backends this kernel offers: name -> (available, detail). Probed once per process."""
    with _probing:
        if not _caps:
            from chaos.cluster import doctor

            netem_check = doctor.check_netem(doctor.system_probe)
            nfq_check = doctor.check_nfqueue(doctor.system_probe)
            _caps.update(netem=(netem_check.ok, netem_check.detail), nfqueue=(nfq_check.ok, nfq_check.detail),
                         iptables=(True, "iptables statistic (pure loss only, kernel RNG: not seeded)"))
        return dict(_caps)


def remote_capabilities() -> dict[str, tuple[bool, str]]:
    """The backends for nodes on other hosts (a multi-host run): the shaper runs there in a container of the agent
    image (chaos.net.shaper.remote) and iptables over SSH; netem is driven through pyroute2 from this process,
    which reaches only this machine's namespaces."""
    return {"netem": (False, "netem is not driven on other hosts (pyroute2 reaches this machine's namespaces "
                             "only); their link faults use the NFQUEUE shaper agent"),
            "nfqueue": (True, "the shaper agent container on the node's host"),
            "iptables": (True, "iptables statistic on the node's host (pure loss only, kernel RNG: not seeded)")}


def choose_backend(fault: LinkFault, forced: str | None, caps: Mapping[str, tuple[bool, str]]) -> str:
    """The backend for one link fault. Raises `UsageError` / `EnvironmentProblem` when it cannot be served."""
    if forced is not None:
        if forced not in BACKENDS:
            raise UsageError(f"unknown backend {forced!r}; use one of {', '.join(BACKENDS)}")
        if forced == "iptables" and not fault.only_loss:
            raise UsageError(f"backend iptables serves pure loss only, asked {fault.as_dict()}",
                             hint="use --backend nfqueue (or netem where the kernel has it)")
        ok, detail = caps[forced]
        if not ok:
            raise EnvironmentProblem(f"backend {forced} is not available here: {detail}",
                                     hint="'splitlab doctor' lists the fault backends of this machine")
        return forced
    for name in ("netem", "nfqueue"):
        if caps[name][0]:
            return name
    if fault.only_loss and caps["iptables"][0]:
        return "iptables"
    raise EnvironmentProblem(f"no backend can apply {fault.as_dict()}: no sch_netem ({caps['netem'][1]}) and no "
                             f"NFQUEUE ({caps['nfqueue'][1]})", hint="'splitlab doctor' says what is missing")
