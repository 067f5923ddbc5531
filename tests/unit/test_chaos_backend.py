"""Backend choice for link faults (chaos.net.docker.choose_backend) on faked kernel capabilities."""
import pytest

from chaos.faults.grudge import LinkFault
from chaos.net.backends import choose_backend
from node.errors import EnvironmentProblem, UsageError

ALL = {"netem": (True, "ok"), "nfqueue": (True, "ok"), "iptables": (True, "ok")}
NO_NETEM = dict(ALL, netem=(False, "Specified qdisc kind is unknown"))
NOTHING = dict(NO_NETEM, nfqueue=(False, "no xt_NFQUEUE"))


def test_probed_order_netem_then_nfqueue_then_iptables_for_pure_loss():
    slow, loss = LinkFault(delay_ms=5), LinkFault(loss_pct=5)
    assert choose_backend(slow, None, ALL) == "netem"
    assert choose_backend(slow, None, NO_NETEM) == "nfqueue"
    assert choose_backend(loss, None, NOTHING) == "iptables"
    with pytest.raises(EnvironmentProblem, match="no backend can apply"):
        choose_backend(slow, None, NOTHING)


def test_forced_backends():
    assert choose_backend(LinkFault(loss_pct=5), "iptables", NO_NETEM) == "iptables"
    with pytest.raises(UsageError, match="pure loss only"):
        choose_backend(LinkFault(delay_ms=5), "iptables", ALL)
    with pytest.raises(EnvironmentProblem, match="Specified qdisc kind is unknown"):
        choose_backend(LinkFault(delay_ms=5), "netem", NO_NETEM)
    with pytest.raises(UsageError, match="unknown backend"):
        choose_backend(LinkFault(delay_ms=5), "tc", ALL)
