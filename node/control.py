"""The node's control API: HTTP+JSON on the control network only, every request carrying the run's token.

Routes (all need `Authorization: Bearer <token>`):
- `GET /health`: liveness of the process (`{"ok": true, "node", "run", "boot"}`);
- `GET /state`: the node's state: members, the peers it hears and when it last heard each, every layer's state,
  counters;
- `POST /workload/ping` `{"to": "n2", "count": 10, "interval_ms": 10}`: start the ping workload (202).

Bad requests get 400 with `{"error": "..."}`; a missing or wrong token gets 401.
"""
from __future__ import annotations

import hmac
import json
from typing import Any, Awaitable, Callable

from aiohttp import web

from node.errors import UsageError
from node.runtime import NodeRuntime

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def make_app(runtime: NodeRuntime, token: str) -> web.Application:
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
        return web.json_response({"ok": True, "node": runtime.config.name, "run": runtime.config.run_id,
                                  "boot": runtime.boot})

    async def state(request: web.Request) -> web.Response:
        return web.json_response(runtime.state())

    async def ping(request: web.Request) -> web.Response:
        runtime.request("ping", "ping", await body(request))
        return web.json_response({"accepted": True}, status=202)

    app = web.Application(middlewares=[guard])
    app.router.add_get("/health", health)
    app.router.add_get("/state", state)
    app.router.add_post("/workload/ping", ping)
    return app
