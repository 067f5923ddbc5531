"""Node configuration from the environment: defaults, explicit addresses, and clear errors for bad values."""
import pytest

from node.config import check_name, from_env
from node.errors import ConfigError

BASE = {"SPLITLAB_NODE": "n2", "SPLITLAB_RUN": "r1", "SPLITLAB_MEMBERS": "n1,n2,n3", "SPLITLAB_TOKEN": "t"}


def test_defaults_resolve_members_through_network_aliases():
    cfg = from_env(BASE)
    assert cfg.members == ("n1", "n2", "n3")
    assert cfg.data_address("n3") == ("n3-data", 7100)
    assert cfg.control_address() == ("n2-control", 7000)
    assert cfg.history_path == "/splitlab/run/events/n2.jsonl"
    assert (cfg.heartbeat_ms, cfg.silence_ms, cfg.bundle_max_bytes) == (250, 1500, 8192)


def test_explicit_addresses_override_the_template():
    cfg = from_env({**BASE, "SPLITLAB_ADDRESSES": "n1=127.0.0.1:7101, n3=127.0.0.1:7103",
                    "SPLITLAB_CONTROL_BIND": "127.0.0.1:7002"})
    assert cfg.data_address("n1") == ("127.0.0.1", 7101)
    assert cfg.data_address("n2") == ("n2-data", 7100)
    assert cfg.control_address() == ("127.0.0.1", 7002)


@pytest.mark.parametrize("change, fragment", [
    ({"SPLITLAB_TOKEN": ""}, "SPLITLAB_TOKEN"),
    ({"SPLITLAB_NODE": "n9"}, "not in SPLITLAB_MEMBERS"),
    ({"SPLITLAB_MEMBERS": "n1,n2,n2"}, "twice"),
    ({"SPLITLAB_MEMBERS": "n1,N2"}, "invalid member"),
    ({"SPLITLAB_HEARTBEAT_MS": "abc"}, "SPLITLAB_HEARTBEAT_MS='abc' is not an integer"),
    ({"SPLITLAB_HEARTBEAT_MS": "2000"}, "must exceed"),
    ({"SPLITLAB_DATA_PORT": "70000"}, "outside 1..65535"),
    ({"SPLITLAB_ADDRESSES": "n7=1.2.3.4:5"}, "SPLITLAB_ADDRESSES"),
    ({"SPLITLAB_ADDRESSES": "n1=host"}, "expected host:port"),
])
def test_bad_values_name_the_variable(change, fragment):
    with pytest.raises(ConfigError) as info:
        from_env({**BASE, **change})
    assert fragment in str(info.value)


@pytest.mark.parametrize("name", ["", "1n", "n 1", "N1", "n" * 65])
def test_invalid_names(name):
    with pytest.raises(ConfigError):
        check_name(name)
