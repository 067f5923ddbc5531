"""Extension point: a protocol layer is one file in its slot's package plus one `@register_layer` line.

The registry (node/layers.py over node/registry.py) finds modules nobody names, the node's configuration and
the scenario loader accept exactly what is registered (an unknown name lists the registered ones), build_stack
builds the registered class, the node image's tag and context follow a new file under node/, and the
`noretx` example really never retransmits."""
from __future__ import annotations

import importlib
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

import pytest

from chaos.cluster import compiled, images
from chaos.harness.errors import ScenarioError
from chaos.harness.load import load_text
from node.config import from_env
from node.errors import ConfigError
from node.layers import SLOTS, build_stack, layer_choices, layer_class, layer_names, register_layer
from node.registry import Registry
from node.sim import send_many, unicast_sim
from node.unicast import Unicast3, UnicastConfig
from node.unicast.noretx import NoRetx
from node import wire
from node.wire import (Message, UnicastAck, UnicastData, cluster_id_of, decode_datagram_from, encode_datagram,
                       message_types, register)
from test_images import repo_copy  # noqa: F401  (the fixture: a copy of the image inputs)

REPO = Path(__file__).resolve().parents[2]
ENV = {"SPLITLAB_NODE": "n1", "SPLITLAB_RUN": "r", "SPLITLAB_MEMBERS": "n1,n2", "SPLITLAB_TOKEN": "t"}
SCENARIO = "cluster:\n  nodes: 2\n  defaults: {unicast: UNICAST, membership: none, multicast: none}\n"


@pytest.fixture
def toy_layer() -> Iterator[type]:
    """A unicast layer registered by this test module (as a user's file would), removed afterwards."""

    @register_layer("unicast", "toy_unicast")
    class ToyUnicast(Unicast3):
        pass

    yield ToyUnicast
    SLOTS["unicast"].registry.unregister("toy_unicast")


def test_built_ins_and_the_example_are_registered_in_their_slots() -> None:
    assert layer_names("unicast")[:3] == ("unicast3", "unicast2", "unicast1")
    assert "noretx" in layer_names("unicast") and layer_class("unicast", "noretx") is NoRetx
    assert NoRetx.NAME == "noretx"  # the registered name is the `proto` of its events
    assert layer_choices("membership") == ("gms", "none") and layer_choices("multicast") == ("nakack4", "none")


def test_a_fresh_node_process_finds_noretx_though_no_module_imports_it() -> None:
    code = ("import sys; from node.config import from_env; from node.layers import build_stack; "
            "stack = build_stack(from_env({'SPLITLAB_NODE': 'n1', 'SPLITLAB_RUN': 'r', 'SPLITLAB_MEMBERS': 'n1,n2', "
            "'SPLITLAB_TOKEN': 't', 'SPLITLAB_UNICAST': 'noretx'})); "
            "print(type(stack.layers['unicast']).__module__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "node.unicast.noretx", out.stderr


def test_an_unknown_layer_names_the_registered_ones_and_where_a_new_one_goes() -> None:
    with pytest.raises(ConfigError) as info:
        layer_class("unicast", "unicast4")
    text = str(info.value)
    assert "unknown unicast layer 'unicast4'" in text and "noretx" in text and "unicast1" in text
    assert "node/unicast/" in text


def test_registration_refuses_a_taken_name_none_and_a_contradicting_name() -> None:
    with pytest.raises(ConfigError, match="registered twice"):
        register_layer("unicast", "unicast3")(type("Other", (Unicast3,), {}))
    with pytest.raises(ConfigError, match="reserved"):
        register_layer("multicast", "none")
    with pytest.raises(ConfigError, match="NAME is 'x'"):
        register_layer("unicast", "y")(type("Named", (Unicast3,), {"NAME": "x"}))
    with pytest.raises(ConfigError, match="unknown stack slot"):
        register_layer("transport", "tcp")
    assert "y" not in layer_names("unicast") and layer_class("unicast", "unicast3") is Unicast3


def test_the_node_configuration_and_build_stack_follow_the_registry(toy_layer: type) -> None:
    stack = build_stack(from_env({**ENV, "SPLITLAB_UNICAST": "toy_unicast", "SPLITLAB_MULTICAST": "none"}))
    assert type(stack.layers["unicast"]) is toy_layer and "multicast" not in stack.layers
    assert type(build_stack(from_env({**ENV, "SPLITLAB_UNICAST": "noretx"})).layers["unicast"]) is NoRetx
    with pytest.raises(ConfigError) as info:
        from_env({**ENV, "SPLITLAB_UNICAST": "toy_unicas"})
    assert "toy_unicast" in str(info.value) and "noretx" in str(info.value)


def test_the_scenario_loader_validates_layer_names_from_the_registry(toy_layer: type) -> None:
    loaded = load_text(SCENARIO.replace("UNICAST", "toy_unicast"), "s.yaml")
    assert loaded.node_env()["n1"]["SPLITLAB_UNICAST"] == "toy_unicast"
    with pytest.raises(ScenarioError) as info:
        load_text(SCENARIO.replace("UNICAST", "toy"), "s.yaml")
    (line,) = [str(p) for p in info.value.problems]
    assert line == ("s.yaml:3: cluster.defaults.unicast: expected one of 'noretx', 'toy_unicast', 'unicast1', "
                    "'unicast2' or 'unicast3', got 'toy'")
    with pytest.raises(ScenarioError) as info:
        load_text(SCENARIO.replace("multicast: none", "multicast: nakack5").replace("UNICAST", "noretx"), "s.yaml")
    assert "expected one of 'nakack4' or 'none', got 'nakack5'" in str(info.value.problems[0])


@pytest.fixture
def package_of_things(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., ModuleType]]:
    """`package_of_things(name, modules, init="")`: imports a new package `name` whose `__init__` makes
    `THINGS = Registry('thing', (name,))` (then runs `init`), with `modules` ({file stem: source}) in it; what it
    imported is forgotten afterwards."""
    made: list[str] = []

    def make(name: str, modules: dict[str, str], init: str = "") -> ModuleType:
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text(f"from node.registry import Registry\n"
                                             f"THINGS = Registry('thing', ({name!r},))\n{init}")
        for stem, source in modules.items():
            (package / f"{stem}.py").write_text(source)
        made.append(name)
        importlib.invalidate_caches()  # the directory is newer than the import system's view of tmp_path
        return importlib.import_module(name)

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for module in [m for m in sys.modules if m.split(".")[0] in made]:
        monkeypatch.delitem(sys.modules, module)


def test_discovery_imports_every_module_of_the_package_that_nobody_names(package_of_things) -> None:
    extpkg = package_of_things("extpkg", {
        "mine": "from extpkg import THINGS\nTHINGS.register('mine', 2)\n",
        "_private": "raise AssertionError('a private module is not imported')\n"},
        init="THINGS.register('builtin', 1)\n")

    things: Registry[int] = extpkg.THINGS
    assert "extpkg.mine" not in sys.modules
    assert things.names() == ("builtin", "mine") and things.get("mine") == 2


def test_a_lookup_from_another_thread_waits_for_the_discovery_under_way(package_of_things) -> None:
    """Two scenario runs in one process: the second thread's lookup must not see a half-discovered registry."""
    slowpkg = package_of_things("slowpkg", {
        "slow": "import time\nfrom slowpkg import THINGS\ntime.sleep(0.3)\nTHINGS.register('slow', 1)\n"})

    things: Registry[int] = slowpkg.THINGS
    first = threading.Thread(target=things.names)
    first.start()
    deadline = time.monotonic() + 5
    while "slowpkg.slow" not in sys.modules and time.monotonic() < deadline:  # the first thread is importing
        time.sleep(0.001)
    try:
        assert things.names() == ("slow",)
    finally:
        first.join()


def test_an_outsider_taking_a_name_a_shipped_module_holds_is_refused_before_discovery(package_of_things) -> None:
    """A test or an extension registers a name first thing: it is refused then, and the shipped entry stays
    (registered before the discovery, the outsider broke the shipped module's import at a later lookup)."""
    ownpkg = package_of_things("ownpkg", {
        "shipped": "from ownpkg import THINGS\n\n@lambda cls: THINGS.register('taken', cls)\nclass Shipped:\n"
                   "    pass\n"})

    class Outsider:
        pass

    things: Registry[type] = ownpkg.THINGS
    with pytest.raises(ConfigError, match="'taken' is registered twice: by ownpkg.shipped.Shipped"):
        things.register("taken", Outsider)
    assert things.names() == ("taken",) and things.get("taken").__module__ == "ownpkg.shipped"


def test_a_new_file_under_node_changes_the_image_tag_and_is_in_its_sources(repo_copy: Path) -> None:
    tmp_path = repo_copy
    before = images.node_tag(tmp_path)
    (tmp_path / "node" / "unicast" / "mylayer.py").write_text("# a user's layer\n")
    assert images.node_tag(tmp_path) != before
    assert tmp_path / "node" / "unicast" / "mylayer.py" in compiled.node_sources(tmp_path)


@pytest.mark.parametrize("variant, delivered", [("unicast3", 10), ("noretx", 2)])
def test_noretx_never_resends_a_lost_message(variant: str, delivered: int) -> None:
    """The third DATA is lost once: unicast3 resends it and delivers all ten, noretx delivers the two before
    the gap, buffers the rest and never resends (its suppressed resends are counted)."""
    sim = unicast_sim(variant, ("a", "b"), seed=2, config=UnicastConfig())
    sim.drop_next("a", "b", UnicastData, where=lambda m: m.seqno == 3)
    sent = send_many(sim, "a", "b", 10)
    sim.run_for(3.0)
    assert sim.delivered("b", "a") == sent[:delivered], sim.repro()
    resends = [e for e in sim.emitted("data_tx", node="a") if e.get("resend")]
    suppressed = sim.layer("a", "unicast").send_entries["b"].counters["resend_suppressed"]
    assert (bool(resends), suppressed > 0) == ((True, False) if variant == "unicast3" else (False, True))


@dataclass(slots=True, unsafe_hash=True)
class ToyMessage(Message):
    """A new layer's own message, defined outside node.wire (plain Python even when the node is compiled)."""

    seqno: int
    flag: int


def test_a_new_layers_own_message_type_encodes_and_decodes_like_the_built_in_ones() -> None:
    free = next(code for code in range(47, 15, -1) if code not in message_types())  # the unicast range's top
    try:
        register(ToyMessage, free, "QB")
        sent = [ToyMessage(7, 1), UnicastAck(3, 4096, 0)]
        datagram = encode_datagram(cluster_id_of("run"), "n1", sent, 5)
        assert decode_datagram_from(datagram, cluster_id_of("run")) == ("n1", 5, sent)
    finally:
        wire._REGISTRY.pop(free, None)  # the other tests see the built-in types only
        wire._DECODERS.pop(free, None)
