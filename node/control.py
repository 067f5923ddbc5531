"""The node's control API: HTTP+JSON on the control network only, every request carrying the run's token.

Routes (all need `Authorization: Bearer <token>`):
- `GET /health`: liveness of the process (`{"ok": true, "node", "run", "boot", "rss_bytes"}`; `rss_bytes` is the
  process's resident set size from /proc/self/statm, null where that file does not exist);
- `GET /state`: the node's state: members, the current view, the peers it hears and when it last heard each,
  every layer's state (membership: view, suspects; multicast: the send window with acks and blocked time, every
  receive window's low / highest delivered / highest received), counters, workloads, and what the HTTP server
  counted (`control_api`: requests, refused connections, bad requests, idle connections closed);
- `POST /workload/ping` `{"to": "n2", "count": 10, "interval_ms": 10}`: start the ping workload (202);
- `POST /workload/unicast` `{"to": "n2", "count": 1000, "size": 100, "rate": 500}`: reliable unicast messages
  (rate in messages/s, 0 = unpaced), each recorded as `app_send`; answers 202 with the workload id, whose
  progress is in `/state` under `workloads`;
- `POST /workload/multicast` `{"count": 500, "size": 100, "rate": 200}`: reliable multicast to the current view
  (`app_send` with `to` "*"); a full send window makes the workload wait (its `blocked` / `blocked_ms` in
  `/state`), never the node; answers 202 with the workload id (400 when the node runs no multicast layer);
- `POST /admin/close`, `/admin/remove`, `/admin/remove_receive`, `/admin/sync` `{"peer": "n1"}`: the unicast
  layer's admin operations (close both connections to the peer: CLOSING in unicast3; remove both at once; drop
  the receive window; the SYNC handshake of unicast3).
- `POST /quiesce`: write `node_stop` (reason "quiesce") and end the history now; the node goes on, recording
  nothing, until SIGTERM (which then writes nothing more). The controller quiesces a run's nodes at once before
  it stops them one at a time (chaos.cluster.lifecycle), so that no node records the others' stops;
- `GET /metrics`: the same state in the Prometheus text format (node/metrics.py), read at scrape time; a
  scraper sends the token as a bearer token (Prometheus: `authorization: {credentials_file: runs/<id>/token}`).

Bad requests get 400 with `{"error": "..."}`; a missing or wrong token gets 401 (before anything else, also
for a route that does not exist: 404, or 405 with `Allow`).

The routes are sans-IO: `make_handler` gives a function from a `node.httpserver.Request` to its `Reply`, which
`node.httpserver.HttpServer` serves (and the tests call directly).
"""
from __future__ import annotations

import hmac
import json
import os
from typing import Any, Mapping, Protocol

from node.errors import UsageError
from node.httpserver import Handler, HttpServer, Reply, Request, new_counters
from node.workload import Workload, WorkloadSpec

ADMIN_OPS = ("close", "remove", "remove_receive", "sync")


class ControlTarget(Protocol):
    """What the control API serves: one node implementation of the node contract (NODE_CONTRACT.md). splitlab's
    own node (`node.runtime.NodeRuntime`) and the real JGroups node (`jgnode.runtime.JgRuntime`) are two."""

    name: str
    run_id: str
    members: tuple[str, ...]
    boot: int

    def state(self) -> dict[str, Any]: ...

    def max_payload_bytes(self, kind: str) -> int | None:
        """The largest payload a workload of `kind` (unicast, multicast) may send; None: the node has no such
        layer (its workload posts answer 400)."""

    def start_workload(self, spec: WorkloadSpec) -> Workload: ...

    def quiesce(self) -> None:
        """Write `node_stop` (reason "quiesce") and end the history (`HistoryWriter.end`); the node goes on,
        recording nothing, until SIGTERM stops it."""

    def request(self, layer: str, op: str, args: dict[str, Any]) -> None:
        """A layer's operation (the ping workload, the admin verbs); raises `UsageError` for one the node does
        not offer."""


def rss_bytes() -> int | None:
    """This process's resident set size in bytes (/proc/self/statm), or None where /proc is not there."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            resident_pages = int(fh.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def _error(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    return Reply.json({"error": message}, status, headers)


def _body(request: Request) -> dict[str, Any]:
    try:
        data = json.loads(request.body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError("request body must be a JSON object")
    return data


def make_handler(runtime: ControlTarget, token: str, served: Mapping[str, int] | None = None) -> Handler:
    """The control API of `runtime`, guarded by `token`: a function from a request to its reply. `served`: the
    HTTP server's counters, shown in `/state` under `control_api`."""
    expected = f"Bearer {token}".encode()
    scraped: list[Any] = []  # the metrics registry, made at the first scrape

    def health(request: Request) -> Reply:
        return Reply.json({"ok": True, "node": runtime.name, "run": runtime.run_id, "boot": runtime.boot,
                           "rss_bytes": rss_bytes()})

    def state(request: Request) -> Reply:
        return Reply.json(runtime.state() if served is None else {**runtime.state(), "control_api": dict(served)})

    def metrics_text(request: Request) -> Reply:
        # Imported at the first scrape, not at start: prometheus_client is 0.10-0.13 s of the node's import in the
        # image (a quarter of it, paid by fifty nodes at once in `splitlab up -n 50`), and most runs never scrape.
        from node import metrics
        if not scraped:
            scraped.append(metrics.registry(runtime.state))
        body_bytes, content_type = metrics.exposition(scraped[0])
        return Reply(200, body_bytes, content_type)

    def ping(request: Request) -> Reply:
        runtime.request("ping", "ping", _body(request))
        return Reply.json({"accepted": True}, 202)

    def workload(kind: str) -> Handler:
        def handler(request: Request) -> Reply:
            max_bytes = runtime.max_payload_bytes(kind)
            if max_bytes is None:
                raise UsageError(f"this node runs no {kind} layer",
                                 hint="start it with SPLITLAB_MULTICAST=nakack4" if kind == "multicast" else None)
            spec = WorkloadSpec.parse(kind, kind, _body(request), runtime.members, runtime.name, max_bytes - 64)
            item = runtime.start_workload(spec)
            return Reply.json({"accepted": True, "workload_id": item.workload_id}, 202)
        return handler

    def admin(op: str) -> Handler:
        def handler(request: Request) -> Reply:
            args = _body(request)
            if set(args) - {"peer"}:
                raise UsageError(f"admin {op}: the one field is 'peer', got {sorted(args)}")
            runtime.request("unicast", op, args)
            return Reply.json({"done": True, "op": op, "peer": args.get("peer")})
        return handler

    def quiesce(request: Request) -> Reply:
        runtime.quiesce()
        return Reply.json({"quiesced": True, "node": runtime.name})

    routes: dict[str, dict[str, Handler]] = {
        "/health": {"GET": health}, "/state": {"GET": state}, "/metrics": {"GET": metrics_text},
        "/workload/ping": {"POST": ping}, "/quiesce": {"POST": quiesce},
        **{f"/workload/{kind}": {"POST": workload(kind)} for kind in ("unicast", "multicast")},
        **{f"/admin/{op}": {"POST": admin(op)} for op in ADMIN_OPS}}

    def handle(request: Request) -> Reply:
        if not hmac.compare_digest(request.header("Authorization").encode(), expected):
            return _error(401, "missing or wrong token: send 'Authorization: Bearer <run token>'")
        methods = routes.get(request.path)
        if methods is None:
            return _error(404, f"no route {request.path}; the routes: {', '.join(sorted(routes))}")
        route = methods.get(request.method)
        if route is None:
            return _error(405, f"{request.method} {request.path}: use {', '.join(methods)}",
                          (("Allow", ", ".join(methods)),))
        try:
            return route(request)
        except UsageError as exc:
            return _error(400, str(exc))
    return handle


async def serve(runtime: ControlTarget, token: str, host: str, port: int) -> HttpServer:
    """The control API of `runtime` served on `host`:`port` (both node kinds' entry points); `close()` it."""
    counters = new_counters()
    server = HttpServer(make_handler(runtime, token, counters), counters=counters)
    await server.start(host, port)
    return server
