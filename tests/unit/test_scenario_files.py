"""Scenario files that are not scenarios: binary, empty, a directory, huge, endless, characters YAML refuses,
nesting too deep, aliases that expand exponentially ("billion laughs") or into themselves. Each is refused
quickly as a `UsageError` (exit code 2) naming the file, never a traceback or a hang. "Quickly" is asserted as
work, not time (the machine is shared): bytes read, tokens scanned, values walked."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos.cli.main import main
from chaos.harness import yamlsrc
from chaos.harness.load import MAX_SCENARIO_BYTES, load_scenario, load_text
from node.errors import UsageError

GOOD = "name: t\ncluster:\n  nodes: 3\nsteps:\n  - at_s: 0\n    heal:\n"


def refused(path, match: str) -> UsageError:
    with pytest.raises(UsageError, match=match) as info:
        load_scenario(path)
    assert info.value.exit_code == 2
    return info.value


def bytes_read() -> int:
    """What this process has read so far, by any means (Linux' /proc/self/io)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"])


def budget(monkeypatch, owner: type, name: str, limit: int) -> dict[str, int]:
    """Count the calls of `owner.name`; the call past `limit` fails the test at once (work that would otherwise go
    on for minutes fails it in a moment)."""
    calls = {"n": 0}
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls["n"] += 1
        assert calls["n"] <= limit, f"{owner.__name__}.{name} called more than {limit:,} times"
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_binary_file_is_not_a_utf8_text_file_and_splitlab_run_says_so(tmp_path, capsys):
    binary = tmp_path / "some.bin"
    binary.write_bytes(b"name: t\n\x8e\xff\x00\x01" + os.urandom(64))
    refused(binary, r"some\.bin:2: not a UTF-8 text file \(byte 0x8e at offset 8\)")
    assert main(["run", str(binary)]) == 2
    err = capsys.readouterr().err
    assert "some.bin:2: not a UTF-8 text file" in err and "Traceback" not in err


def test_an_empty_file_says_the_document_is_empty(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing but a comment\n")
    refused(empty, r"empty\.yaml:1: \(document\): the document is empty; expected a mapping with cluster")


def test_a_directory_cannot_be_read(tmp_path):
    refused(tmp_path, f"cannot read scenario {tmp_path}: Is a directory")


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path):
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as fh:
        for _ in range(50):
            fh.write(b"a" * (1 << 20))  # 50 MB of 'a'
    before = bytes_read()
    refused(huge, r"huge\.yaml: larger than 128 KiB")
    assert bytes_read() - before < 2 * MAX_SCENARIO_BYTES  # of 50 MB
    just_over = tmp_path / "over.yaml"
    just_over.write_text(GOOD + "#" * (MAX_SCENARIO_BYTES - len(GOOD)) + "\n")
    refused(just_over, "larger than")
    at_limit = tmp_path / "at.yaml"
    at_limit.write_text(GOOD + "#" * (MAX_SCENARIO_BYTES - len(GOOD) - 1) + "\n")
    assert load_scenario(at_limit).scenario.cluster.nodes == 3


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_an_endless_stream_is_refused():
    before = bytes_read()
    refused("/dev/zero", "larger than")
    assert bytes_read() - before < 2 * MAX_SCENARIO_BYTES


def test_a_character_yaml_refuses_names_its_line(tmp_path):
    nul = tmp_path / "nul.yaml"
    nul.write_text("name: t\ncluster:\n  nodes: \x003\n")
    refused(nul, r"nul\.yaml:3: not YAML text: character #x0000 is not allowed")


BILLION_LAUGHS = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_a_billion_laughs_is_refused_quickly(monkeypatch):
    walked = budget(monkeypatch, yamlsrc._Walk, "enter", 2 * yamlsrc.MAX_VALUES)
    with pytest.raises(UsageError, match=r"^b\.yaml: the document holds more than 100,000 values once its YAML "
                                         r"aliases are expanded"):
        load_text(BILLION_LAUGHS, "b.yaml")
    assert walked["n"] == yamlsrc.MAX_VALUES + 1  # 9^9 values once expanded: the walk stops at the limit


def test_aliases_that_repeat_a_little_still_load():
    text = GOOD.replace("  nodes: 3\n", "  nodes: 3\n  defaults: &d {unicast: unicast3}\n"
                                        "  overrides: {n2: *d, n3: *d}\n")
    assert yamlsrc.MAX_VALUES > 10
    assert load_text(text, "s.yaml").node_env()["n3"]["SPLITLAB_UNICAST"] == "unicast3"


def test_an_alias_inside_itself_is_refused():
    with pytest.raises(UsageError, match=r"^r\.yaml:2: a YAML alias refers to a mapping or list that contains it"):
        load_text("name: t\nsteps: &s\n  - *s\n", "r.yaml")


def test_nesting_too_deep_is_refused_quickly(monkeypatch):
    # the scanner fetches tokens as the composer asks for them: refused at depth 64 after about 1,100 fetches, not
    # after reading the 120,000 brackets
    budget(monkeypatch, yamlsrc._Loader, "fetch_more_tokens", 40 * yamlsrc.MAX_DEPTH)
    with pytest.raises(UsageError, match=r"^d\.yaml:2: mappings and lists nested more than 64 deep"):
        load_text("name: t\na: " + "[" * 60_000 + "]" * 60_000 + "\n", "d.yaml")
    deepest = yamlsrc.MAX_DEPTH - 1  # lists inside the document's mapping
    assert isinstance(yamlsrc.load_yaml("a: " + "[" * deepest + "]" * deepest + "\n", "d.yaml").data["a"], list)
    with pytest.raises(UsageError, match="nested more than"):
        yamlsrc.load_yaml("a: " + "[" * (deepest + 1) + "]" * (deepest + 1) + "\n", "d.yaml")
