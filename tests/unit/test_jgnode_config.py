"""The JGroups node's configuration and stack string (jgnode.config, jgnode.stack): the contract's variables
read the same way as splitlab's node, JGroups' own settings validated, properties over the defaults."""
from __future__ import annotations

import pytest

from jgnode import stack
from jgnode.config import from_env, parse_props
from node.errors import ConfigError

BASE = {"SPLITLAB_NODE": "n1", "SPLITLAB_RUN": "r1", "SPLITLAB_MEMBERS": "n1,n2", "SPLITLAB_TOKEN": "t"}


def test_the_contract_part_is_splitlabs_own_and_other_kinds_variables_do_not_reach_it():
    config = from_env({**BASE, "SPLITLAB_SILENCE_MS": "900", "SPLITLAB_UNICAST": "no-such-layer"})
    assert config.node.name == "n1" and config.node.members == ("n1", "n2") and config.node.silence_ms == 900
    assert config.unicast == "UNICAST2" and config.heap_mb == 128


@pytest.mark.parametrize("env, words", [
    ({"SPLITLAB_JGROUPS_UNICAST": "UNICAST3"}, "SPLITLAB_JGROUPS_UNICAST='UNICAST3'"),
    ({"SPLITLAB_JGROUPS_HEAP_MB": "8"}, "SPLITLAB_JGROUPS_HEAP_MB"),
    ({"SPLITLAB_JGROUPS_PROPS": "FD_ALL.timeout=3000;oops"}, "'oops' is not PROTOCOL.property=value"),
    ({"SPLITLAB_JGROUPS_PROPS": "UDP.bind_addr=1.2.3.4;rm -rf"}, "'rm -rf'"),
    ({"SPLITLAB_MEMBERS": "n2,n3"}, "SPLITLAB_NODE=n1 is not in SPLITLAB_MEMBERS"),
])
def test_bad_settings_are_refused_naming_the_variable(env, words):
    with pytest.raises(ConfigError, match=None) as info:
        from_env({**BASE, **env})
    assert words in str(info.value)


def test_properties_override_the_defaults_of_their_protocol_only():
    props = parse_props("FD_ALL.timeout=1500; UNICAST2.stable_interval=1000;pbcast.GMS.join_timeout=500")
    assert props == {"FD_ALL": {"timeout": "1500"}, "UNICAST2": {"stable_interval": "1000"},
                     "pbcast.GMS": {"join_timeout": "500"}}
    text = stack.config_string("10.0.0.1", 7100, ["10.0.0.1", "10.0.0.2"], "UNICAST2",
                               {"FD_ALL": {"timeout": "1500"}, "UNICAST2": {"stable_interval": "1000"}})
    layers = text.split(":")
    names = [layer.split("(", 1)[0] for layer in layers]
    assert names == ["UDP", stack.TRACE_PROTOCOL, "TCPPING", "MERGE2", "FD_ALL", "VERIFY_SUSPECT", "pbcast.NAKACK",
                     "UNICAST2", "pbcast.STABLE", "pbcast.GMS"]
    assert "FD_ALL(interval=500;timeout=1500)" in layers
    assert "UNICAST2(stable_interval=1000)" in layers
    assert "initial_hosts=10.0.0.1[7100],10.0.0.2[7100]" in layers[2] and "ip_mcast=false" in layers[0]


def test_a_protocol_the_stack_does_not_have_is_refused():
    with pytest.raises(ConfigError, match="names UNICAST3, which the stack does not have"):
        stack.config_string("10.0.0.1", 7100, ["10.0.0.1"], "UNICAST", {"UNICAST3": {"x": "1"}})
    # the other unicast protocol is not in the stack either
    with pytest.raises(ConfigError, match="names UNICAST2"):
        stack.config_string("10.0.0.1", 7100, ["10.0.0.1"], "UNICAST", {"UNICAST2": {"x": "1"}})


def test_properties_of_the_other_unicast_protocol_are_refused_when_the_configuration_is_read():
    with pytest.raises(ConfigError, match="names UNICAST2, which the stack does not have"):
        from_env({**BASE, "SPLITLAB_JGROUPS_UNICAST": "UNICAST", "SPLITLAB_JGROUPS_PROPS": "UNICAST2.timeout=300"})
