"""chaos.wire.cutwatch.classify: where a probe stream switched, from which probes arrived."""
from __future__ import annotations

import random

from chaos.wire import cutwatch


def times(n: int) -> list[float]:
    return [i * 0.001 for i in range(n)]


def test_a_stream_that_stops_was_cut_after_its_last_arrival():
    arrived = [True] * 30 + [False] * 20
    assert cutwatch.classify(times(50), arrived) == ("cut", 30, 0)


def test_a_stream_that_resumes_was_healed_before_its_first_arrival():
    arrived = [False] * 12 + [True] * 40
    assert cutwatch.classify(times(52), arrived) == ("healed", 12, 0)


def test_an_odd_loss_before_a_cut_and_a_straggler_after_it_do_not_move_it():
    arrived = [True] * 30 + [False] * 20
    arrived[5] = False  # lost on the way, long before the cut
    arrived[40] = True  # a late arrival, after it
    assert cutwatch.classify(times(50), arrived) == ("cut", 30, 2)


def test_a_stream_on_one_side_only_did_not_switch():
    assert cutwatch.classify(times(40), [True] * 40) is None
    assert cutwatch.classify(times(40), [False] * 40) is None
    noisy = [True] * 40
    noisy[17] = False  # one loss is not a cut
    assert cutwatch.classify(times(40), noisy) is None


def test_random_switch_points_are_found():
    seed = 1234  # the one seed of this test: its failure message names it
    rng = random.Random(seed)
    for _ in range(200):
        n = rng.randint(2, 300)
        k = rng.randint(1, n - 1)
        kind = rng.choice(["cut", "healed"])
        arrived = [(i < k) == (kind == "cut") for i in range(n)]
        assert cutwatch.classify(times(n), arrived) == (kind, k, 0), f"seed {seed}: n={n} k={k} {kind}"
