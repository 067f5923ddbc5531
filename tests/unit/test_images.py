"""Image inputs: the Debian mirror comes from the host's apt configuration; tags follow the hashed inputs."""
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from chaos.cluster import images, kinds
from node.errors import EnvironmentProblem

REPO = Path(__file__).resolve().parents[2]


def test_mirror_from_deb822_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb\n# comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n")
    assert images.debian_mirror(tmp_path) == "http://mirror.example/debian"


def test_mirror_from_one_line_list(tmp_path, monkeypatch):
    monkeypatch.delenv("DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# deb http://old.example/debian bookworm main\n"
        "deb [arch=amd64] http://other.example/ubuntu jammy main\n"
        "deb http://local.example/debian/ bookworm main contrib\n")
    assert images.debian_mirror(tmp_path) == "http://local.example/debian/"


def test_no_mirror_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    with pytest.raises(EnvironmentProblem) as info:
        images.debian_mirror(tmp_path)
    assert "DEBIAN_MIRROR" in info.value.hint


@pytest.fixture
def repo_copy(tmp_path, monkeypatch):
    monkeypatch.delenv("BASE_IMAGE", raising=False)
    for rel in ("pyproject.toml", "images", "node"):
        src = REPO / rel
        if src.is_dir():
            shutil.copytree(src, tmp_path / rel, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, tmp_path / rel)
    return tmp_path


def test_tags_change_exactly_with_their_inputs(repo_copy, monkeypatch):
    base, node = images.base_tag(repo_copy), images.node_tag(repo_copy)
    assert base.startswith("splitlab-base:") and node.startswith("splitlab-node:")
    (repo_copy / "README.md").write_text("unrelated")
    assert (images.base_tag(repo_copy), images.node_tag(repo_copy)) == (base, node)
    (repo_copy / "node" / "core.py").write_text((repo_copy / "node" / "core.py").read_text() + "\n# changed\n")
    assert images.base_tag(repo_copy) == base and images.node_tag(repo_copy) != node
    node2 = images.node_tag(repo_copy)
    packages = repo_copy / "images" / "base" / "packages.txt"
    packages.write_text(packages.read_text() + "iproute2\n")
    assert images.base_tag(repo_copy) != base and images.node_tag(repo_copy) != node2
    base, jgroups = images.base_tag(repo_copy), images.jgroups_tag(repo_copy)
    jgbase_packages = repo_copy / "images" / "jgbase" / "packages.txt"
    jgbase_packages.write_text(jgbase_packages.read_text() + "procps\n")
    assert images.base_tag(repo_copy) == base and images.jgroups_tag(repo_copy) != jgroups
    jgroups = images.jgroups_tag(repo_copy)
    packages.write_text(packages.read_text() + "procps\n")  # the JGroups base is built on the base
    assert images.jgroups_tag(repo_copy) != jgroups
    monkeypatch.setenv("BASE_IMAGE", "python:3.11-slim")
    assert images.base_tag(repo_copy) == "python:3.11-slim"


def test_two_chains_that_need_the_base_at_once_make_it_one_after_the_other(monkeypatch):
    """`--kind all` builds both kinds' chains at once and both start from the base: the second waits for the
    first's mmdebstrap (which leaves the image for it) instead of making its own beside it."""
    monkeypatch.delenv("BASE_IMAGE", raising=False)
    inside, most = [], []

    def bootstrap(tag, repo, log):
        inside.append(tag)
        most.append(len(inside))
        time.sleep(0.2)
        inside.pop()
        return tag

    monkeypatch.setattr(images, "_bootstrap_base", bootstrap)
    with ThreadPoolExecutor(max_workers=2) as pool:
        tags = list(pool.map(lambda _: images.build_base(lambda line: None), range(2)))
    assert tags == [images.base_tag()] * 2 and most == [1, 1]


def test_node_dependencies_are_the_node_extra_only():
    deps = images.node_dependencies(REPO)
    assert any(d.startswith("h11") for d in deps)
    assert not any(d.startswith(("pyspark", "scapy", "docker")) for d in deps)


def _kinds(monkeypatch, builds: dict) -> None:
    monkeypatch.setattr(kinds, "KINDS", {name: kinds.NodeKind(name, f"X_{name.upper()}_IMAGE",
                                                              lambda tag=f"{name}:t": tag, build)
                                         for name, build in builds.items()})


def test_the_kinds_images_are_built_side_by_side(monkeypatch):
    """`splitlab images --kind all` builds each kind's chain at once: each build here waits for the other to have
    started (built one after the other, the first would wait in vain)."""
    both_started = threading.Barrier(2, timeout=5)

    def build(name):
        def run(log):
            both_started.wait()
            log(f"{name} built")
            return f"{name}:t"
        return run

    _kinds(monkeypatch, {"a": build("a"), "b": build("b")})
    logged = []
    assert kinds.build_kinds(["a", "b"], logged.append) == {"a": "a:t", "b": "b:t"}
    assert sorted(logged) == ["a built", "b built"]


def test_the_bed_images_come_beside_the_kinds_and_the_agent_after_the_node_image(monkeypatch):
    """`--bed`: the test-bed hosts' image is built while the kinds' are (each of the three here waits for the others
    to have started), the shaper agent's once the splitlab node image it is built on exists."""
    all_started = threading.Barrier(3, timeout=5)
    done: list[str] = []

    def build(name):
        def run(log):
            all_started.wait()
            time.sleep(0.05)
            done.append(name)
            return f"{name}:t"
        return run

    _kinds(monkeypatch, {"splitlab": build("splitlab"), "jgroups": build("jgroups")})
    monkeypatch.setattr(images, "build_hostbed", build("hostbed"))
    monkeypatch.setattr(images, "build_agent", lambda log: (done.append("agent"), "agent:t")[1])
    tags = kinds.build_kinds(["jgroups", "splitlab"], lambda line: None, bed=True)
    assert tags == {"jgroups": "jgroups:t", "splitlab": "splitlab:t", "test-bed host": "hostbed:t",
                    "shaper agent": "agent:t"}
    assert sorted(done) == ["agent", "hostbed", "jgroups", "splitlab"] and done.index("agent") > done.index("splitlab")


def test_a_failed_build_is_raised_once_the_other_has_ended(monkeypatch):
    ended = threading.Event()

    def fails(log):
        raise EnvironmentProblem("mmdebstrap failed")

    def slow(log):
        time.sleep(0.2)
        ended.set()
        return "b:t"

    _kinds(monkeypatch, {"a": fails, "b": slow})
    with pytest.raises(EnvironmentProblem, match="mmdebstrap failed"):
        kinds.build_kinds(["a", "b"], lambda line: None)
    assert ended.is_set()


def _node_chain(monkeypatch, exists: bool, base, compile_site) -> list[str]:
    """`images.build_all` with its steps recorded: the node image present or not, the base and the compiled build
    given, the node image's own build a recording stand-in."""
    calls: list[str] = []
    monkeypatch.setattr(images, "image_exists", lambda tag: exists)
    monkeypatch.setattr(images, "build_base", lambda log, repo: (calls.append("base"), base())[1])
    monkeypatch.setattr(images.compiled, "build", lambda log, repo: (calls.append("compile"), compile_site())[1])
    monkeypatch.setattr(images, "build_node", lambda log, repo: (calls.append("node"), "splitlab-node:t")[1])
    return calls


def test_the_compiled_build_runs_while_the_base_is_made(monkeypatch):
    """On a fresh machine mypyc compiles the node while mmdebstrap makes the base: each step here waits for the
    other to have started (one after the other, the first would wait in vain), and the node image comes after
    both."""
    both_started = threading.Barrier(2, timeout=5)
    calls = _node_chain(monkeypatch, False, both_started.wait, both_started.wait)
    assert images.build_all(lambda line: None) == "splitlab-node:t"
    assert sorted(calls[:2]) == ["base", "compile"] and calls[2:] == ["node"]


def test_a_present_node_image_builds_neither_its_base_nor_the_compiled_build(monkeypatch):
    calls = _node_chain(monkeypatch, True, lambda: None, lambda: None)
    assert images.build_all(lambda line: None) == "splitlab-node:t"
    assert calls == ["node"]


def test_a_failed_base_is_raised_once_the_compiled_build_has_ended(monkeypatch):
    ended = threading.Event()

    def fails():
        raise EnvironmentProblem("mmdebstrap failed")

    def slow():
        time.sleep(0.2)
        ended.set()

    calls = _node_chain(monkeypatch, False, fails, slow)
    with pytest.raises(EnvironmentProblem, match="mmdebstrap failed"):
        images.build_all(lambda line: None)
    assert ended.is_set() and "node" not in calls
