"""Node kinds in scenario files (chaos.harness.load, chaos.harness.nodeenv): a run is of one kind, its settings
must be that kind's, its message faults must name messages of the wire its nodes speak, and a JGroups run's
properties reach its nodes merged per property."""
from __future__ import annotations

import pytest

from chaos.cluster.kinds import KINDS
from chaos.harness.errors import ScenarioError
from chaos.harness.load import load_text
from chaos.harness.runner import check_backend
from chaos.harness.schema import NODE_KINDS
from node.errors import UsageError

BASE = """
name: k
cluster:
  nodes: 2
  kind: jgroups
  defaults:
    jgroups: {unicast: UNICAST2, props: {FD_ALL.timeout: 3000, UNICAST2.stable_interval: 1000}}
  overrides:
    n1: {jgroups: {props: {FD_ALL.timeout: 15000}}}
variants:
  real: {}
  model: {kind: splitlab, unicast: unicast2, jgroups: null}
steps:
  - at_s: 1
    workload: {kind: unicast, from: n1, to: n2, count: 5}
"""


def test_a_jgroups_run_gets_its_settings_merged_per_property_and_its_kind():
    loaded = load_text(BASE, "k.yaml", variant="real")
    assert loaded.kind == "jgroups"
    env = loaded.node_env()
    assert env["n1"] == {"SPLITLAB_JGROUPS_UNICAST": "UNICAST2",
                         "SPLITLAB_JGROUPS_PROPS": "FD_ALL.timeout=15000;UNICAST2.stable_interval=1000"}
    assert env["n2"]["SPLITLAB_JGROUPS_PROPS"] == "FD_ALL.timeout=3000;UNICAST2.stable_interval=1000"


def test_jgroups_settings_in_a_run_of_splitlabs_node_are_refused_where_they_are():
    with pytest.raises(ScenarioError) as info:
        load_text(BASE, "k.yaml", variant="model")
    assert "k.yaml:7: cluster.defaults.jgroups: jgroups settings apply to runs of the real JGroups" in str(info.value)


@pytest.mark.parametrize("setting, where", [
    ("    n1: {membership: gms}", "cluster.overrides.n1.membership: membership is a setting of splitlab's own node"),
    ("    n1: {timeouts: {suspect_timeout_ms: 900}}", "suspect_timeout_ms is a timeout of splitlab's own node"),
])
def test_splitlab_node_settings_in_a_jgroups_run_are_refused(setting, where):
    text = BASE.replace("    n1: {jgroups: {props: {FD_ALL.timeout: 15000}}}", setting)
    with pytest.raises(ScenarioError, match=where):
        load_text(text, "k.yaml", variant="real")


def test_a_message_fault_must_name_a_message_of_the_wire_the_run_speaks():
    real = BASE + "  - at_s: 2\n    msg-fault: {type: UnicastStable, from: n2, to: n1, action: drop}\n"
    with pytest.raises(ScenarioError, match="UnicastStable is not a message of the wire this run's nodes speak: "
                                            "the real JGroups 2.12's"):
        load_text(real, "k.yaml", variant="real")
    ok = BASE + "  - at_s: 2\n    msg-fault: {type: Unicast2Stable, from: n2, to: n1, action: drop-range:1-3}\n"
    assert load_text(ok, "k.yaml", variant="real").kind == "jgroups"
    bad_range = BASE + "  - at_s: 2\n    msg-fault: {type: GmsView, from: n2, to: n1, action: drop-range:1-3}\n"
    with pytest.raises(ScenarioError, match="drop-range selects by seqno; GmsView has none"):
        load_text(bad_range, "k.yaml", variant="real")


def test_properties_of_a_protocol_the_stack_lacks_are_refused_at_load():
    text = BASE.replace("UNICAST2.stable_interval: 1000", "UNICAST3.xmit_interval: 1000")
    with pytest.raises(ScenarioError, match="names UNICAST3, which the stack does not have"):
        load_text(text, "k.yaml", variant="real")


def test_the_simulator_refuses_a_run_of_the_real_jgroups():
    with pytest.raises(UsageError, match="the simulator runs splitlab's own node; variant real is of jgroups"):
        check_backend(load_text(BASE, "k.yaml", variant="real"), "sim")


def test_the_scenario_schema_names_every_node_kind_there_is():
    assert NODE_KINDS == tuple(KINDS)
