"""Expectations: what a scenario says each check must answer, and the verdict of a run against them.

A scenario's `expect` names pipeline checks (and the harness's own `workloads` check) with a status and
optional check parameters. The parameters go to the analysis (`check_params`); the statuses are compared with
the summary (`judge`, by `pipeline.verdict`, which also puts the verdict into the run's summary and report). With
no expectation for the variant, every check must pass (`ok`).
"""
from __future__ import annotations

from typing import Any, Mapping

from pipeline.summary import Summary
from pipeline.verdict import Outcome, Verdict, judge as judge_statuses

WORKLOADS = "workloads"
UNBLOCKED = "unblocked"
HARNESS = {WORKLOADS: "after the final heal and the settling time, every workload of the timeline handed all its "
                      "messages to the protocol",
           UNBLOCKED: "at the end of the timeline (before the final heal), no workload waits on a full send window"}


def check_params(expectations: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The analysis parameters the expectations set: {check: {param: value}} (statuses left out)."""
    return {check: {k: v for k, v in item.items() if k != "status"}
            for check, item in expectations.items() if check not in HARNESS and len(item) > 1}


def workloads_check(started: Mapping[str, list[dict[str, Any]]], states: Mapping[str, dict[str, Any] | None]
                    ) -> tuple[str, str, dict[str, Any]]:
    """`ok` when every workload the timeline started finished with all its messages handed to the protocol.

    `started`: node -> [{id, boot, count}]; `states`: node -> its final /state (None: not reachable). A workload
    whose node restarted since (another boot) went with the process and is listed apart, not failed.
    """
    unfinished, lost, unknown = [], [], []
    for node, items in started.items():
        state = states.get(node)
        for item in items:
            if state is None:
                unknown.append(f"{node}#{item['id']}")
                continue
            if state.get("boot") != item["boot"]:
                lost.append(f"{node}#{item['id']}")
                continue
            found = next((w for w in state.get("workloads", []) if w["id"] == item["id"]), None)
            if found is None or not found["done"] or found["sent"] < item["count"] or found.get("error"):
                sent = "?" if found is None else found["sent"]
                blocked = " (blocked)" if found is not None and found.get("blocked") else ""
                error = f" ({found['error']})" if found is not None and found.get("error") else ""
                unfinished.append(f"{node}#{item['id']} sent {sent}/{item['count']}{blocked}{error}")
    details = {"unfinished": unfinished, "lost_with_restart": lost, "unreachable": unknown}
    total = sum(len(v) for v in started.values())
    if unfinished:
        return "fail", f"{len(unfinished)} of {total} workload(s) did not finish: {'; '.join(unfinished[:3])}", details
    if unknown:
        return "unknown", f"node(s) not reachable at the end: {', '.join(unknown)}", details
    lost_note = f" ({len(lost)} lost with a restarted node)" if lost else ""
    return "ok", f"{total - len(lost)} workload(s) finished{lost_note}", details


def unblocked_check(started: Mapping[str, list[dict[str, Any]]], states: Mapping[str, dict[str, Any] | None]
                    ) -> tuple[str, str, dict[str, Any]]:
    """`ok` when, in `states` (taken at the end of the timeline), no workload of the timeline is blocked on a
    full send window; `unknown` when a sender could not be asked."""
    blocked, unknown = [], []
    for node, items in started.items():
        state = states.get(node)
        if state is None:
            unknown.append(node)
            continue
        ids = {item["id"] for item in items}
        for w in state.get("workloads", []):
            if w["id"] in ids and w.get("blocked"):
                blocked.append(f"{node}#{w['id']} blocked {w.get('blocked_ms', 0) / 1000:.1f} s at {w['sent']}/"
                               f"{w['count']}")
    details = {"blocked": blocked, "unreachable": unknown}
    if blocked:
        return "fail", f"{len(blocked)} workload(s) blocked at the end of the timeline: {'; '.join(blocked[:3])}", \
            details
    if unknown:
        return "unknown", f"sender(s) not reachable at the end of the timeline: {', '.join(unknown)}", details
    return "ok", "no workload blocked at the end of the timeline", details


def judge(expectations: Mapping[str, Mapping[str, Any]], summary: Summary | None,
          harness: Mapping[str, tuple[str, str, dict[str, Any]]]) -> Verdict:
    """Compare the expectations with the analysis `summary` (None: it failed) and the harness checks."""
    actual: dict[str, tuple[str, str]] = {name: (status, reason) for name, (status, reason, _) in harness.items()}
    if summary is not None:
        actual.update({name: (r.status, r.reason) for name, r in summary.checks.items()})
    return judge_statuses(expected_statuses(expectations), actual, analysed=summary is not None)


def expected_statuses(expectations: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """{check: the status it must answer} of a scenario's expectations."""
    return {name: item["status"] for name, item in expectations.items()}


__all__ = ["HARNESS", "Outcome", "UNBLOCKED", "Verdict", "WORKLOADS", "check_params", "expected_statuses",
           "judge", "unblocked_check", "workloads_check"]
