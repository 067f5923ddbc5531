"""The node's control API: HTTP+JSON on the control network only, every request carrying the run's token.

Routes (all need `Authorization: Bearer <token>`):
- `GET /health`: liveness of the process (`{"ok": true, "node", "run", "boot", "rss_bytes"}`; `rss_bytes` is the
  process's resident set size from /proc/self/statm, null where that file does not exist);
- `GET /state`: the node's state: members, the current view, the peers it hears and when it last heard each,
  every layer's state (membership: view, suspects; multicast: the send window with acks and blocked time, every
  receive window's low / highest delivered / highest received), counters, workloads;
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

Bad requests get 400 with `{"error": "..."}`; a missing or wrong token gets 401.
"""
from __future__ import annotations

import hmac
import json
import os
from typing import Any, Awaitable, Callable, Protocol

from aiohttp import web

from node import metrics
from node.errors import UsageError
from node.workload import Workload, WorkloadSpec

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
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


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def make_app(runtime: ControlTarget, token: str) -> web.Application:
    """The aiohttp application serving `runtime`'s control API, guarded by `token`."""
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return _error(401, "missing or wrong token: send 'Authorization: Bearer <run token>'")
        try:
            return await handler(request)
        except UsageError as exc:
            return _error(400, str(exc))

    async def body(request: web.Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except json.JSONDecodeError as exc:
            raise UsageError(f"request body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise UsageError("request body must be a JSON object")
        return data

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "node": runtime.name, "run": runtime.run_id,
                                  "boot": runtime.boot, "rss_bytes": rss_bytes()})

    async def state(request: web.Request) -> web.Response:
        return web.json_response(runtime.state())

    scraped = metrics.registry(runtime.state)

    async def metrics_text(request: web.Request) -> web.Response:
        body_bytes, content_type = metrics.exposition(scraped)
        return web.Response(body=body_bytes, headers={"Content-Type": content_type})

    async def ping(request: web.Request) -> web.Response:
        runtime.request("ping", "ping", await body(request))
        return web.json_response({"accepted": True}, status=202)

    def workload(kind: str) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            max_bytes = runtime.max_payload_bytes(kind)
            if max_bytes is None:
                raise UsageError(f"this node runs no {kind} layer",
                                 hint="start it with SPLITLAB_MULTICAST=nakack4" if kind == "multicast" else None)
            spec = WorkloadSpec.parse(kind, kind, await body(request), runtime.members, runtime.name, max_bytes - 64)
            item = runtime.start_workload(spec)
            return web.json_response({"accepted": True, "workload_id": item.workload_id}, status=202)
        return handler

    def admin(op: str) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            args = await body(request)
            if set(args) - {"peer"}:
                raise UsageError(f"admin {op}: the one field is 'peer', got {sorted(args)}")
            runtime.request("unicast", op, args)
            return web.json_response({"done": True, "op": op, "peer": args.get("peer")})
        return handler

    async def quiesce(request: web.Request) -> web.Response:
        runtime.quiesce()
        return web.json_response({"quiesced": True, "node": runtime.name})

    app = web.Application(middlewares=[guard])
    app.router.add_get("/health", health)
    app.router.add_get("/state", state)
    app.router.add_get("/metrics", metrics_text)
    app.router.add_post("/workload/ping", ping)
    app.router.add_post("/quiesce", quiesce)
    for kind in ("unicast", "multicast"):
        app.router.add_post(f"/workload/{kind}", workload(kind))
    for op in ADMIN_OPS:
        app.router.add_post(f"/admin/{op}", admin(op))
    return app
