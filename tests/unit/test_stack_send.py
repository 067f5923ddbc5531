"""The workloads' send path (`Stack.send` -> `Protocol.handle_send`): the same effects, in the same order, as the
`send` request it stands for, for every unicast variant and NAKACK4, the bookkeeping after it included (the
retransmit timer armed, a full window refused), and an unknown layer a usage error."""
from __future__ import annotations

import pytest

from node.config import from_env
from node.core import make_payload
from node.errors import UsageError, WindowFull
from node.layers import build_stack
from node.stack import Stack

MEMBERS = ("n1", "n2", "n3")


def _stack(unicast: str, **extra: str) -> Stack:
    config = from_env({"SPLITLAB_NODE": "n1", "SPLITLAB_RUN": "r", "SPLITLAB_MEMBERS": ",".join(MEMBERS),
                       "SPLITLAB_TOKEN": "t", "SPLITLAB_RUN_DIR": "/nonexistent", "SPLITLAB_UNICAST": unicast,
                       "SPLITLAB_MULTICAST": "nakack4", **extra})
    stack = build_stack(config)
    stack.start(0.0)
    stack.view(0.0, ("n1", 1), MEMBERS)
    return stack


@pytest.mark.parametrize("unicast", ["unicast1", "unicast2", "unicast3"])
def test_a_send_has_the_effects_of_the_send_request(unicast):
    by_request, by_send = _stack(unicast), _stack(unicast)
    for n in range(1, 6):
        payload = make_payload(f"n1.1.{n}", 100)
        to = "n2" if n % 2 else "n3"
        asked = by_request.request(n * 0.01, "unicast", "send", {"to": to, "payload": payload})
        sent = by_send.send(n * 0.01, "unicast", to, payload)
        assert sent == asked and sent, (n, sent, asked)
    payload = make_payload("n1.1.9", 100)
    assert by_send.send(1.0, "multicast", "*", payload) == by_request.request(1.0, "multicast", "send",
                                                                               {"payload": payload})
    states = [{k: v for k, v in s.layers["unicast"].state(1.0).items() if k != "config"}  # conn_id_start differs
              for s in (by_send, by_request)]
    assert states[0] == states[1] and set(by_send.layers["unicast"].send_entries) == {"n2", "n3"}


def test_a_full_window_refuses_the_send_as_it_refuses_the_request():
    stack = _stack("unicast3", SPLITLAB_UNICAST_WINDOW_CAPACITY="2")
    stack.send(0.0, "unicast", "n2", make_payload("n1.1.1", 10))
    stack.send(0.0, "unicast", "n2", make_payload("n1.1.2", 10))
    with pytest.raises(WindowFull):
        stack.send(0.0, "unicast", "n2", make_payload("n1.1.3", 10))
    with pytest.raises(WindowFull):
        stack.request(0.0, "unicast", "send", {"to": "n2", "payload": make_payload("n1.1.3", 10)})


def test_an_unknown_layer_is_a_usage_error():
    with pytest.raises(UsageError, match="no protocol layer 'unicst'"):
        _stack("unicast3").send(0.0, "unicst", "n2", b"x")
