"""Node configuration of the group side: SPLITLAB_MEMBERSHIP, SPLITLAB_MULTICAST, SPLITLAB_BCAST_SYNC and the
SPLITLAB_MEMBERSHIP_<SETTING> / SPLITLAB_NAKACK4_<SETTING> variables; the stack they build."""
import pytest

from node.__main__ import build_stack
from node.config import from_env
from node.errors import ConfigError
from node.multicast import Nakack4Config

BASE = {"SPLITLAB_NODE": "n2", "SPLITLAB_RUN": "r1", "SPLITLAB_MEMBERS": "n1,n2,n3", "SPLITLAB_TOKEN": "t"}


def test_defaults_run_membership_and_nakack4_with_tipc_sync():
    cfg = from_env(BASE)
    assert (cfg.membership, cfg.multicast, cfg.bcast_sync) == ("gms", "nakack4", "tipc")
    assert cfg.membership_config.suspect_timeout_ms == 1500 and cfg.membership_config.merge_interval_ms == 1000
    assert cfg.nakack4_config == Nakack4Config()
    assert cfg.nakack4_config.effective_ack_threshold == 4096
    stack = build_stack(cfg)
    assert list(stack.layers) == ["liveness", "ping", "unicast", "membership", "multicast"]
    assert stack.layers["membership"].detector.liveness is stack.layers["liveness"]


def test_settings_come_from_prefixed_variables():
    cfg = from_env({**BASE, "SPLITLAB_BCAST_SYNC": "legacy", "SPLITLAB_NAKACK4_CAPACITY": "64",
                    "SPLITLAB_NAKACK4_SEND_ATOMIC": "1", "SPLITLAB_NAKACK4_XMIT_INTERVAL_MS": "50",
                    "SPLITLAB_MEMBERSHIP_SUSPECT_TIMEOUT_MS": "3000"})
    assert cfg.bcast_sync == "legacy"
    assert (cfg.nakack4_config.capacity, cfg.nakack4_config.send_atomic) == (64, True)
    assert cfg.nakack4_config.xmit_interval_ms == 50 and cfg.nakack4_config.effective_ack_threshold == 16
    assert cfg.membership_config.suspect_timeout_ms == 3000
    layer = build_stack(cfg).layers["multicast"]
    assert layer.sync.mode == "legacy" and layer.config.capacity == 64


def test_layers_can_be_left_out():
    stack = build_stack(from_env({**BASE, "SPLITLAB_MEMBERSHIP": "none", "SPLITLAB_MULTICAST": "none"}))
    assert list(stack.layers) == ["liveness", "ping", "unicast"]


@pytest.mark.parametrize("change, fragment", [
    ({"SPLITLAB_MULTICAST": "nakack2"}, "SPLITLAB_MULTICAST"),
    ({"SPLITLAB_BCAST_SYNC": "maybe"}, "SPLITLAB_BCAST_SYNC"),
    ({"SPLITLAB_MEMBERSHIP": "fd"}, "SPLITLAB_MEMBERSHIP"),
    ({"SPLITLAB_NAKACK4_CAPACITY": "0"}, "capacity"),
    ({"SPLITLAB_NAKACK4_SEND_ATOMIC": "2"}, "send_atomic"),
    ({"SPLITLAB_NAKACK4_WINDOW": "5"}, "unknown setting"),
    ({"SPLITLAB_NAKACK4_CAPACITY": "lots"}, "not an integer"),
    ({"SPLITLAB_MEMBERSHIP_SUSPECT_TIMEOUT_MS": "100"}, "suspect_timeout_ms"),
])
def test_bad_values_name_the_variable_or_setting(change, fragment):
    with pytest.raises(ConfigError) as err:
        from_env({**BASE, **change})
    assert fragment in str(err.value)
