"""How the shaper process gives the verdicts of one wake-up's packets (chaos.net.shaper.__main__): runs of one
verdict as batch verdicts, rewritten packets one by one in their place, and every verdict one by one while the
kernel holds a delayed packet for the shaper (a batch would decide that one too)."""
from chaos.net.shaper import nfq
from chaos.net.shaper.__main__ import Shaper

DROP, ACCEPT = nfq.NF_DROP, nfq.NF_ACCEPT


class RecordingQueue:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def verdict(self, packet_id, verdict, payload=None):
        self.calls.append(("one", packet_id, verdict, payload))

    def verdict_batch(self, last_id, verdict):
        self.calls.append(("batch", last_id, verdict))


def shaper(kernel_held: int) -> Shaper:
    s = Shaper.__new__(Shaper)  # no spec, sockets or queue: only what `_give` uses
    s.queue, s.kernel_held, s.batches = RecordingQueue(), kernel_held, 0
    return s


DECIDED = [(1, DROP, None), (2, DROP, None), (3, ACCEPT, None), (4, ACCEPT, b"rewritten"), (5, ACCEPT, None),
           (6, DROP, None)]


def test_runs_of_one_verdict_are_one_batch_each_and_a_rewritten_packet_keeps_its_place():
    s = shaper(kernel_held=0)
    s._give(DECIDED)
    assert s.queue.calls == [("batch", 2, DROP), ("batch", 3, ACCEPT), ("one", 4, ACCEPT, b"rewritten"),
                             ("batch", 5, ACCEPT), ("batch", 6, DROP)]
    assert s.batches == 4


def test_while_the_kernel_holds_a_packet_for_us_every_verdict_goes_one_by_one():
    s = shaper(kernel_held=1)
    s._give(DECIDED)
    assert s.queue.calls == [("one", i, v, p) for i, v, p in DECIDED]
