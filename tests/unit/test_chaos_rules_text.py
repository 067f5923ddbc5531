"""What the iptables backends hand to iptables-restore, as text (no root). The netem backend: test_chaos_netem."""
from chaos import partition
from chaos.grudge import LinkFault
from chaos.shaper import control, statloss
from chaos.shaper.msgrules import MsgRule
from chaos.shaper.spec import ShaperSpec


def test_partition_creates_and_removes_chain_and_hook_in_one_restore():
    text = partition.restore_input("SL-r1", ["10.0.0.3"], hook=True)
    assert text == "*filter\n:SL-r1 - [0:0]\n-A SL-r1 -s 10.0.0.3/32 -j DROP\n-I INPUT 1 -j SL-r1\nCOMMIT\n"
    assert partition.remove_input("SL-r1") == "*filter\n-D INPUT -j SL-r1\n:SL-r1 - [0:0]\n-X SL-r1\nCOMMIT\n"


def test_queue_chain_lets_the_shapers_own_packets_pass_and_bypasses_without_a_listener():
    spec = ShaperSpec("r1", "n1", seed=1, links={"10.0.0.3": LinkFault(delay_ms=5)},
                      rules=[MsgRule(1, "n1", "n4", "drop")], names={"10.0.0.3": "n3", "10.0.0.4": "n4"})
    text = control.queue_input("SLQ-r1", spec, hook=False)
    assert text.splitlines() == [
        "*filter", ":SLQ-r1 - [0:0]", "-A SLQ-r1 -m mark --mark 0x5e1 -j RETURN",
        "-A SLQ-r1 -d 10.0.0.3/32 -p udp -j NFQUEUE --queue-num 71 --queue-bypass",
        "-A SLQ-r1 -d 10.0.0.4/32 -p udp -j NFQUEUE --queue-num 71 --queue-bypass", "COMMIT"]
    assert "-I OUTPUT 1 -j SLQ-r1" in control.queue_input("SLQ-r1", spec, hook=True)


def test_statistic_loss_rules():
    text = statloss.restore_input("SLL-r1", {"10.0.0.3": 12.5}, hook=True)
    assert "-A SLL-r1 -d 10.0.0.3/32 -p udp -m statistic --mode random --probability 0.125000 -j DROP" in text
    assert "-I OUTPUT 1 -j SLL-r1" in text
