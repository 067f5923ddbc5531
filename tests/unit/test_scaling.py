"""The failure detector's timing for a cluster's size: the defaults up to 26 nodes, then at most about 100
heartbeats and 50 announcements a second per member and 50 times that for the whole cluster; a node's own timing
is kept whole."""
from chaos.cluster import scaling
from node.config import from_env


def test_small_clusters_keep_the_node_defaults():
    assert scaling.detector_env(3) == {} and scaling.detector_env(26) == {}
    assert scaling.with_detector_timing(None, ["n1", "n2"]) is None


def test_fifty_and_a_hundred_nodes_slow_the_heartbeats_to_bounded_rates_the_nodes_accept():
    fifty = scaling.detector_env(50)
    assert fifty == {"SPLITLAB_HEARTBEAT_MS": "490", "SPLITLAB_SILENCE_MS": "1960",
                     "SPLITLAB_MEMBERSHIP_SUSPECT_TIMEOUT_MS": "1960"}
    hundred = scaling.detector_env(100)
    assert hundred["SPLITLAB_HEARTBEAT_MS"] == "1980" and hundred["SPLITLAB_MEMBERSHIP_MERGE_INTERVAL_MS"] == "3960"
    assert hundred["SPLITLAB_MEMBERSHIP_SUSPECT_TIMEOUT_MS"] == "7920"
    for nodes in (27, 40, 50, 51, 100, 255):
        env = scaling.detector_env(nodes)
        members = ",".join(f"n{i}" for i in range(1, nodes + 1))
        config = from_env({"SPLITLAB_NODE": "n1", "SPLITLAB_RUN": "r1", "SPLITLAB_MEMBERS": members,
                           "SPLITLAB_TOKEN": "t", **env})
        heard_per_s = (nodes - 1) * 1000 / config.heartbeat_ms
        infos_per_s = (nodes - 1) * 1000 / config.membership_config.merge_interval_ms
        assert heard_per_s <= scaling.HEARD_PER_S and infos_per_s <= scaling.INFOS_PER_S + 1
        assert nodes * heard_per_s <= scaling.CLUSTER_HEARD_PER_S and nodes * infos_per_s <= scaling.CLUSTER_INFOS_PER_S
        assert config.heartbeat_ms * scaling.SUSPECT_BEATS <= config.membership_config.suspect_timeout_ms


def test_a_node_that_sets_its_own_timing_keeps_it_whole():
    names = [f"n{i}" for i in range(1, 51)]
    env = scaling.with_detector_timing({"n1": {"SPLITLAB_HEARTBEAT_MS": "5000", "X": "1"}, "n2": {"X": "2"}}, names)
    assert env["n1"] == {"SPLITLAB_HEARTBEAT_MS": "5000", "X": "1"}
    assert env["n2"] == {**scaling.detector_env(50), "X": "2"} and env["n3"] == scaling.detector_env(50)
