"""The one `splitlab` tree (chaos.cli.main): every verb's --help, one-line errors with exit 2, `--json` that
leaves only JSON on stdout, `splitlab heal` that says "nothing to heal", msg-fault taking every action the
message rules know, and every command the README shows still parsing. No Docker: the cluster is faked."""
from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.cli import faults
from chaos.cli.main import ROOMS, VERB_ROOMS, build_parser, main as splitlab, parse
from chaos.faults import msgrules
from chaos.faults.grudge import Jam
from chaos.host.ledger import Entry, Ledger

REPO = Path(__file__).resolve().parents[2]


def _verbs(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) of every verb of the tree, those with sub-verbs included."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if path:
        yield path, parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from _verbs(child, path + (name,))


VERBS = dict(_verbs(build_parser()))
LEAVES = [path for path, p in VERBS.items() if not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)]


@pytest.mark.parametrize("path", list(VERBS), ids=" ".join)
def test_every_verb_has_its_real_help_with_examples(path, capsys):
    assert splitlab([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: splitlab {' '.join(path)} ")
    if path in LEAVES:
        assert "\nexamples:\n  splitlab " in out, out


def test_the_tree_holds_every_verb_and_no_second_heal(capsys):
    assert splitlab(["--help"]) == 0
    top = {path[0] for path in VERBS}
    assert top == {"images", "up", "down", "ps", "doctor", "compose-template", "chaos", "heal", "run", "replay",
                   "sim", "torture", "shrink", "demo", "analyze", "fuzz", "spark", "spark-cluster", "bed", "metrics",
                   "top", "node", "wireshark"}
    assert [p for p in VERBS if "heal" in p] == [("heal",)]  # `splitlab chaos heal` is `unpartition` now
    assert ("chaos", "unpartition") in VERBS


def test_each_verb_is_found_in_the_room_that_adds_it_and_a_command_imports_only_that_room():
    added = {verb: name for name in ROOMS for verb in _verbs_of(build_parser([name]))}
    assert VERB_ROOMS == added
    probe = ("import sys; from chaos.cli.main import parse; parse(['analyze', 'runs/x']); "
             "print(sorted(m for m in sys.modules if m.startswith('chaos.cli.') and m != 'chaos.cli.main'), "
             "'docker' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.split() == ["['chaos.cli.analysis',", "'chaos.cli.verbs']", "False"], out


def _verbs_of(parser: argparse.ArgumentParser) -> list[str]:
    return [verb for path in dict(_verbs(parser)) if len(path) == 1 for verb in path]


@pytest.mark.parametrize("argv, prog, fragment", [
    ([], "splitlab", "the following arguments are required: VERB"),
    (["frobnicate"], "splitlab", "invalid choice: 'frobnicate'"),
    (["up", "-n", "x"], "splitlab up", "argument -n/--nodes: invalid int value: 'x'"),
    (["up", "--bogus"], "splitlab up", "unrecognized arguments: --bogus"),
    (["chaos"], "splitlab chaos", "the following arguments are required: VERB"),
    (["chaos", "heal"], "splitlab chaos", "invalid choice: 'heal'"),
    (["chaos", "msg-fault", "--type", "UnicastData", "--from", "n1", "--to", "n2"], "splitlab chaos msg-fault",
     "the following arguments are required: --action"),
    (["torture", "--seed", "1"], "splitlab torture", "the following arguments are required: --duration-s"),
    (["sim", "scenarios/jgrp1873.yaml"], "splitlab sim", "the following arguments are required: --seed"),
])
def test_bad_arguments_exit_2_with_one_line_naming_the_verb(argv, prog, fragment, capsys):
    assert splitlab(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1, captured.err
    assert captured.err.startswith(f"{prog}: error: ") and fragment in captured.err, captured.err


@pytest.mark.parametrize("argv, fragment", [
    (["torture", "--seed", "1", "--duration-s", "10", "--sim", "--inventory", "hosts.yaml"], "--sim in the simulator"),
    (["replay", "runs/x", "--sim", "--inventory", "hosts.yaml"], "choose one"),
    (["run", "scenarios/jgrp1873.yaml", "--placement", "n1@a"], "--placement needs --inventory"),
    (["torture", "--seed", "1", "--duration-s", "10", "--inventory", "/no/such/hosts.yaml"], "/no/such/hosts.yaml"),
])
def test_where_a_scenario_runs_is_checked_before_anything_starts(argv, fragment, capsys):
    assert splitlab(argv) == 2
    assert fragment in capsys.readouterr().err


def test_older_flag_spellings_still_parse():
    assert parse(["torture", "--seed", "7", "--duration", "60"]).duration_s == 60.0
    assert parse(["up", "--timeout", "5"]).timeout_s == 5.0
    assert parse(["up", "--nodes", "5"]).nodes == parse(["up", "-n", "5"]).nodes == 5


def _readme_commands() -> list[list[str]]:
    """Every `splitlab ...` line in the README's code blocks, split into argv (comments dropped, `a / b / c`
    lines as one command each)."""
    text = (REPO / "README.md").read_text()
    commands = []
    for block in re.findall(r"```\n(.*?)```", text, re.S):
        for line in block.splitlines():
            if not re.match(r"splitlab [a-z]", line):  # not the architecture diagram's "splitlab (chaos/)"
                continue
            argv = shlex.split(line, comments=True)[1:]
            if "/" in argv:  # splitlab chaos pause n2 / resume n2 / ...
                head = argv[:1]
                parts = " ".join(argv[1:]).split(" / ")
                commands += [head + part.split() for part in parts]
            else:
                commands.append(argv)
    return commands


README_COMMANDS = _readme_commands()


def test_the_readme_shows_commands():
    assert len(README_COMMANDS) > 20


@pytest.mark.parametrize("argv", README_COMMANDS, ids=" ".join)
def test_every_command_the_readme_shows_parses(argv):
    args = parse(argv)
    assert callable(args.func)


def test_heal_on_a_run_with_nothing_applied_exits_0_and_says_so(tmp_path, capsys):
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    for _ in range(2):  # idempotent
        assert splitlab(["heal", "--run-dir", str(run_dir), "--no-verify"]) == 0
        assert capsys.readouterr().out == "run run-1: nothing to heal\n"


def test_heal_settles_the_ledger_once_then_has_nothing_to_heal(tmp_path, capsys):
    run_dir = tmp_path / "run-2"
    Ledger(run_dir).record(Entry(group="test", key="k", what="a harmless undo", undo=[["true"]]))
    assert splitlab(["heal", "--run-dir", str(run_dir), "--no-verify"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "run run-2: healed\n" and "1 entry settled (1 undone" in captured.err
    assert Ledger(run_dir).outstanding() == []
    assert splitlab(["heal", "--run-dir", str(run_dir), "--no-verify"]) == 0
    assert capsys.readouterr().out == "run run-2: nothing to heal\n"


def test_heal_of_a_missing_run_directory_is_bad_input(tmp_path, capsys):
    assert splitlab(["heal", "--run-dir", str(tmp_path / "nope"), "--no-verify"]) == 2
    assert "no run directory" in capsys.readouterr().err


def _fake_up(monkeypatch, tmp_path):
    from chaos.cluster import lifecycle

    def up(count, *, log, wait_timeout_s, run_id, inventory=None, placement=None, ipv6=False, kind="splitlab",
           auth=False, node_env=None):
        log(f"run {run_id}: starting {count} node(s)")
        log(f"run {run_id}: all {count} node(s) hear each other")
        nodes = [lifecycle.NodeInfo(f"n{i}", f"c{i}", f"10.0.0.{i}", f"10.1.0.{i}", 100 + i)
                 for i in range(1, count + 1)]
        return lifecycle.Cluster(run_id, tmp_path / run_id, "token", nodes)

    monkeypatch.setattr(lifecycle, "up", up)
    return ["up", "-n", "2", "--run-id", "json-1", "--json"]


def _fake_fuzz(monkeypatch, tmp_path):
    from chaos.fuzz import campaign

    def run(options, log):
        log("fuzz: seed 3, 10 datagrams at n2")
        return {"ok": True, "run_id": "json-2", "targets": ["n2"], "sent": options.count}

    monkeypatch.setattr(campaign, "run", run)
    return ["fuzz", "--run-id", "json-2", "--seed", "3", "--count", "10", "--json"]


JSON_VERBS = {("up",): _fake_up, ("fuzz",): _fake_fuzz}


def test_every_verb_with_json_is_checked_here():
    with_json = {path for path in LEAVES if any("--json" in a.option_strings for a in VERBS[path]._actions)}
    assert with_json == set(JSON_VERBS), "a verb got --json: add a fake for it to JSON_VERBS"


@pytest.mark.parametrize("path", list(JSON_VERBS), ids=" ".join)
def test_json_puts_only_json_on_stdout_and_progress_on_stderr(path, monkeypatch, tmp_path, capsys):
    argv = JSON_VERBS[path](monkeypatch, tmp_path)
    assert splitlab(argv) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # nothing but JSON
    assert data["run_id"] in ("json-1", "json-2")
    assert captured.err.strip(), "the progress lines go to stderr"


def test_up_json_holds_the_cluster(monkeypatch, tmp_path, capsys):
    assert splitlab(_fake_up(monkeypatch, tmp_path)) == 0
    data = json.loads(capsys.readouterr().out)
    assert [n["name"] for n in data["nodes"]] == ["n1", "n2"] and data["nodes"][0]["control_url"].startswith("http")


EXAMPLE_ACTIONS = {"drop": "drop", "delay": "delay:200", "duplicate": "duplicate", "hold": "hold:2000",
                   "drop-first": "drop-first:3", "drop-nth": "drop-nth:2", "drop-every": "drop-every:4",
                   "drop-range": "drop-range:3-7"}


class _FakeNet:
    """Records what a chaos verb asks of the run's Net."""

    run_id = "fake-1"
    nodes = ["n1", "n2", "n3"]

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.cluster = self

    def node(self, name: str) -> None:
        pass

    def __getattr__(self, method: str):
        return lambda *args, **kwargs: self.calls.append((method, *args, *sorted(kwargs.items())))

    @property
    def rules(self) -> list[msgrules.MsgRule]:
        return [call[1] for call in self.calls if call[0] == "msg_fault"]


@pytest.fixture
def fake_net(monkeypatch) -> _FakeNet:
    net = _FakeNet()
    monkeypatch.setattr(faults, "_net", lambda args: net)
    return net


@pytest.mark.parametrize("argv, calls, left_in_place", [
    (["partition", "n2<-n1"], [("partition", "n2<-n1", None)], True),
    (["partition", "n2<-n1", "--jam"], [("partition", "n2<-n1", Jam())], True),
    (["partition", "n1<->n2", "--jam", "--release", "shuffle", "--cap", "9"],
     [("partition", "n1<->n2", Jam("shuffle", 9))], True),
    (["unpartition"], [("heal",)], False),  # the partition only: Net.heal, not heal_all
    (["fast"], [("fast",)], False),
    (["shape", "n1->n2:delay_ms=20"], [("shape", "n1->n2:delay_ms=20")], True),
    (["flaky", "--loss-pct", "10", "--links", "n1->n2"], [("flaky", 10.0, ("links", [("n1", "n2")]))], True),
    (["pause", "n2", "--sigstop"], [("pause", "n2", ("method", "sigstop"))], True),
    (["pause", "n2"], [("pause", "n2", ("method", "docker"))], True),
    (["resume", "n2"], [("resume", "n2")], False),
    (["kill", "n2"], [("kill", "n2")], True),
    (["start", "n2"], [("start", "n2")], False),
    (["restart", "n2"], [("restart", "n2")], False),
    (["partition", "n2<-n1", "--duration-s", "0.01"], [("partition", "n2<-n1", None), ("heal_all",)], False),
])
def test_each_chaos_verb_asks_the_net_for_its_fault(argv, calls, left_in_place, fake_net, capsys):
    assert splitlab(["chaos", *argv]) == 0
    assert fake_net.calls == calls
    assert ("fault left in place" in capsys.readouterr().out) == left_in_place


@pytest.mark.parametrize("action", msgrules.ACTIONS)
def test_msg_fault_takes_every_action_the_message_rules_know(action, fake_net, capsys):
    text = EXAMPLE_ACTIONS[action]
    assert splitlab(["chaos", "msg-fault", "--type", "UnicastData", "--from", "n1", "--to", "n2",
                     "--action", text]) == 0, capsys.readouterr().err
    (rule,) = fake_net.rules
    assert rule.action == action and rule.src == "n1" and rule.dst == "n2"
    assert text in rule.describe()
    assert action in VERBS[("chaos", "msg-fault")].format_help()


def test_msg_fault_drop_range_carries_both_seqnos(fake_net):
    assert splitlab(["chaos", "msg-fault", "--type", "UnicastData", "--from", "n1", "--to", "n2",
                     "--action", "drop-range:3-7"]) == 0
    assert (fake_net.rules[0].seqno_lo, fake_net.rules[0].seqno_hi) == (3, 7)


def test_msg_fault_refuses_a_bad_action_before_looking_for_the_cluster(monkeypatch, capsys):
    monkeypatch.setattr(faults, "_net", lambda args: pytest.fail("the cluster was looked up"))
    assert splitlab(["chaos", "msg-fault", "--type", "UnicastData", "--from", "n1", "--to", "n2",
                     "--action", "drop-range:7-3"]) == 2
    assert "drop-range needs seqnos 0 <= A <= B" in capsys.readouterr().err


@pytest.mark.parametrize("argv, fragment", [(["--cap", "5"], "belong to a jammed partition: add --jam"),
                                             (["--jam", "--cap", "0"], "cap must be a whole number"),
                                             (["--release", "fifo"], "add --jam")])
def test_partition_refuses_bad_jam_options_before_looking_for_the_cluster(argv, fragment, monkeypatch, capsys):
    monkeypatch.setattr(faults, "_net", lambda args: pytest.fail("the cluster was looked up"))
    assert splitlab(["chaos", "partition", "n2<-n1", *argv]) == 2
    assert fragment in capsys.readouterr().err


def test_python_m_pipeline_is_the_analyze_verb():
    proc = subprocess.run([sys.executable, "-m", "pipeline", "--help"], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: splitlab analyze ")


def test_inject_sends_the_forged_message_through_the_net(fake_net):
    assert splitlab(["chaos", "inject", "--from", "n2", "--to", "n1", "--type", "UnicastAck", "--field", "seqno=5",
                     "--count", "3"]) == 0
    ((method, src, dst, bodies, count, sign),) = fake_net.calls
    assert (method, src, dst, count, sign) == ("inject", "n2", "n1", ("count", 3), ("sign", False))
    assert bodies[0].seqno == 5
    assert splitlab(["chaos", "inject", "--from", "n2", "--to", "n1", "--type", "UnicastAck", "--sign"]) == 0
    assert fake_net.calls[-1][-1] == ("sign", True)


@pytest.mark.parametrize("extra, fragment", [
    (["--field", "seqno=five"], "--field 'seqno=five' must be name=integer"),
    (["--field", "nosuchfield=1"], "has no field(s) nosuchfield"),
])
def test_inject_refuses_bad_fields_before_looking_for_the_cluster(extra, fragment, monkeypatch, capsys):
    monkeypatch.setattr(faults, "_net", lambda args: pytest.fail("the cluster was looked up"))
    assert splitlab(["chaos", "inject", "--from", "n2", "--to", "n1", "--type", "UnicastAck", *extra]) == 2
    assert fragment in capsys.readouterr().err
