"""Scenario validation: every broken file is refused with `file:line: field: what was expected`, as a
`UsageError` (exit code 2); good files load with their variants, overrides and expectations."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chaos.harness.errors import ScenarioError
from chaos.harness.load import load_scenario, load_text
from node.errors import UsageError

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
name: t
cluster:
  nodes: 3
variants:
  legacy: {unicast: unicast2}
  fixed: {unicast: unicast3}
steps:
  - at_s: 0
    workload: {kind: unicast, from: n1, to: n2, count: 10}
  - at_s: 1
    partition: "n2<-n1"
  - at_s: 2
    heal:
"""


def broken(replace: str, by: str, base: str = GOOD) -> str:
    assert replace in base, replace
    return base.replace(replace, by, 1)


def problems(text: str, variant: str | None = None) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        load_text(text, "s.yaml", variant=variant)
    assert info.value.exit_code == 2
    return [str(p) for p in info.value.problems]


def test_a_good_file_loads_with_its_first_variant_by_default() -> None:
    loaded = load_text(GOOD, "s.yaml")
    assert loaded.variant == "legacy"
    assert [s.action for s in loaded.scenario.steps] == ["workload", "partition", "heal"]
    assert loaded.node_env()["n3"]["SPLITLAB_UNICAST"] == "unicast2"
    assert load_text(GOOD, "s.yaml", variant="fixed").node_env()["n1"]["SPLITLAB_UNICAST"] == "unicast3"


def test_unknown_action_names_file_line_field_and_the_actions() -> None:
    (line,) = problems(broken("    heal:\n", "    explode: now\n"))
    assert line.startswith("s.yaml:13: steps[2].explode: unknown action 'explode'; expected one of workload, "
                           "partition, heal,"), line
    assert "msg-fault" in line and "admin" in line


def test_bad_time_that_is_not_a_number() -> None:
    (line,) = problems(broken("at_s: 1", "at_s: soon"))
    assert line == "s.yaml:10: steps[1].at_s: expected a number, got 'soon'"


def test_bad_time_that_is_negative_or_out_of_order() -> None:
    (line,) = problems(broken("at_s: 1", "at_s: -1"))
    assert line == "s.yaml:10: steps[1].at_s: expected a value >= 0, got -1"
    (line,) = problems(broken("at_s: 2", "at_s: 0.5"))
    assert line == ("s.yaml:12: steps[2].at_s: expected a time >= 1 s (the previous step's), got 0.5: steps are "
                    "listed in time order")


def test_unknown_node_in_a_workload_and_in_a_grudge() -> None:
    (line,) = problems(broken("to: n2", "to: n9"))
    assert line == "s.yaml:9: steps[0].workload.to: unknown node 'n9'; expected one of n1, n2, n3"
    (line,) = problems(broken('"n2<-n1"', '"n2<-n7"'))
    assert line == "s.yaml:11: steps[1].partition: grudge names unknown node(s) n7; nodes: n1, n2, n3"


def test_wrong_type_of_a_field() -> None:
    (line,) = problems(broken("count: 10", "count: ten"))
    assert line == "s.yaml:9: steps[0].workload.count: expected an integer, got 'ten'"
    (line,) = problems(broken("nodes: 3", "nodes: [n1, n2]"))
    assert line == "s.yaml:3: cluster.nodes: expected an integer, got ['n1', 'n2']"
    (line,) = problems(broken('"n2<-n1"', "5"))
    assert line == "s.yaml:11: steps[1].partition: expected text or a mapping, got 5"


def test_wrong_value_of_a_closed_vocabulary() -> None:
    (line,) = problems(broken("unicast: unicast2", "unicast: unicast4"))
    assert line == ("s.yaml:5: variants.legacy.unicast: expected one of 'noretx', 'unicast1', 'unicast2' or "
                    "'unicast3', got 'unicast4'")  # the registered unicast layers (node/layers.py)


def test_unknown_field_lists_the_known_ones() -> None:
    (line,) = problems(broken("count: 10", "count: 10, colour: red"))
    assert line == ("s.yaml:9: steps[0].workload.colour: unknown field 'colour'; expected one of kind, from, to, "
                    "count, size, rate")


def test_missing_fields() -> None:
    assert problems(broken("  nodes: 3\n", "  defaults: {}\n")) == ["s.yaml:2: cluster.nodes: required field missing"]
    (line,) = problems(broken("  - at_s: 1\n", "  - note: no time\n"))
    assert line.startswith("s.yaml:10: steps[1].at_s: required field missing")


def test_one_action_per_step_and_at_least_one() -> None:
    (line,) = problems(broken("    heal:\n", "    heal:\n    fast:\n"))
    assert line.startswith("s.yaml:14: steps[2].fast: one action per step, got heal, fast")
    (line,) = problems(broken("    heal:\n", "    note: nothing\n"))
    assert line.startswith("s.yaml:12: steps[2]: a step needs one action")


def test_several_problems_are_all_reported_in_line_order() -> None:
    lines = problems(broken("count: 10", "count: ten", broken("    heal:\n", "    explode: 1\n")))
    assert [line.split(":")[1] for line in lines] == ["9", "13"]


def test_protocol_aware_fault_checks_type_and_action() -> None:
    text = broken("    heal:\n", "    msg-fault: {type: UnicastStabl, from: n2, to: n1, action: hold}\n")
    lines = problems(text)
    assert lines[0].startswith("s.yaml:13: steps[2].msg-fault.type: unknown message type 'UnicastStabl'; known:")
    assert lines[1] == "s.yaml:13: steps[2].msg-fault.action: action hold needs a time in ms, e.g. hold:200"


def test_expectations_name_known_variants_checks_and_parameters() -> None:
    text = GOOD + textwrap.dedent("""\
        expect:
          legacy: {endless_retransmission: {status: fail, min_requests: x}, bogus: ok}
          other: {delivery: ok}
        """)
    lines = problems(text)
    assert lines[0] == ("s.yaml:15: expect.legacy.endless_retransmission: check parameter "
                        "endless_retransmission.min_requests must be an integer, not 'x'")
    assert lines[1].startswith("s.yaml:15: expect.legacy.bogus: unknown check 'bogus'; expected one of history,")
    assert lines[2] == "s.yaml:16: expect.other: unknown variant 'other'; expected one of default, legacy, fixed"


def test_an_expected_rate_goes_under_rate_and_reads_as_an_operator_and_a_share() -> None:
    good = GOOD + 'expect:\n  default: {rate: "== 1"}\n  legacy: {delivery: fail, rate: ">= 0.95"}\n'
    assert load_text(good, "s.yaml", variant="legacy").expected_rate() == ">= 0.95"
    assert load_text(good, "s.yaml", variant="fixed").expected_rate() == "== 1"  # default's
    assert "rate" not in load_text(good, "s.yaml", variant="legacy").expectations()
    lines = problems(GOOD + 'expect:\n  legacy: {delivery: ">= 0.9", rate: ok}\n')
    assert lines == ["s.yaml:15: expect.legacy.delivery: '>= 0.9' is a rate: it goes under 'rate' (the share of "
                     "repeated runs that hold), a check takes ok, fail or unknown",
                     "s.yaml:15: expect.legacy.rate: expected a rate such as '>= 0.95' (the share of repeated runs "
                     "that hold), got 'ok'"]
    (line,) = problems(GOOD + 'expect:\n  legacy: {rate: ">= 1.5"}\n')
    assert line.startswith("s.yaml:15: expect.legacy.rate")


def test_unknown_variant_asked_for() -> None:
    (line,) = problems(GOOD, variant="newest")
    assert line == "s.yaml:4: variants: unknown variant 'newest'; expected one of legacy, fixed"


def test_admin_sync_needs_unicast3_in_the_chosen_variant() -> None:
    text = broken("    heal:\n", "    admin: {op: sync, node: n2, peer: n1}\n")
    (line,) = problems(text, variant="legacy")
    assert line == ("s.yaml:13: steps[2].admin.op: admin sync needs a unicast layer with the sync request "
                    "(unicast3); n2 runs unicast2 in variant legacy")
    load_text(text, "s.yaml", variant="fixed")
    load_text(broken("fixed: {unicast: unicast3}", "fixed: {unicast: noretx}", text), "s.yaml", variant="fixed")


def test_a_node_setting_the_node_would_refuse() -> None:
    text = broken("  nodes: 3\n", "  nodes: 3\n  defaults: {timeouts: {heartbeat_ms: 300, silence_ms: 200}}\n")
    (line,) = problems(text)
    assert line.startswith("s.yaml:2: cluster: node n1 under variant legacy would refuse its configuration: "
                           "SPLITLAB_SILENCE_MS=200 must exceed SPLITLAB_HEARTBEAT_MS=300")


def test_yaml_syntax_error_and_duplicate_key_name_the_line() -> None:
    with pytest.raises(UsageError, match=r"^s\.yaml:3: YAML syntax error"):
        load_text("cluster:\n  nodes: 3\n  - x\n", "s.yaml")
    with pytest.raises(UsageError, match=r"^s\.yaml:4: duplicate key 'nodes' \(first at line 2\)"):
        load_text("cluster:\n  nodes: 3\n  defaults: {}\n  nodes: 4\n", "s.yaml")


def test_a_document_that_is_not_a_mapping() -> None:
    assert problems("- just\n- a list\n") == ["s.yaml:1: (document): expected a mapping with cluster, steps, ...; "
                                              "got ['just', 'a list']"]


def test_missing_file_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="cannot read scenario /nonexistent.yaml"):
        load_scenario("/nonexistent.yaml")


def test_set_overrides_a_field_and_errors_name_the_override() -> None:
    loaded = load_text(GOOD, "s.yaml", sets=["steps.1.at_s=1.5", "cluster.defaults.timeouts.conn_close_timeout_ms=500"])
    assert loaded.scenario.steps[1].at_s == 1.5
    assert loaded.node_env()["n1"]["SPLITLAB_UNICAST_CONN_CLOSE_TIMEOUT_MS"] == "500"
    with pytest.raises(ScenarioError) as info:
        load_text(GOOD, "s.yaml", sets=["steps.0.workload.count=many"])
    assert str(info.value.problems[0]) == ("--set steps.0.workload.count: steps[0].workload.count: expected an "
                                           "integer, got 'many'")
    with pytest.raises(UsageError, match="expected an index 0..2"):
        load_text(GOOD, "s.yaml", sets=["steps.7.at_s=1"])
    with pytest.raises(UsageError, match="expected key.path=value"):
        load_text(GOOD, "s.yaml", sets=["settle_s"])


def test_layers_of_node_settings_later_wins() -> None:
    text = textwrap.dedent("""\
        cluster:
          nodes: 3
          defaults: {unicast: unicast3, timeouts: {conn_close_timeout_ms: 1000}, nakack4_settings: {capacity: 64}}
          overrides: {n3: {timeouts: {conn_close_timeout_ms: 20000}, bcast_sync: legacy}}
        variants:
          short: {timeouts: {heartbeat_ms: 100, silence_ms: 800}, overrides: {n2: {unicast: unicast2}}}
        """)
    env = load_text(text, "s.yaml").node_env()
    assert env["n1"]["SPLITLAB_UNICAST_CONN_CLOSE_TIMEOUT_MS"] == "1000"
    assert env["n3"]["SPLITLAB_UNICAST_CONN_CLOSE_TIMEOUT_MS"] == "20000"
    assert env["n3"]["SPLITLAB_BCAST_SYNC"] == "legacy" and "SPLITLAB_BCAST_SYNC" not in env["n1"]
    assert env["n2"]["SPLITLAB_UNICAST"] == "unicast2" and env["n1"]["SPLITLAB_UNICAST"] == "unicast3"
    assert env["n1"]["SPLITLAB_NAKACK4_CAPACITY"] == "64" and env["n2"]["SPLITLAB_HEARTBEAT_MS"] == "100"


def test_expectations_merge_default_under_the_variant() -> None:
    text = GOOD + "expect:\n  default: {delivery: ok, views: {status: ok, max_converge_s: 5}}\n  legacy: {delivery: fail}\n"
    loaded = load_text(text, "s.yaml", variant="legacy")
    assert loaded.expectations() == {"delivery": {"status": "fail"}, "views": {"status": "ok", "max_converge_s": 5}}
    assert load_text(text, "s.yaml", variant="fixed").expectations()["delivery"] == {"status": "ok"}


@pytest.mark.parametrize("path", sorted((REPO / "scenarios").rglob("*.yaml")), ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_scenario_loads_under_each_variant(path: Path) -> None:
    first = load_scenario(path)
    for variant in first.scenario.variants or [None]:
        loaded = load_scenario(path, variant=variant)
        assert loaded.scenario.steps, f"{path.name} has no steps"


def test_slow_with_a_distribution_and_a_restart_step() -> None:
    text = broken("    heal:\n", "    heal:\n  - at_s: 3\n    slow: {delay_ms: 20, jitter_ms: 5, distribution: normal, "
                  "delay_corr_pct: 25}\n  - at_s: 4\n    restart: n3\n")
    loaded = load_text(text, "s.yaml")
    assert [s.action for s in loaded.scenario.steps][-2:] == ["slow", "restart"]
    (line,) = problems(text.replace("distribution: normal", "distribution: gauss"))
    assert line.startswith("s.yaml:15: steps[3].slow.distribution: expected one of 'uniform', 'normal', 'pareto' "
                           "or 'paretonormal', got 'gauss'"), line
    (line,) = problems(text.replace("jitter_ms: 5, ", ""))
    assert "delay_corr_pct=25 needs jitter_ms > 0" in line, line
    (line,) = problems(text.replace("restart: n3", "restart: n9"))
    assert "steps[4].restart: unknown node 'n9'" in line, line


# --- step timing, ids, end, duration_s, the new msg-fault and inject fields, restart delay ----------------------
VERBS = """\
cluster:
  nodes: 3
variants:
  legacy: {unicast: unicast1}
  fixed: {unicast: unicast3}
steps:
  - at_s: 0
    workload: {kind: unicast, from: n1, to: n2, count: 10}
  - at_s: 1
    id: p1
    partition: "n2<-n1"
"""


def with_step(text: str, variant: str = "fixed") -> list[str]:
    return problems(VERBS + text, variant=variant)


def test_relative_steps_load_and_their_fields_are_checked() -> None:
    loaded = load_text(VERBS + "  - at_s: 2\n    end: p1\n  - after: heal\n    fast:\n"
                               "  - {after: view, delay_s: 0.5, timeout_s: 9, heal:}\n", "s.yaml", variant="fixed")
    relative = loaded.scenario.steps[-1]
    assert (relative.after, relative.delay_s, relative.wait_s, relative.at_s) == ("view", 0.5, 9, None)
    assert with_step("  - after: views\n    heal:\n") == [
        "s.yaml:12: steps[2].after: expected one of 'heal', 'view' or 'workload-done', got 'views'"]
    assert with_step("  - at_s: 2\n    after: view\n    heal:\n") == [
        "s.yaml:13: steps[2].after: a step has at_s or after, not both"]
    assert with_step("  - at_s: 2\n    delay_s: 1\n    heal:\n") == [
        "s.yaml:13: steps[2].delay_s: delay_s goes with after (seconds after the condition); a step at at_s has "
        "neither"]
    (line,) = with_step("  - note: when?\n    heal:\n")
    assert line == ("s.yaml:12: steps[2].at_s: required field missing: when the step happens: at_s (seconds from "
                    "the start) or after (heal, view, workload-done)")
    assert with_step("  - after: workload-done\n    timeout_s: 0\n    heal:\n") == [
        "s.yaml:13: steps[2].timeout_s: expected a value > 0, got 0"]


def test_what_a_relative_step_waits_for_must_be_able_to_happen() -> None:
    assert with_step("  - after: heal\n    fast:\n") == [
        "s.yaml:12: steps[2].after: after: heal waits for an earlier heal, fast, end, resume or start step, or for a "
        "fault step's duration_s to run out; there is none before this step"]
    load_text(VERBS.replace('partition: "n2<-n1"', 'partition: "n2<-n1"\n    duration_s: 2')
              + "  - after: heal\n    fast:\n", "s.yaml", variant="fixed")
    assert problems("cluster: {nodes: 2}\nsteps:\n  - after: workload-done\n    heal:\n") == [
        "s.yaml:3: steps[0].after: after: workload-done waits for the workloads started so far; no workload step "
        "comes before this one"]
    text = VERBS.replace("fixed: {unicast: unicast3}", "fixed: {unicast: unicast3, membership: none}")
    assert problems(text + "  - after: view\n    heal:\n", variant="fixed") == [
        "s.yaml:12: steps[2].after: after: view needs a membership layer on every node; n1, n2, n3 run membership "
        "none in variant fixed"]


def test_ids_are_unique_and_end_names_an_earlier_fault_step_once() -> None:
    assert with_step("  - at_s: 2\n    id: p1\n    fast:\n") == [
        "s.yaml:13: steps[2].id: id 'p1' is already used by steps[1] (s.yaml:9); ids are unique"]
    assert with_step("  - at_s: 2\n    end: p9\n") == [
        "s.yaml:13: steps[2].end: unknown step id 'p9'; expected the id of an earlier fault step: p1"]
    assert with_step("  - at_s: 2\n    id: w\n    workload: {kind: unicast, from: n1, to: n2, count: 1}\n"
                     "  - at_s: 3\n    end: w\n") == [
        "s.yaml:16: steps[3].end: steps[2] (workload) starts no fault to end; end works on partition, slow, flaky, "
        "shape, msg-fault, pause, kill, fault"]
    assert with_step("  - at_s: 2\n    end: p1\n  - at_s: 3\n    end: p1\n") == [
        "s.yaml:15: steps[3].end: steps[1] (p1) is already ended by steps[2]"]
    assert problems(VERBS.replace("  - at_s: 1\n    id: p1", "  - at_s: 0.5\n    end: p1\n  - at_s: 1\n    id: p1"),
                    variant="fixed") == [
        "s.yaml:10: steps[1].end: step id 'p1' is steps[2], which comes after this one; end names an earlier step"]
    assert with_step("  - at_s: 2\n    duration_s: 3\n    heal:\n") == [
        "s.yaml:13: steps[2].duration_s: duration_s ends the fault a step starts (partition, slow, flaky, shape, "
        "msg-fault, pause, kill, fault); heal starts none"]


def test_msg_fault_first_flag_and_the_new_actions() -> None:
    load_text(VERBS + "  - at_s: 2\n    msg-fault: {type: UnicastData, from: n1, to: n2, action: 'drop-every:2', "
                      "first: false}\n", "s.yaml", variant="fixed")
    fault = "  - at_s: 2\n    msg-fault: {type: %s, from: n1, to: n2, action: '%s'%s}\n"
    assert with_step(fault % ("UnicastAck", "drop", ", first: true")) == [
        "s.yaml:13: steps[2].msg-fault.first: UnicastAck has no first flag; first applies to UnicastData"]
    assert with_step(fault % ("UnicastSync", "drop-range:1-3", "")) == [
        "s.yaml:13: steps[2].msg-fault.action: drop-range selects by seqno; UnicastSync has none"]
    assert with_step(fault % ("UnicastData", "drop-range:5-3", "")) == [
        "s.yaml:13: steps[2].msg-fault.action: action drop-range needs seqnos 0 <= A <= B, got 5-3"]
    assert with_step(fault % ("UnicastData", "drop-every:0", "")) == [
        "s.yaml:13: steps[2].msg-fault.action: action drop-every needs a count >= 1, e.g. drop-every:3"]
    assert with_step(fault % ("UnicastData", "drop", ", first: maybe")) == [
        "s.yaml:13: steps[2].msg-fault.first: expected true or false, got 'maybe'"]


def test_inject_conn_id_and_payload() -> None:
    inject = "  - at_s: 2\n    inject: {type: %s, from: n1, to: n2%s}\n"
    ok = VERBS + inject % ("UnicastData", ", conn_id: previous, payload: hi, fields: {seqno: 3}")
    assert load_text(ok, "s.yaml", variant="fixed").scenario.steps[2].inject.conn_id == "previous"
    assert problems(ok, variant="legacy") == [
        "s.yaml:13: steps[2].inject.conn_id: conn_id previous needs connection ids (unicast2 or unicast3); n2 runs "
        "unicast1 in variant legacy"]
    assert with_step(inject % ("UnicastData", ", conn_id: prev")) == [
        "s.yaml:13: steps[2].inject.conn_id: expected an integer or one of 'current', 'previous' or 'next', got "
        "'prev'"]
    assert with_step(inject % ("Heartbeat", ", conn_id: current")) == [
        "s.yaml:13: steps[2].inject.conn_id: conn_id current is read from the target's unicast connection; "
        "Heartbeat is not a unicast message with a conn_id"]
    assert with_step(inject % ("UnicastAck", ", payload: hi")) == [
        "s.yaml:13: steps[2].inject.payload: payload goes with UnicastData and Nakack4Msg injections, not UnicastAck"]
    assert with_step(inject % ("Nakack4Msg", ", payload: hi, fields: {conn_id: 1}")) == [
        "s.yaml:13: steps[2].inject.fields: Nakack4Msg has no field(s) conn_id; fields: seqno"]
    assert with_step(inject % ("UnicastAck", ", conn_id: 3, fields: {conn_id: 1}")) == [
        "s.yaml:13: steps[2].inject.conn_id: conn_id is given twice (also in fields); keep one"]


def test_restart_takes_a_node_or_a_node_and_a_delay() -> None:
    steps = load_text(VERBS + "  - at_s: 2\n    restart: n2\n  - at_s: 3\n    restart: {node: n3, delay_s: 1.5}\n",
                      "s.yaml", variant="fixed").scenario.steps
    assert [(s.restart_node, s.restart_delay_s) for s in steps[2:]] == [("n2", 0.0), ("n3", 1.5)]
    assert with_step("  - at_s: 2\n    restart: {node: n2, delay: 1}\n") == [
        "s.yaml:13: steps[2].restart.delay: unknown field 'delay'; expected one of node, delay_s"]
    assert with_step("  - at_s: 2\n    restart: {node: n7}\n") == [
        "s.yaml:13: steps[2].restart.node: unknown node 'n7'; expected one of n1, n2, n3"]
