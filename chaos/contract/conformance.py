"""`splitlab node check IMAGE`: start two nodes of an image on real containers and say, item by item, what of the
node contract (NODE_CONTRACT.md) it keeps and what it lacks.

The items are the contract's, in its order: the environment (both nodes start from the contract's variables and
hear each other), the control API (the token guard, `/health`, `/state` with view, liveness and workloads, the
two workload posts, a 400 for a bad request; the admin verbs are optional: a 400 refusal keeps the contract), and
the history (every line valid by the pipeline's own rules, one writer per file with `seq` from 1, `node_start`
and `node_stop`, `peer_heard`, `view`, an `app_send` for every message a workload sent and an `app_deliver` at
its receiver; optional: `POST /quiesce`, which the run's stop sends first, ended each history at its
`node_stop`). The protocol events a node writes beyond the minimum are listed, with the checks they feed.
Whatever happens, the run is removed at the end.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import requests

from chaos.cluster import images, kinds, lifecycle
from chaos.cluster.model import Cluster
from node.control import ADMIN_OPS
from node.errors import EnvironmentProblem, HistoryError
from node.history import CONTRACT_EVENTS, expand
from pipeline.schema import event_problem

Log = Callable[[str], None]
UNICASTS = 20
MULTICASTS = 10
SETTLE_S = 30.0  # how long a view, a workload or a delivery may take
QUIESCE_ITEM = ("POST /quiesce: node_stop (reason quiesce) is the last event, nothing of the stop that followed "
                "(optional: without it, a run's nodes stop at once)")
# Protocol events and the checks they feed (pipeline/SCHEMA.md).
FEEDS = {"data_tx": "sequence diagram, resends_without_request", "data_rx": "delivery's missing fates, diagram",
         "xmit_req_tx": "retransmission, endless_retransmission", "xmit_req_rx": "retransmission, stale_link",
         "resync_tx": "retransmission (sync traffic), sync_handshakes", "stable_tx": "diagram",
         "ack_tx": "diagram", "suspect": "views (why)", "window_full": "blocked",
         "bcast_state_tx": "sync_handshakes"}


@dataclass(frozen=True)
class Item:
    """One item of the contract: `status` is `keeps`, `lacks` (a required item failed), `optional` (an optional
    item the node does not offer) or `not reached` (an earlier failure stopped the check)."""

    section: str
    name: str
    status: str
    detail: str

    @property
    def failed(self) -> bool:
        return self.status in ("lacks", "not reached")


class _Checker:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.items: list[Item] = []

    def add(self, section: str, name: str, ok: bool, detail: str, optional: bool = False) -> bool:
        self.items.append(Item(section, name, "keeps" if ok else ("optional" if optional else "lacks"), detail))
        return ok

    def probe(self, section: str, name: str, probe: Callable[[], tuple[bool, str]]) -> bool:
        """One item from `probe() -> (kept, detail)`; an unreachable node or an answer of the wrong shape is
        the item's `lacks`, with what went wrong."""
        try:
            ok, detail = probe()
        except requests.RequestException as exc:
            ok, detail = False, f"no answer: {type(exc).__name__}: {str(exc)[:160]}"
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not JSON, or JSON of another shape
            ok, detail = False, f"an answer of the wrong shape: {type(exc).__name__}: {str(exc)[:160]}"
        return self.add(section, name, ok, detail)

    def call(self, method: str, node: str, path: str, body: dict | None = None,
             token: str | None = "") -> requests.Response:
        headers = {} if token is None else {"Authorization": f"Bearer {token or self.cluster.token}"}
        url = self.cluster.node(node).control_url + path
        return requests.request(method, url, json=body, headers=headers, timeout=10)

    def json(self, method: str, node: str, path: str, body: dict | None = None) -> Any:
        return self.call(method, node, path, body).json()


def _wait(what: Callable[[], Any], timeout_s: float = SETTLE_S) -> Any:
    """`what()` once it is truthy, else its last value after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = what()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def _api(c: _Checker) -> tuple[Any, Any]:
    """The control API items; returns the ids of the unicast and multicast workloads it started (None: refused)."""
    a, b = c.cluster.names[:2]
    api = "control API"

    def token() -> tuple[bool, str]:
        code = c.call("GET", a, "/health", token=None).status_code
        return code == 401, f"got {code}"
    c.probe(api, "a request without the token gets 401", token)

    def health() -> tuple[bool, str]:
        got = c.json("GET", a, "/health")
        return (got.get("ok") is True and got.get("node") == a and got.get("run") == c.cluster.run_id
                and isinstance(got.get("boot"), int)), json.dumps(got)[:200]
    c.probe(api, "GET /health: ok, node, run, boot", health)

    def state() -> tuple[bool, str]:
        got = c.json("GET", a, "/state")
        live = got["layers"]["liveness"]
        return (got.get("node") == a and isinstance(got.get("members"), list) and "view" in got
                and isinstance(live, dict) and all(isinstance(v, dict) and "heard" in v for v in live.values())
                and isinstance(got.get("workloads"), list)), ", ".join(sorted(got))
    c.probe(api, "GET /state: node, run, boot, members, view, layers.liveness, workloads", state)

    def one_view() -> tuple[bool, str]:
        def same() -> bool:
            views = [c.json("GET", n, "/state").get("view") for n in (a, b)]
            return all(v and sorted(v["members"]) == sorted((a, b)) for v in views) and views[0] == views[1]
        return bool(_wait(same)), "within 30 s"
    c.probe(api, "both nodes report one view of both members in /state", one_view)

    started: dict[str, Any] = {}

    def workload(kind: str, body: dict, refusal_ok: bool) -> Callable[[], tuple[bool, str]]:
        def post() -> tuple[bool, str]:
            resp = c.call("POST", a, f"/workload/{kind}", body)
            if resp.status_code == 202:
                started[kind] = resp.json()["workload_id"]
            return (kind in started or refusal_ok and resp.status_code == 400), \
                f"got {resp.status_code} {resp.text[:120]}"
        return post
    c.probe(api, "POST /workload/unicast answers 202 with a workload_id",
            workload("unicast", {"to": b, "count": UNICASTS, "size": 100, "rate": 200}, False))
    c.probe(api, "POST /workload/multicast answers 202 (400: no multicast layer)",
            workload("multicast", {"count": MULTICASTS, "size": 100, "rate": 200}, True))

    def bad_request() -> tuple[bool, str]:
        resp = c.call("POST", a, "/workload/unicast", {"to": b, "count": "many"})
        return resp.status_code == 400 and "error" in resp.json(), f"got {resp.status_code}"
    c.probe(api, "a bad workload request gets 400 with an error", bad_request)

    def admin() -> tuple[bool, str]:
        answers = {op: c.call("POST", a, f"/admin/{op}", {"peer": b}).status_code for op in ADMIN_OPS}
        offered = [op for op, code in answers.items() if code == 200]
        return (all(code in (200, 400) for code in answers.values()),
                f"offered: {', '.join(offered) or 'none'}; answers {answers}")
    c.probe(api, "admin verbs: 200, or refused with 400 (optional)", admin)

    for kind, count in (("unicast", UNICASTS), ("multicast", MULTICASTS)):
        if kind in started:
            def finished(workload_id: Any = started[kind], count: int = count) -> tuple[bool, str]:
                def done() -> bool:
                    found = [w for w in c.json("GET", a, "/state")["workloads"] if w.get("id") == workload_id]
                    return bool(found) and found[0].get("done") is True and found[0].get("sent") == count
                return bool(_wait(done)), "within 30 s"
            c.probe(api, f"the {kind} workload shows in /state.workloads, done with sent={count}", finished)
    return started.get("unicast"), started.get("multicast")


def _history(c: _Checker, multicast: bool) -> None:
    a, b = c.cluster.names[:2]
    events: dict[str, list[dict]] = {}
    for node in (a, b):
        path = Path(c.cluster.run_dir) / "events" / f"{node}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        bad, seqs, wrong_writer = [], [], 0
        parsed = []
        for number, line in enumerate(lines, 1):
            try:
                line_events = expand(json.loads(line))
            except json.JSONDecodeError:
                bad.append(f"line {number}: not JSON")
                continue
            except HistoryError as exc:  # a run line (node.history) whose rows are bad
                bad.append(f"line {number}: {exc.message}")
                continue
            for event in line_events:
                problem = event_problem(event)
                if problem:
                    bad.append(f"line {number}: {problem}")
                    continue
                parsed.append(event)
                seqs.append(event["seq"])
                wrong_writer += event["run"] != c.cluster.run_id or event["node"] != node
        seqs.sort()  # the rows of a node's runs interleave (node.history)
        events[node] = parsed
        c.add("history", f"events/{node}.jsonl: every line valid (pipeline/SCHEMA.md)", bool(lines) and not bad,
              f"{len(lines)} lines" + (f"; {len(bad)} bad, first: {bad[0]}" if bad else ""))
        c.add("history", f"events/{node}.jsonl: one writer (run, node), seq 1, 2, 3, ...",
              bool(seqs) and not wrong_writer and seqs == list(range(1, len(seqs) + 1)),
              f"{wrong_writer} line(s) of another writer" if wrong_writer else f"seq 1..{len(seqs)}")
    types = {n: {e["type"] for e in evs} for n, evs in events.items()}
    for needed in ("node_start", "node_stop", "peer_heard", "view"):
        c.add("history", f"{needed} at both nodes", all(needed in t for t in types.values()),
              "; ".join(f"{n}: {'yes' if needed in t else 'no'}" for n, t in types.items()))
    sent = {e["msg_id"]: e for e in events[a] if e["type"] == "app_send"}
    got = {e["msg_id"]: e for e in events[b] if e["type"] == "app_deliver"}
    uni = [m for m, e in sent.items() if e["kind"] == "unicast"]
    c.add("history", f"app_send for every unicast sent ({UNICASTS}) and app_deliver of each at {b}, from {a}",
          len(uni) == UNICASTS and all(m in got and got[m]["from"] == a for m in uni),
          f"{len(uni)} sent, {sum(m in got for m in uni)} delivered")
    if multicast:
        mc = [m for m, e in sent.items() if e["kind"] == "multicast"]
        c.add("history", f"app_send for every multicast ({MULTICASTS}), app_deliver of each at {b}",
              len(mc) == MULTICASTS and all(m in got for m in mc), f"{len(mc)} sent, {sum(m in got for m in mc)} "
                                                                   f"delivered")

    def quiesced(evs: list[dict]) -> str:
        stops = [e for e in evs if e["type"] == "node_stop"]
        last = max(evs, key=lambda e: e["seq"]) if evs else None
        return ("yes" if len(stops) == 1 and stops[0] is last and stops[0].get("reason") == "quiesce"
                else f"no ({len(stops)} node_stop, reason {stops[-1].get('reason') if stops else None})")
    answers = {n: quiesced(evs) for n, evs in events.items()}
    c.add("history", QUIESCE_ITEM, all(a == "yes" for a in answers.values()),
          "; ".join(f"{n}: {a}" for n, a in answers.items()), optional=True)
    beyond = sorted(set().union(*types.values()) - CONTRACT_EVENTS)
    c.add("history", "protocol events beyond the minimum (optional: the checks they feed answer 'unknown' without)",
          bool(beyond), ", ".join(f"{t} ({FEEDS[t]})" if t in FEEDS else t for t in beyond) or "none",
          optional=True)


def check(image: str, log: Log) -> list[Item]:
    """Start two nodes of `image`, check every item, remove the run. Raises EnvironmentProblem for a missing
    image."""
    known = kinds.of_image(image)
    if not images.image_exists(image):
        raise EnvironmentProblem(f"image {image} does not exist on this engine", hint="see 'docker images'")
    try:
        cluster = lifecycle.up(2, log=log, kind=known.name if known else kinds.DEFAULT_KIND, image=image,
                               wait_timeout_s=90)
    except EnvironmentProblem as exc:
        first = exc.message.splitlines()[0]
        return [Item("environment", "two nodes start from the contract's variables and hear each other", "lacks",
                     first), Item("control API", "(the rest)", "not reached", "the nodes did not come up")]
    c = _Checker(cluster)
    c.add("environment", "two nodes start from the contract's variables and hear each other", True,
          f"run {cluster.run_id}")
    try:
        _, multi = _api(c)
        lifecycle.stop(cluster.run_id, log)
        _history(c, multi is not None)
    finally:
        lifecycle.down(cluster.run_id, log)
    return c.items
