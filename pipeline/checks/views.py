"""Check `views`: at the end every node holds the same view, with every node in it, installed soon after the heal.

Nodes considered: every node that wrote a history, minus `ignore_nodes` and minus nodes a `kill` fault took
down (`detail.node` / `detail.nodes`) that did not start again. Convergence time is the install time of the last
node's final view minus the last heal (0 if installed before it); it must stay within `max_converge_s`.
"""
from __future__ import annotations

from typing import Any

from pyspark.sql import Window
from pyspark.sql import functions as F

from pipeline.checks.base import FAIL, OK, UNKNOWN, Check, CheckContext, Verdict, over
from pipeline.checks.registry import register_check


def _killed_nodes(ctx: CheckContext) -> set[str]:
    """Nodes taken down by a `kill` fault with no `node_start` after it."""
    kills: dict[str, float] = {}
    for period in ctx.tables.fault_periods:
        if period.kind != "kill" or not isinstance(period.detail, dict):
            continue
        targets = list(period.detail.get("nodes") or []) + ([period.detail["node"]] if "node" in period.detail else [])
        for node in targets:
            kills[str(node)] = max(kills.get(str(node), period.start_ts), period.start_ts)
    if not kills:
        return set()
    restarted = {e["node"] for e in ctx.tables.walked("node_start")
                 if e["node"] in kills and e["ts"] > kills[e["node"]]}
    return set(kills) - restarted


def check(ctx: CheckContext, params: dict[str, Any]) -> Verdict:
    if not ctx.tables.has_views:
        return Verdict(UNKNOWN, "no view events in the history", {})
    order = Window.partitionBy("node").orderBy(F.desc("ts"), F.desc("seq"))
    final_rows = (ctx.tables.views.withColumn("rank", F.row_number().over(order)).filter(F.col("rank") == 1)
                  .select("node", "ts", "view_id", "members").collect())
    final = {r["node"]: {"view_id": r["view_id"], "members": sorted(r["members"]), "installed_ts": r["ts"]}
             for r in final_rows}
    killed = _killed_nodes(ctx)
    considered = sorted(set(ctx.tables.nodes) - set(params["ignore_nodes"]) - killed)
    details: dict[str, Any] = {"final_views": final, "nodes": considered, "killed": sorted(killed)}
    if not considered:
        return Verdict(UNKNOWN, "no node left to compare views of", details)
    problems = []
    without = [n for n in considered if n not in final]
    if without:
        problems.append(f"no view installed at {', '.join(without)}")
    distinct = {(v["view_id"], tuple(v["members"])) for n, v in final.items() if n in considered}
    details["distinct_final_views"] = len(distinct)
    if len(distinct) > 1:
        shown = "; ".join(f"{n}: {final[n]['view_id']} {final[n]['members']}" for n in considered if n in final)
        problems.append(f"{len(distinct)} different final views ({shown})")
    elif distinct and params["require_all_members"]:
        members = set(next(iter(distinct))[1])
        absent = [n for n in considered if n not in members]
        if absent:
            problems.append(f"final view lacks {', '.join(absent)}")
    heals = ctx.tables.heal_times
    converge_s = None
    if heals and not problems:
        last_install = max(final[n]["installed_ts"] for n in considered)
        converge_s = max(0.0, last_install - heals[-1])
        details["converge_s"] = converge_s
        if over(converge_s, params["max_converge_s"]):
            problems.append(f"views converged {converge_s:.2f} s after the last heal (limit "
                            f"{params['max_converge_s']:g} s)")
    if problems:
        return Verdict(FAIL, "; ".join(problems), details)
    view = next(iter(distinct))
    after = f", {converge_s:.2f} s after the last heal" if converge_s is not None else ""
    return Verdict(OK, f"{len(considered)} nodes in view {view[0]}{after}", details)


CHECK = register_check(Check(
    name="views",
    summary="one final view holding every node, installed within a bound after the last heal",
    defaults={"max_converge_s": 30.0, "require_all_members": True, "ignore_nodes": []},
    func=check,
))
