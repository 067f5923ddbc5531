"""The neighbour tables sized for a run: raised to what N nodes need, never lowered, a clear error when unwritable."""
import subprocess
from pathlib import Path

import pytest

from chaos.cluster import neighbours
from node.errors import EnvironmentProblem


def fake_proc(root: Path, family: str, limits: tuple[int, int, int]) -> Path:
    base = root / neighbours.FAMILIES[family]
    base.mkdir(parents=True)
    for i, value in enumerate(limits, 1):
        (base / f"gc_thresh{i}").write_text(f"{value}\n")
    return base


def test_fifty_nodes_need_more_than_the_kernel_default_and_it_is_raised_in_a_valid_order(tmp_path):
    fake_proc(tmp_path, "ipv4", (128, 512, 1024))
    logged = []
    want = neighbours.needed(50)
    assert want.gc_thresh3 > 50 * 50 > 1024 and want.gc_thresh1 < want.gc_thresh2 < want.gc_thresh3
    neighbours.ensure(50, logged.append, root=tmp_path)
    assert neighbours.read(tmp_path, "ipv4") == want
    assert [line.split()[3] for line in logged] == ["gc_thresh3", "gc_thresh2", "gc_thresh1"]
    assert "from 1024 to" in logged[0]


def test_limits_above_the_need_are_kept(tmp_path):
    fake_proc(tmp_path, "ipv4", (4096, 80000, 100000))
    fake_proc(tmp_path, "ipv6", (1, 2, 3))
    logged = []
    neighbours.ensure(50, logged.append, families=("ipv4", "ipv6"), root=tmp_path)
    assert neighbours.read(tmp_path, "ipv4") == neighbours.Limits(4096, 80000, 100000)
    assert neighbours.read(tmp_path, "ipv6") == neighbours.needed(50)
    assert all(line.startswith("ipv6") for line in logged) and len(logged) == 3


def test_a_limit_that_cannot_be_written_is_an_environment_problem_with_the_command(tmp_path, monkeypatch):
    fake_proc(tmp_path, "ipv4", (128, 512, 1024))

    def refuse(self, text):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refuse)
    with pytest.raises(EnvironmentProblem) as err:
        neighbours.ensure(50, lambda _: None, root=tmp_path)
    assert "sysctl -w net.ipv4.neigh.default.gc_thresh3=" in str(err.value.hint)
    assert "1024 entries" in str(err.value)


def test_a_missing_family_is_an_environment_problem(tmp_path):
    with pytest.raises(EnvironmentProblem, match="ipv6 neighbour table"):
        neighbours.ensure(3, lambda _: None, families=("ipv6",), root=tmp_path)


def test_room_for_is_the_inverse_of_needed():
    for nodes in (1, 20, 50, 100):
        assert neighbours.room_for(neighbours.needed(nodes).gc_thresh3) == nodes
    assert neighbours.room_for(neighbours.needed(100).gc_thresh3 - 1) == 99


def test_the_hosts_script_raises_what_it_can_write_and_leaves_the_rest(tmp_path):
    base = fake_proc(tmp_path, "ipv4", (128, 512, 1024))
    script = "\n".join(neighbours.raise_script(50, root=str(tmp_path)))
    assert subprocess.run(["sh", "-eu", "-c", script], timeout=10).returncode == 0
    assert neighbours.read(tmp_path, "ipv4") == neighbours.needed(50)
    (base / "gc_thresh3").write_text("100000\n")
    assert subprocess.run(["sh", "-eu", "-c", script], timeout=10).returncode == 0
    assert neighbours.read(tmp_path, "ipv4").gc_thresh3 == 100000, "never lowered"
    missing = "\n".join(neighbours.raise_script(50, root=str(tmp_path / "nothing")))
    assert subprocess.run(["sh", "-eu", "-c", missing], timeout=10).returncode == 0  # a host without the files
