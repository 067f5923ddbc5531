"""Grudges, topologies and link faults as pure data (chaos.faults.grudge): no root, no Docker."""
import random

import pytest

from chaos.faults import grudge as g
from node.errors import UsageError

N5 = ["n1", "n2", "n3", "n4", "n5"]


def test_one_way_and_asymmetric_cut_one_direction_only():
    assert g.one_way("n1", "n2") == {"n2": frozenset({"n1"})}
    assert g.cut_links(g.one_way("n1", "n2")) == {("n1", "n2")}
    assert g.asymmetric(["n1", "n2"], ["n3"]) == {"n3": frozenset({"n1", "n2"})}
    assert g.two_way(["n1"], ["n2"]) == {"n1": frozenset({"n2"}), "n2": frozenset({"n1"})}


def test_bisect_split_isolate_are_symmetric_complete_grudges():
    assert g.bisect(N5) == {"n1": {"n3", "n4", "n5"}, "n2": {"n3", "n4", "n5"},
                            "n3": {"n1", "n2"}, "n4": {"n1", "n2"}, "n5": {"n1", "n2"}}
    assert g.isolate("n3", N5)["n3"] == {"n1", "n2", "n4", "n5"}
    assert all(g.isolate("n3", N5)[n] == {"n3"} for n in ("n1", "n2", "n4", "n5"))
    links = g.cut_links(g.split(["n1"], ["n2", "n3"]))
    assert links == {(a, b) for a, b in links if (b, a) in links}  # symmetric
    with pytest.raises(UsageError, match="two components"):
        g.split(["n1", "n2"], ["n2"])


def test_bridge_keeps_one_node_talking_to_both_sides():
    grudge = g.bridge(N5)  # halves n1,n2 | n3,n4,n5 ; n3 is the bridge
    assert "n3" not in grudge
    assert grudge["n1"] == {"n4", "n5"} and grudge["n4"] == {"n1", "n2"}


def test_ring_every_node_sees_a_majority_and_no_two_the_same():
    for count in (4, 5, 6, 7):
        nodes = [f"n{i}" for i in range(1, count + 1)]
        grudge = g.ring(nodes)
        views = {n: frozenset(set(nodes) - grudge.get(n, frozenset())) for n in nodes}
        assert all(len(v) > count // 2 for v in views.values()), views
        assert g.cut_links(grudge) == {(b, a) for a, b in g.cut_links(grudge)}  # symmetric
        if count >= 5:
            assert len(set(views.values())) == count
    with pytest.raises(UsageError, match="at least 4"):
        g.ring(["n1", "n2", "n3"])


def test_majority_minority_and_minority_third_are_seeded():
    a = g.majority_minority(N5, random.Random(3))
    b = g.majority_minority(N5, random.Random(3))
    assert a == b
    sizes = sorted(len(v) for v in a.values())
    assert sizes == [2, 2, 2, 3, 3]  # 3 majority nodes drop the 2, the 2 drop the 3
    third = g.minority_third(["n1", "n2", "n3", "n4", "n5", "n6"], random.Random(1))
    assert sorted(len(v) for v in third.values()) == [2, 2, 2, 2, 4, 4]


@pytest.mark.parametrize("text, expected", [
    ("n2<-n1", {"n2": {"n1"}}),
    ("n1->n2", {"n2": {"n1"}}),
    ("n2,n3<-n1", {"n2": {"n1"}, "n3": {"n1"}}),
    ("n1<->n2", {"n1": {"n2"}, "n2": {"n1"}}),
    ("n1,n2|n3", {"n1": {"n3"}, "n2": {"n3"}, "n3": {"n1", "n2"}}),
    ("n2<-n1; n3<-n1", {"n2": {"n1"}, "n3": {"n1"}}),
    ("isolate:n1", {"n1": {"n2", "n3"}, "n2": {"n1"}, "n3": {"n1"}}),
    ("bisect", {"n1": {"n2", "n3"}, "n2": {"n1"}, "n3": {"n1"}}),
])
def test_parse_grudge(text, expected):
    assert g.parse_grudge(text, ["n1", "n2", "n3"]) == {k: frozenset(v) for k, v in expected.items()}


@pytest.mark.parametrize("text, fragment", [
    ("", "empty grudge"),
    ("n1", "has no '<-'"),
    ("n1<-n2->n3", "one arrow per clause"),
    ("n1<-N2", "not a node name"),
    ("n1<-n9", "unknown node(s) n9"),
    ("n1<-n1", "its own traffic"),
    ("n2<-n1;;n3<-n1", "empty clause"),
    ("isolate:n7", "unknown node"),
])
def test_malformed_grudges_get_one_clear_error(text, fragment):
    with pytest.raises(UsageError) as info:
        g.parse_grudge(text, ["n1", "n2", "n3"])
    assert fragment in info.value.message


def test_describe_round_trips():
    grudge = g.parse_grudge("n1,n2|n3", ["n1", "n2", "n3"])
    assert g.parse_grudge(g.describe(grudge), ["n1", "n2", "n3"]) == grudge
    assert g.describe({}) == "(none)"


def test_link_fault_validation_names_the_field():
    with pytest.raises(UsageError, match="loss_pct must be within 0..100, got 150"):
        g.LinkFault(loss_pct=150)
    with pytest.raises(UsageError, match="delay_ms must be >= 0"):
        g.LinkFault(delay_ms=-1)
    with pytest.raises(UsageError, match="jitter_ms must be a number"):
        g.link_fault({"jitter_ms": "soon"})
    with pytest.raises(UsageError, match="reorder_pct=10 needs delay_ms > 0"):
        g.LinkFault(reorder_pct=10)
    with pytest.raises(UsageError, match="unknown link fault field"):
        g.link_fault({"latency": 3})
    with pytest.raises(UsageError, match="duplicate_pct must be a number"):
        g.LinkFault(duplicate_pct=float("nan"))


def test_parse_link_fault_and_rates():
    fault = g.parse_link_fault("delay_ms=20, jitter_ms=5,loss_pct=1,rate=2mbit")
    assert fault == g.LinkFault(delay_ms=20, jitter_ms=5, loss_pct=1, rate_kbit=2000)
    assert fault.as_dict() == {"delay_ms": 20, "jitter_ms": 5, "loss_pct": 1, "rate_kbit": 2000}
    assert g.LinkFault(loss_pct=3).only_loss and not fault.only_loss
    with pytest.raises(UsageError, match="not field=value"):
        g.parse_link_fault("delay_ms")
    assert g.LinkFault(delay_ms=10).merged(g.LinkFault(loss_pct=2)) == g.LinkFault(delay_ms=10, loss_pct=2)


def test_parse_matrix_and_links():
    nodes = ["n1", "n2", "n3"]
    m = g.parse_matrix("n1->n2:delay_ms=20;n2<->n3:loss_pct=5;*->n1:duplicate_pct=1", nodes)
    assert m[("n1", "n2")] == g.LinkFault(delay_ms=20)
    assert m[("n2", "n3")] == g.LinkFault(loss_pct=5)
    assert m[("n2", "n1")] == g.LinkFault(duplicate_pct=1)
    assert m[("n3", "n1")] == g.LinkFault(duplicate_pct=1)
    assert m[("n3", "n2")] == g.LinkFault(loss_pct=5)
    assert g.parse_links("n1->n2;*->n3", nodes) == [("n1", "n2"), ("n1", "n3"), ("n2", "n3")]
    with pytest.raises(UsageError, match="unknown node"):
        g.parse_matrix("n1->n9:delay_ms=1", nodes)
    with pytest.raises(UsageError, match="expected 'src->dst:field=value"):
        g.parse_matrix("n1->n2", nodes)
    with pytest.raises(UsageError, match="loss_pct must be within 0..100"):
        g.parse_matrix("n1->n2:loss_pct=150", nodes)
    assert len(g.all_links(nodes)) == 6 and len(g.all_links(nodes, between=["n1"])) == 4


def test_correlations_and_distribution_are_parsed_validated_and_kept_by_merge():
    fault = g.parse_link_fault("delay_ms=100,jitter_ms=20,distribution=normal,delay_corr_pct=25")
    assert fault.as_dict() == {"delay_ms": 100, "jitter_ms": 20, "distribution": "normal", "delay_corr_pct": 25}
    assert fault.merged(g.LinkFault(loss_pct=5)) == g.LinkFault(delay_ms=100, jitter_ms=20, distribution="normal",
                                                                delay_corr_pct=25, loss_pct=5)
    assert g.LinkFault(distribution="uniform").empty
    with pytest.raises(UsageError, match="distribution must be one of uniform, normal, pareto, paretonormal"):
        g.parse_link_fault("delay_ms=10,jitter_ms=2,distribution=gauss")
    with pytest.raises(UsageError, match="distribution=pareto needs jitter_ms > 0"):
        g.LinkFault(delay_ms=10, distribution="pareto")
    with pytest.raises(UsageError, match="delay_corr_pct=20 needs jitter_ms > 0"):
        g.LinkFault(delay_ms=10, delay_corr_pct=20)
    with pytest.raises(UsageError, match="delay_corr_pct must be within 0..100"):
        g.LinkFault(delay_ms=10, jitter_ms=1, delay_corr_pct=101)
    with pytest.raises(UsageError, match="unknown link fault field"):
        g.link_fault({"loss_pct": 5, "loss_corr_pct": 50})
