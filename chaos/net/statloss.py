"""Pure random loss in the kernel: `iptables -m statistic --mode random` in the sender's namespace.

The fallback for loss when neither netem nor NFQUEUE is there, and the cheapest loss when forced
(`backend="iptables"`). Its randomness is the kernel's, so it is the one fault splitlab cannot seed; the
controller says so when it uses it. Rules live in the run's chain `SLL-<run>` in OUTPUT
(`chaos.net.iptables.STATLOSS`), one per shaped peer, recorded in the ledger first.
"""
from __future__ import annotations

from typing import Mapping

from chaos.host.ledger import Ledger
from chaos.host.netns import Netns
from chaos.net import iptables

GROUP = iptables.STATLOSS.group


def loss_rules(loss_pct: Mapping[str, float]) -> list[str]:
    """Rules dropping UDP toward each destination IP with its probability."""
    return [f"-d {ip}/32 -p udp -m statistic --mode random --probability {pct / 100:.6f} -j DROP"
            for ip, pct in sorted(loss_pct.items())]


def apply(ledger: Ledger, run_id: str, ns: Netns, loss_pct: Mapping[str, float]) -> None:
    """Make `ns`'s node drop UDP toward each IP of `loss_pct` with that chance; an empty mapping removes it all."""
    iptables.apply(ledger, iptables.STATLOSS, run_id, [(ns, loss_rules(loss_pct))])
