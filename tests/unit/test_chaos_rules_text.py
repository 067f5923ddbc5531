"""What the iptables backends hand to iptables-restore, as text (no root). The netem backend: test_chaos_netem;
the chain helper itself: test_chaos_iptables."""
from chaos.faults.grudge import LinkFault
from chaos.faults.msgrules import MsgRule
from chaos.net import iptables, partition, statloss
from chaos.net.shaper import control
from chaos.net.shaper.spec import ShaperSpec


def test_partition_creates_and_removes_chain_and_hook_in_one_restore():
    text = iptables.restore_input("SL-r1", partition.drop_rules(["10.0.0.3"]), hook_into="INPUT")
    assert text == "*filter\n:SL-r1 - [0:0]\n-A SL-r1 -s 10.0.0.3/32 -j DROP\n-I INPUT 1 -j SL-r1\nCOMMIT\n"
    assert iptables.remove_input("SL-r1", "INPUT") == "*filter\n-D INPUT -j SL-r1\n:SL-r1 - [0:0]\n-X SL-r1\nCOMMIT\n"


def test_queue_chain_lets_the_shapers_own_packets_pass_and_bypasses_without_a_listener():
    spec = ShaperSpec("r1", "n1", seed=1, links={"10.0.0.3": LinkFault(delay_ms=5)},
                      rules=[MsgRule(1, "n1", "n4", "drop")], names={"10.0.0.3": "n3", "10.0.0.4": "n4"})
    text = iptables.restore_input("SLQ-r1", control.queue_rules(spec))
    assert text.splitlines() == [
        "*filter", ":SLQ-r1 - [0:0]", "-A SLQ-r1 -m mark --mark 0x5e1 -j RETURN",
        "-A SLQ-r1 -d 10.0.0.3/32 -p udp -j NFQUEUE --queue-num 71 --queue-bypass",
        "-A SLQ-r1 -d 10.0.0.4/32 -p udp -j NFQUEUE --queue-num 71 --queue-bypass", "COMMIT"]


def test_statistic_loss_rules():
    assert statloss.loss_rules({"10.0.0.3": 12.5}) == [
        "-d 10.0.0.3/32 -p udp -m statistic --mode random --probability 0.125000 -j DROP"]
