"""Load and validate a scenario: YAML with line numbers, `--set` overrides, the pydantic shape, then every
cross-reference (nodes, grudges, links, message types and actions, step timing and ids, what `end` and
`duration_s` may end, what `after` may wait for, check names and parameters, variants).

`load_scenario(path, sets, variant)` returns a `Loaded` scenario or raises `ScenarioError` (a `UsageError`,
exit code 2) listing every problem as `file:line: field: what was expected, got what`.
"""
from __future__ import annotations

import random
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pydantic

from chaos.harness.errors import Problem, ScenarioError, dotted
from chaos.harness.expect import HARNESS
from chaos.harness.nodeenv import check_node_env, node_env, run_auth, run_kind
from chaos.harness.schema import (ACTIONS, ENDABLE, HEALING, NO_ARGUMENT, RATE_KEY, RELATIVE_CONN_IDS,
                                  SPLITLAB_FIELDS, STATUSES, STEP_KEYS, TIMEOUT_ENV, Scenario, Step)
from chaos.harness.yamlsrc import Sourced, load_yaml, set_path
from node.config import CONTRACT_VARIABLES
from node.errors import UsageError

DEFAULT = "default"
MAX_SCENARIO_BYTES = 128 * 1024  # the largest in scenarios/ is 3 KB; YAML parses at seconds per MB here
_READ_HINT = "give the path of a YAML file, e.g. scenarios/jgrp1873.yaml"


@dataclass
class Loaded:
    """A validated scenario, its source, and the chosen variant (None when the scenario has no variants)."""

    scenario: Scenario
    doc: Sourced
    path: Path | None
    variant: str | None
    sets: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.variant or DEFAULT

    def expectations(self) -> dict[str, dict[str, Any]]:
        """{check: {"status": ..., params...}} for the chosen variant: `default` with the variant's on top."""
        out: dict[str, dict[str, Any]] = {}
        for key in [DEFAULT] + ([self.variant] if self.variant else []):
            for check, item in (self.scenario.expect.get(key) or {}).items():
                if check != RATE_KEY:
                    out[check] = {"status": item} if isinstance(item, str) else dict(item)
        return out

    def expected_rate(self) -> str | None:
        """The reproduction rate the chosen variant expects over repeated runs (its own, else `default`'s)."""
        for key in ([self.variant] if self.variant else []) + [DEFAULT]:
            rate = (self.scenario.expect.get(key) or {}).get(RATE_KEY)
            if rate is not None:
                return rate
        return None

    def node_env(self) -> dict[str, dict[str, str]]:
        return node_env(self.scenario, self.variant)

    @property
    def kind(self) -> str:
        """The node kind of this variant's runs (chaos.cluster.kinds)."""
        return run_kind(self.scenario, self.variant)

    @property
    def auth(self) -> bool:
        """Whether this variant's runs have the authenticated wire (chaos.cluster.authkey)."""
        return run_auth(self.scenario, self.variant)


# --- pydantic errors to lines -----------------------------------------------------------------------------------
_EXPECTED = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "bool_parsing": "true or false", "string_type": "text", "partition_form": "text or a mapping", "dict_type": "a mapping", "model_type": "a mapping",
    "model_attributes_type": "a mapping", "list_type": "a list", "missing": "a value (required field missing)",
    "finite_number": "a finite number",
}
_TYPE_MISMATCH = {"int_type", "float_type", "bool_type", "string_type", "dict_type", "model_type", "list_type",
                  "model_attributes_type"}


def _expected(err: dict[str, Any]) -> str:
    kind = err["type"]
    ctx = {k: (f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
           for k, v in (err.get("ctx") or {}).items()}
    if kind in _EXPECTED:
        return _EXPECTED[kind]
    if kind == "literal_error":
        return f"one of {ctx.get('expected')}"
    bounds = {"greater_than_equal": ">= {ge}", "greater_than": "> {gt}", "less_than_equal": "<= {le}",
              "less_than": "< {lt}", "string_too_short": "text of at least {min_length} character(s)",
              "string_too_long": "text of at most {max_length} characters",
              "string_pattern_mismatch": "text matching {pattern}"}
    if kind in bounds:
        return "a value " + bounds[kind].format(**ctx) if kind.startswith(("greater", "less")) else \
            bounds[kind].format(**ctx)
    return err["msg"]


def _real_path(data: Any, loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], bool]:
    """The path of `loc` in the raw data (union tags dropped, `from_`/`msg_fault` matched to what was written);
    and whether a union tag was dropped."""
    out: list[Any] = []
    cursor = data
    tagged = False
    for part in loc:
        if isinstance(cursor, dict):
            for candidate in (part, str(part).replace("_", "-"), str(part).rstrip("_")):
                if candidate in cursor:
                    out.append(candidate)
                    cursor = cursor[candidate]
                    break
            else:
                if isinstance(part, str) and (("[" in part) or part[:1].isupper() or part.startswith("constrained")
                                              or part in ("str", "int", "float", "bool", "list", "dict")):
                    tagged = True  # a union member's name, not a key
                    continue
                out.append(part)  # a missing or unknown key: name it
                cursor = None
        elif isinstance(cursor, list) and isinstance(part, int) and part < len(cursor):
            out.append(part)
            cursor = cursor[part]
        elif isinstance(part, str) and not isinstance(cursor, (dict, list)) and out:
            tagged = True
        else:
            out.append(part)
            cursor = None
    return tuple(out), tagged


def _unwrap(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin is typing.Union:
        return [t for arg in typing.get_args(tp) for t in _unwrap(arg)]
    return [tp]


def _fields_at(path: tuple[Any, ...]) -> list[str]:
    """The field names a mapping at `path` accepts (for 'unknown field' messages)."""
    types: list[Any] = [Scenario]
    for part in path:
        following: list[Any] = []
        for tp in types:
            origin = typing.get_origin(tp)
            if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
                for name, info in tp.model_fields.items():
                    if part in (name, info.alias):
                        following += _unwrap(info.annotation)
            elif origin is list and isinstance(part, int):
                following += _unwrap(typing.get_args(tp)[0])
            elif origin is dict:
                following += _unwrap(typing.get_args(tp)[1])
        types = following
    names: list[str] = []
    for tp in types:
        if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
            names += [info.alias or name for name, info in tp.model_fields.items() if name not in names]
    return names


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def pydantic_problems(doc: Sourced, exc: pydantic.ValidationError) -> list[Problem]:
    """One problem per field; where a union's members disagree, the member the input's type fits speaks."""
    by_path: dict[tuple[Any, ...], list[tuple[dict[str, Any], bool]]] = {}
    for err in exc.errors():
        path, tagged = _real_path(doc.data, tuple(err["loc"]))
        by_path.setdefault(path, []).append((err, tagged))
    deeper = {p for p in by_path}
    problems = []
    for path, errs in by_path.items():
        if all(t and e["type"] in _TYPE_MISMATCH for e, t in errs) and any(
                other != path and other[:len(path)] == path for other in deeper):
            continue  # the input is of another union member's type: that member's errors are below
        err = errs[0][0]
        if err["type"] == "extra_forbidden":
            allowed = _fields_at(path[:-1])
            text = f"unknown field {path[-1]!r}; expected one of {', '.join(allowed)}"
        elif err["type"] == "missing":
            text = "required field missing"
        elif err["type"] == "value_error":  # a model's own check: its message says it all
            text = str(err["ctx"]["error"])
        else:
            wanted = []
            for e, _ in errs:
                phrase = _expected(e)
                if phrase not in wanted:
                    wanted.append(phrase)
            text = f"expected {' or '.join(wanted)}, got {_shown(err['input'])}"
        problems.append(Problem(doc.locate(path), path, text))
    return problems


# --- checks on the raw document ---------------------------------------------------------------------------------
def _shape_problems(doc: Sourced) -> list[Problem]:
    """What pydantic would report poorly: a non-mapping document, steps that are not lists of one action."""
    data = doc.data
    if data is None:
        return [Problem(doc.locate(()), (), "the document is empty; expected a mapping with cluster, steps, ...")]
    if not isinstance(data, dict):
        return [Problem(doc.locate(()), (), f"expected a mapping with cluster, steps, ...; got {_shown(data)}")]
    problems = []
    steps = data.get("steps")
    if steps is None:
        return problems
    if not isinstance(steps, list):
        return [Problem(doc.locate(("steps",)), ("steps",), f"expected a list of steps, got {_shown(steps)}")]
    known = ", ".join(a.replace("_", "-") if a == "msg_fault" else a for a in ACTIONS)
    for index, step in enumerate(steps):
        path: tuple[Any, ...] = ("steps", index)
        if not isinstance(step, dict):
            problems.append(Problem(doc.locate(path), path, f"expected a mapping with at_s and one action "
                                                             f"({known}), got {_shown(step)}"))
            continue
        actions = []
        unknown = False
        for key in step:
            norm = str(key).replace("-", "_")
            if key in STEP_KEYS:
                continue
            if norm not in ACTIONS:
                unknown = True
                problems.append(Problem(doc.locate(path + (key,)), path + (key,),
                                        f"unknown action {key!r}; expected one of {known}"))
            else:
                actions.append(key)
        if "at_s" not in step and "after" not in step:
            problems.append(Problem(doc.locate(path), path + ("at_s",), "required field missing: when the step "
                                                                          "happens: at_s (seconds from the start) "
                                                                          "or after (heal, view, workload-done)"))
        elif "at_s" in step and "after" in step:
            problems.append(Problem(doc.locate(path + ("after",)), path + ("after",),
                                    "a step has at_s or after, not both"))
        for key, why in (("delay_s", "seconds after the condition"), ("timeout_s", "how long to wait for it")):
            if key in step and "after" not in step:
                problems.append(Problem(doc.locate(path + (key,)), path + (key,),
                                        f"{key} goes with after ({why}); a step at at_s has neither"))
        if len(actions) > 1:
            problems.append(Problem(doc.locate(path + (actions[1],)), path + (actions[1],),
                                    f"one action per step, got {', '.join(map(str, actions))}; "
                                    "split them into steps with the same at_s"))
        elif not actions and not unknown:
            problems.append(Problem(doc.locate(path), path, f"a step needs one action: one of {known}"))
        for key in actions:
            if step[key] is None and str(key).replace("-", "_") not in NO_ARGUMENT:
                problems.append(Problem(doc.locate(path + (key,)), path + (key,),
                                        f"action {key} needs arguments"))
    return problems


# --- cross-references -------------------------------------------------------------------------------------------
class _Checker:
    """Collects cross-reference problems of a shape-valid scenario."""

    def __init__(self, doc: Sourced, scenario: Scenario, variant: str | None) -> None:
        self.doc = doc
        self.scenario = scenario
        self.variant = variant
        self.nodes = scenario.node_names
        self.problems: list[Problem] = []

    def add(self, path: tuple[Any, ...], text: str) -> None:
        self.problems.append(Problem(self.doc.locate(path), path, text))

    def key_of(self, path: tuple[Any, ...], *names: str) -> tuple[Any, ...]:
        """`path` + whichever of `names` the document uses at that place."""
        node: Any = self.doc.data
        for part in path:
            node = node[part] if isinstance(node, (dict, list)) else None
        for name in names:
            if isinstance(node, dict) and name in node:
                return path + (name,)
        return path + (names[0],)

    def node(self, path: tuple[Any, ...], name: str) -> bool:
        if name not in self.nodes:
            self.add(path, f"unknown node {name!r}; expected one of {', '.join(self.nodes)}")
            return False
        return True

    def guarded(self, path: tuple[Any, ...], check: Any) -> None:
        """Run a validator of the controller (grudge, links, message rules); its UsageError becomes a problem."""
        try:
            check()
        except UsageError as exc:
            self.add(path, exc.message)

    def run(self) -> list[Problem]:
        self.cluster()
        self.steps()
        self.expectations()
        return self.problems

    def cluster(self) -> None:
        sc = self.scenario
        for name in sc.cluster.overrides:
            self.node(("cluster", "overrides", name), name)
        for vname, variant in sc.variants.items():
            for name in variant.overrides:
                self.node(("variants", vname, "overrides", name), name)
        if self.variant is not None and self.variant not in sc.variants:
            where = ("variants",) if sc.variants else ()
            known = ", ".join(sc.variants) or "(none: this scenario has no variants)"
            self.add(where, f"unknown variant {self.variant!r}; expected one of {known}")
            return
        if self.problems:
            return
        kind = run_kind(sc, self.variant)
        self.kind_settings(kind)
        self.auth(kind)
        if self.problems:
            return
        envs = node_env(sc, self.variant)
        for node_name, env in envs.items():
            error = check_node_env(self.nodes, env, node_name, kind)
            if error:
                under = f" under variant {self.variant}" if self.variant else ""
                self.add(("cluster",), f"node {node_name}{under} would refuse its configuration: {error}")
                return  # the other nodes would most likely say the same

    @property
    def kind(self) -> str:
        known = self.variant is None or self.variant in self.scenario.variants
        return run_kind(self.scenario, self.variant if known else None)

    def same_wire(self, path: tuple[Any, ...], code: int) -> bool:
        """Whether message type `code` is of the wire the run's nodes speak; says so when not."""
        from chaos.wire.dissect import is_jgroups

        if is_jgroups(code) == (self.kind == "jgroups"):
            return True
        under = f" (variant {self.variant})" if self.variant else ""
        speaks = "the real JGroups 2.12's" if self.kind == "jgroups" else "splitlab's own"
        self.add(path, f"{_type_name(code)} is not a message of the wire this run's nodes speak: {speaks}{under}")
        return False

    def auth(self, kind: str) -> None:
        """A run with the authenticated wire is of a kind whose nodes speak it (chaos.cluster.kinds)."""
        from chaos.cluster.kinds import auth_refusal

        if not run_auth(self.scenario, self.variant) or (refused := auth_refusal(kind)) is None:
            return
        own = self.variant is not None and self.scenario.variants[self.variant].auth is not None
        under = f" (variant {self.variant})" if self.variant else ""
        self.add(("variants", self.variant, "auth") if own else ("cluster", "auth"), f"{refused}{under}")

    def kind_settings(self, kind: str) -> None:
        """Every settings layer of the run fits its node kind: no splitlab node settings (nor its timeouts beyond
        the contract's) in a run of JGroups, no JGroups settings in a run of splitlab's node."""
        sc = self.scenario
        layers: list[tuple[tuple[Any, ...], Any]] = [(("cluster", "defaults"), sc.cluster.defaults)]
        layers += [(("cluster", "overrides", n), o) for n, o in sc.cluster.overrides.items()]
        if self.variant is not None:
            chosen = sc.variants[self.variant]
            layers += [(("variants", self.variant), chosen)]
            layers += [(("variants", self.variant, "overrides", n), o) for n, o in chosen.overrides.items()]
        under = f" (variant {self.variant})" if self.variant else ""
        for path, layer in layers:
            if kind == "jgroups":
                for name in SPLITLAB_FIELDS:
                    if getattr(layer, name) is not None:
                        self.add(path + (name,), f"{name} is a setting of splitlab's own node; this run is of the "
                                                 f"real JGroups{under}: set jgroups.unicast / jgroups.props")
                if layer.timeouts is not None:
                    for name in layer.timeouts.model_dump(exclude_none=True):
                        if TIMEOUT_ENV[name] not in CONTRACT_VARIABLES:
                            self.add(path + ("timeouts", name), f"{name} is a timeout of splitlab's own node; this "
                                                                f"run is of the real JGroups{under}: set its "
                                                                f"protocols' properties in jgroups.props")
            elif layer.jgroups is not None:
                self.add(path + ("jgroups",), f"jgroups settings apply to runs of the real JGroups; this run is of "
                                              f"{kind}'s node{under} (set kind: jgroups)")

    def steps(self) -> None:
        previous = 0.0
        self.ids: dict[str, int] = {}
        self.ended: dict[int, int] = {}  # fault step index -> the `end` step that ends it
        for index, step in enumerate(self.scenario.steps):
            path: tuple[Any, ...] = ("steps", index)
            if step.at_s is not None:
                if step.at_s < previous:
                    self.add(path + ("at_s",), f"expected a time >= {previous:g} s (the previous step's), got "
                                               f"{step.at_s:g}: steps are listed in time order")
                previous = max(previous, step.at_s)
            else:
                self.after(path, index, step)
            if step.id is not None:
                if step.id in self.ids:
                    first = self.ids[step.id]
                    self.add(path + ("id",), f"id {step.id!r} is already used by steps[{first}] "
                                             f"({self.doc.locate(('steps', first))}); ids are unique")
                else:
                    self.ids[step.id] = index
            action = step.action
            if step.duration_s is not None and action not in ENDABLE:
                self.add(path + ("duration_s",), f"duration_s ends the fault a step starts ({_endable()}); "
                                                 f"{_written(action)} starts none")
            if step.ttl_s is not None and action not in ENDABLE:
                self.add(path + ("ttl_s",), f"ttl_s leases the fault a step starts ({_endable()}); "
                                            f"{_written(action)} starts none")
            key = self.key_of(path, action, action.replace("_", "-"))
            getattr(self, f"step_{action}")(key, step.args)
            if action == "end":
                self.end(key, index, step.end)
        duration = self.scenario.duration_s
        if duration is not None and duration < previous:
            self.add(("duration_s",), f"expected at least {previous:g} s (the last step's time), got {duration:g}")

    def after(self, path: tuple[Any, ...], index: int, step: Step) -> None:
        """What a relative step waits for must be able to happen."""
        earlier = self.scenario.steps[:index]
        where = path + ("after",)
        if step.after == "heal":
            if not any(s.action in HEALING or s.duration_s is not None for s in earlier):
                self.add(where, "after: heal waits for an earlier heal, fast, end, resume or start step, or for a "
                                "fault step's duration_s to run out; there is none before this step")
        elif step.after == "workload-done":
            if not any(s.action == "workload" for s in earlier):
                self.add(where, "after: workload-done waits for the workloads started so far; no workload step "
                                "comes before this one")
        elif step.after == "view" and (self.variant is None or self.variant in self.scenario.variants):
            envs = node_env(self.scenario, self.variant)
            without = [n for n in self.nodes if envs[n].get("SPLITLAB_MEMBERSHIP", "gms") == "none"]
            if without:
                under = f" in variant {self.variant}" if self.variant else ""
                self.add(where, f"after: view needs a membership layer on every node; {', '.join(without)} "
                                f"run{'s' if len(without) == 1 else ''} membership none{under}")

    def end(self, path: tuple[Any, ...], index: int, target: str) -> None:
        """`end: <id>` names an earlier step that starts a fault, not ended by another `end` already."""
        ref = self.ids.get(target)
        later = next((i for i, s in enumerate(self.scenario.steps) if s.id == target and i > index), None)
        if ref is None and later is not None:
            self.add(path, f"step id {target!r} is steps[{later}], which comes after this one; end names an earlier "
                           "step")
            return
        if ref is None or ref >= index:
            known = [f"{s.id}" for s in self.scenario.steps[:index] if s.id is not None and s.action in ENDABLE]
            self.add(path, f"unknown step id {target!r}; expected the id of an earlier fault step"
                           f"{': ' + ', '.join(known) if known else ' (give the step an id: id: p1)'}")
            return
        kind = self.scenario.steps[ref].action
        if kind not in ENDABLE:
            self.add(path, f"steps[{ref}] ({_written(kind)}) starts no fault to end; end works on {_endable()}"
                           + (" (inject and restart are instants)" if kind in ("inject", "restart") else ""))
        elif ref in self.ended:
            self.add(path, f"steps[{ref}] ({target}) is already ended by steps[{self.ended[ref]}]")
        else:
            self.ended[ref] = index

    def step_workload(self, path: tuple[Any, ...], w: Any) -> None:
        senders = w.from_ if isinstance(w.from_, list) else [w.from_]
        if not senders:
            self.add(path + ("from",), "expected a node or a list of nodes, got an empty list")
        for i, sender in enumerate(senders):
            self.node(path + (("from", i) if isinstance(w.from_, list) else ("from",)), sender)
        if w.kind == "unicast":
            if w.to is None:
                self.add(path + ("to",), "required field missing: a unicast workload needs 'to'")
            elif self.node(path + ("to",), w.to) and w.to in senders:
                self.add(path + ("to",), f"expected a node other than the sender, got {w.to!r}")
        elif w.to is not None:
            self.add(path + ("to",), "a multicast workload goes to the sender's view; leave 'to' out")

    def step_partition(self, path: tuple[Any, ...], grudge: Any) -> None:
        from chaos.faults import grudge as grudges
        from chaos.harness.schema import Partition

        if isinstance(grudge, Partition):
            path, grudge = path + ("grudge",), grudge.grudge
        if isinstance(grudge, str):
            self.guarded(path, lambda: grudges.parse_grudge(grudge, self.nodes, random.Random(0)))
            return
        for node, sources in grudge.items():
            if self.node(path + (node,), node):
                for i, src in enumerate(sources):
                    if self.node(path + (node, i), src) and src == node:
                        self.add(path + (node, i), f"{node} cannot drop its own traffic")

    def step_heal(self, path: tuple[Any, ...], _: Any) -> None:
        pass

    step_fast = step_heal

    def _links(self, path: tuple[Any, ...], links: str | None) -> None:
        from chaos.faults import grudge as grudges

        if links is not None:
            self.guarded(path + ("links",), lambda: grudges.parse_links(links, self.nodes))

    def step_slow(self, path: tuple[Any, ...], s: Any) -> None:
        from chaos.faults import grudge as grudges

        self._links(path, s.links)
        self.guarded(path, lambda: grudges.link_fault(s.model_dump(exclude={"links"})))

    def step_flaky(self, path: tuple[Any, ...], f: Any) -> None:
        self._links(path, f.links)

    def step_shape(self, path: tuple[Any, ...], text: str) -> None:
        from chaos.faults import grudge as grudges

        self.guarded(path, lambda: grudges.parse_matrix(text, self.nodes))

    def step_msg_fault(self, path: tuple[Any, ...], m: Any) -> None:
        from chaos.wire.dissect import message_type
        from chaos.faults.msgrules import MsgRule, action_spec

        ok = self.node(path + ("from",), m.from_) & self.node(path + ("to",), m.to)
        code: list[int] = []
        self.guarded(path + ("type",), lambda: code.append(message_type(m.type)))
        parsed: list[dict[str, Any]] = []
        self.guarded(path + ("action",), lambda: parsed.append(action_spec(m.action)))
        if code and not self.same_wire(path + ("type",), code[0]):
            return
        names = _wire_fields(code[0]) if code else None
        if names is not None and m.first is not None and "first" not in names:
            self.add(path + ("first",), f"{_type_name(code[0])} has no first flag; first applies to UnicastData")
            return
        if names is not None and parsed and parsed[0]["action"] == "drop-range" and "seqno" not in names:
            self.add(path + ("action",), f"drop-range selects by seqno; {_type_name(code[0])} has none")
            return
        if parsed:
            self.guarded(path + ("action",), lambda: MsgRule(type=0, src="a", dst="b", **parsed[0]))
        if ok and code and parsed and not any(p.path == path + ("action",) for p in self.problems):
            self.guarded(path, lambda: MsgRule(type=code[0], src=m.from_, dst=m.to, conn_id=m.conn_id,
                                               seqno=m.seqno, first=m.first, **parsed[0]))

    def step_inject(self, path: tuple[Any, ...], i: Any) -> None:
        from chaos.wire import inject
        from chaos.wire.dissect import message_type
        from chaos.harness.injection import PAYLOAD_TYPES, conn_side, wire_message

        ok = self.node(path + ("from",), i.from_) & self.node(path + ("to",), i.to)
        if ok and i.from_ == i.to:
            self.add(path + ("to",), f"expected a node other than the sender, got {i.to!r}")
        code: list[int] = []
        self.guarded(path + ("type",), lambda: code.append(message_type(i.type)))
        if not code:
            return
        if self.kind != "splitlab":
            self.add(path, f"inject forges splitlab's own wire; this run is of the real JGroups"
                           f"{' (variant ' + self.variant + ')' if self.variant else ''}")
            return
        if i.sign and not run_auth(self.scenario, self.variant if self.variant in self.scenario.variants else None):
            self.add(path + ("sign",), "sign needs the run's key: this run has the open wire (set cluster.auth: true"
                                       f"{' or auth: true in variant ' + self.variant if self.variant else ''})")
            return
        name = _type_name(code[0])
        if i.conn_id is not None:
            if "conn_id" in i.fields:
                self.add(path + ("conn_id",), "conn_id is given twice (also in fields); keep one")
                return
            if i.conn_id in RELATIVE_CONN_IDS:
                if conn_side(code[0]) is None:
                    self.add(path + ("conn_id",), f"conn_id {i.conn_id} is read from the target's unicast "
                                                  f"connection; {name} is not a unicast message with a conn_id")
                    return
                if ok and (self.variant is None or self.variant in self.scenario.variants):
                    unicast = node_env(self.scenario, self.variant)[i.to].get("SPLITLAB_UNICAST", "unicast3")
                    if unicast == "unicast1":
                        under = f" in variant {self.variant}" if self.variant else ""
                        self.add(path + ("conn_id",), f"conn_id {i.conn_id} needs connection ids (unicast2 or "
                                                      f"unicast3); {i.to} runs unicast1{under}")
                        return
            elif "conn_id" not in (_wire_fields(code[0]) or ()):
                self.add(path + ("conn_id",), f"{name} has no conn_id")
                return
        conn = 1 if isinstance(i.conn_id, str) else i.conn_id
        fields = dict(i.fields, **({} if conn is None else {"conn_id": conn}))
        if i.payload is not None or code[0] in PAYLOAD_TYPES:
            if code[0] not in PAYLOAD_TYPES:
                self.add(path + ("payload",), f"payload goes with {' and '.join(PAYLOAD_TYPES.values())} "
                                              f"injections, not {name}")
                return
            self.guarded(path + ("fields",), lambda: wire_message(code[0], fields, i.payload or ""))
            return
        self.guarded(path + ("type",), lambda: inject.message(str(i.type), **fields))

    def step_pause(self, path: tuple[Any, ...], p: Any) -> None:
        if isinstance(p, str):
            self.node(path, p)
        else:
            self.node(path + ("node",), p.node)

    def step_resume(self, path: tuple[Any, ...], node: str) -> None:
        self.node(path, node)

    step_kill = step_start = step_resume

    def step_restart(self, path: tuple[Any, ...], r: Any) -> None:
        if isinstance(r, str):
            self.node(path, r)
        else:
            self.node(path + ("node",), r.node)

    def step_end(self, path: tuple[Any, ...], _: Any) -> None:
        pass  # checked by `end`, which needs the step's index

    def step_fault(self, path: tuple[Any, ...], f: Any) -> None:
        for key, value in f.args.items():  # a registered fault's node arguments name nodes of this cluster
            if key in ("node", "from", "to", "src", "dst") and isinstance(value, str):
                self.node(path + ("args", key), value)

    def step_admin(self, path: tuple[Any, ...], a: Any) -> None:
        ok = self.node(path + ("node",), a.node) & self.node(path + ("peer",), a.peer)
        if ok and a.node == a.peer:
            self.add(path + ("peer",), f"expected a node other than {a.node!r} itself")
        if ok and a.op == "sync" and (self.variant is None or self.variant in self.scenario.variants):
            unicast = node_env(self.scenario, self.variant)[a.node].get("SPLITLAB_UNICAST", "unicast3")
            if not _admin_sync(unicast):
                self.add(path + ("op",), f"admin sync needs a unicast layer with the sync request (unicast3); "
                                         f"{a.node} runs {unicast}"
                                         f"{' in variant ' + self.variant if self.variant else ''}")

    def expectations(self) -> None:
        from pipeline.checks import CHECKS
        from pipeline.params import resolve

        checks = {c.name: c for c in CHECKS}
        allowed = [DEFAULT, *self.scenario.variants]
        for key, items in self.scenario.expect.items():
            if key not in allowed:
                self.add(("expect", key), f"unknown variant {key!r}; expected one of {', '.join(allowed)}")
                continue
            for check, item in items.items():
                path = ("expect", key, check)
                is_rate = isinstance(item, str) and item not in STATUSES
                if check == RATE_KEY or is_rate:
                    if check != RATE_KEY:
                        self.add(path, f"{item!r} is a rate: it goes under '{RATE_KEY}' (the share of repeated "
                                       f"runs that hold), a check takes ok, fail or unknown")
                    elif not is_rate:
                        self.add(path, f"expected a rate such as '>= 0.95' (the share of repeated runs that "
                                       f"hold), got {_shown(item)}")
                    continue
                if check not in checks and check not in HARNESS:
                    self.add(path, f"unknown check {check!r}; expected one of "
                                   f"{', '.join([*checks, *HARNESS])}")
                    continue
                if isinstance(item, str):
                    continue
                status = item.get("status")
                if status not in STATUSES:
                    self.add(path + ("status",), f"expected one of 'ok', 'fail', 'unknown', got {_shown(status)}")
                params = {k: v for k, v in item.items() if k != "status"}
                if check in HARNESS:
                    if params:
                        self.add(path, f"check {check} takes no parameters, got {', '.join(params)}")
                    continue
                self.guarded(path, lambda: resolve(CHECKS, {check: params}))


def _written(action: str) -> str:
    return "msg-fault" if action == "msg_fault" else action


def _endable() -> str:
    return ", ".join(_written(a) for a in ENDABLE)


def _type_name(code: int) -> str:
    from chaos.wire.dissect import type_name

    return type_name(code)


def _wire_fields(code: int) -> list[str] | None:
    """The field names of a wire message type (None for an unknown code)."""
    from jgnode.wire import NAMES_BY_CODE, rule_fields
    from node.wire import field_names, message_types

    if code in NAMES_BY_CODE:
        return list(rule_fields(NAMES_BY_CODE[code]))
    cls = message_types().get(code)
    return None if cls is None else field_names(cls)


def _admin_sync(unicast: str) -> bool:
    """Whether the unicast layer named `unicast` has the `sync {peer}` request (a name no layer has is reported
    by the node's own configuration check, once)."""
    from node.errors import ConfigError
    from node.layers import layer_class

    try:
        return bool(getattr(layer_class("unicast", unicast), "ADMIN_SYNC", False))
    except ConfigError:
        return True


def _without_unknown_actions(data: dict[str, Any]) -> dict[str, Any]:
    """A copy whose steps keep only known keys, so pydantic can check the rest of the file too."""
    steps = data.get("steps")
    if not isinstance(steps, list):
        return {k: v for k, v in data.items() if k != "steps"}
    keep = set(STEP_KEYS) | set(ACTIONS) | {"msg-fault"}
    clean = [{k: v for k, v in s.items() if k in keep} if isinstance(s, dict) else {"at_s": 0} for s in steps]
    return {**data, "steps": clean}


def _line_order(problem: Problem) -> tuple[int, str]:
    _, _, line = problem.location.rpartition(":")
    return (int(line) if line.isdigit() else 0, str(problem))


# --- entry points -----------------------------------------------------------------------------------------------
def validate(doc: Sourced, variant: str | None = None, path: Path | None = None,
             sets: Iterable[str] = ()) -> Loaded:
    """Validate a parsed document; `variant` None picks the first variant the scenario defines (if any).
    Raises `ScenarioError`."""
    problems = _shape_problems(doc)
    if problems and not isinstance(doc.data, dict):
        raise ScenarioError(problems)
    try:
        scenario = Scenario.model_validate(_without_unknown_actions(doc.data) if problems else doc.data)
    except pydantic.ValidationError as exc:
        seen = {p.path for p in problems}
        problems += [p for p in pydantic_problems(doc, exc) if p.path not in seen]
    if problems:
        raise ScenarioError(sorted(problems, key=_line_order))
    if variant is None and scenario.variants:
        variant = next(iter(scenario.variants))
    problems = _Checker(doc, scenario, variant).run()
    if problems:
        raise ScenarioError(problems)
    return Loaded(scenario, doc, path, variant, list(sets))


def load_text(text: str, source: str = "<text>", sets: Iterable[str] = (), variant: str | None = None) -> Loaded:
    """Load a scenario from YAML text. Raises `ScenarioError` / `UsageError`."""
    doc = load_yaml(text, source)
    sets = list(sets)
    for assignment in sets:
        set_path(doc, assignment)
    return validate(doc, variant, None, sets)


def load_scenario(path: Path | str, sets: Iterable[str] = (), variant: str | None = None) -> Loaded:
    """Load a scenario file. Raises `UsageError` when it cannot be read, `ScenarioError` when it is invalid."""
    path = Path(path)
    loaded = load_text(_read_text(path), str(path), sets, variant)
    loaded.path = path
    return loaded


def _read_text(path: Path) -> str:
    """The text of a scenario file, read only as far as `MAX_SCENARIO_BYTES` (so /dev/zero is refused too).
    Raises `UsageError` for a file that cannot be read, is larger, or is not UTF-8 text."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_SCENARIO_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read scenario {path}: {exc.strerror or exc}", hint=_READ_HINT) from None
    if len(data) > MAX_SCENARIO_BYTES:
        raise UsageError(f"{path}: larger than {MAX_SCENARIO_BYTES // 1024} KiB; a scenario is a short YAML text",
                         hint=_READ_HINT)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{path}:{line}: not a UTF-8 text file (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}); a scenario is a YAML text", hint=_READ_HINT) from None


def from_data(data: dict[str, Any], source: str, variant: str | None) -> Loaded:
    """A scenario from plain data (a saved schedule); locations name `source` only."""
    return validate(Sourced(data, {(): source}, source), variant)


__all__ = ["DEFAULT", "Loaded", "ScenarioError", "dotted", "from_data", "load_scenario", "load_text", "validate"]
