"""The control API's routes (node/control.py), called as the sans-IO function they are, on a real runtime: the
token before anything else (also for a route that does not exist), 404 and 405 with `Allow`, a body that is not
a JSON object answered 400, and the answers of health, state and a workload; the HTTP server's counters in a
served node's `/state`; what starting a node imports. No Docker."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from node.control import make_handler, serve
from node.httpserver import Request
from test_runtime_receive import RUN, start_nodes, stop_nodes

AUTH = {"authorization": "Bearer t"}
REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(30)


def call(handle, method: str, path: str, body: bytes = b"", headers: dict[str, str] = AUTH) -> tuple[int, dict]:
    reply = handle(Request(method, path, headers, body))
    return reply.status, json.loads(reply.body)


async def test_the_routes_answer_after_the_token_and_name_what_they_refuse(tmp_path):
    runtimes = await start_nodes(tmp_path)
    try:
        handle = make_handler(runtimes["n1"], "t")
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "t"}):
            assert call(handle, "GET", "/state", headers=headers)[0] == 401
        assert call(handle, "GET", "/nowhere", headers={})[0] == 401  # the token first: no route is told
        status, body = call(handle, "GET", "/nowhere")
        assert status == 404 and "/health" in body["error"]
        reply = handle(Request("GET", "/quiesce", AUTH, b""))
        assert reply.status == 405 and dict(reply.headers) == {"Allow": "POST"}
        for bad in (b"", b"{not json", b"[1, 2]", b"{\"to\": \"\xff\"}"):
            status, body = call(handle, "POST", "/workload/unicast", bad)
            assert status == 400 and "JSON" in body["error"], bad
        status, body = call(handle, "POST", "/workload/ping", b'{"to": "n9"}')
        assert status == 400 and "'to' must be another member" in body["error"]
        status, body = call(handle, "POST", "/admin/close", b'{"peer": "n2", "extra": 1}')
        assert status == 400 and "the one field is 'peer'" in body["error"]
        status, body = call(handle, "GET", "/health")
        assert status == 200 and (body["ok"], body["node"], body["run"]) == (True, "n1", RUN)
        status, body = call(handle, "POST", "/workload/unicast", b'{"to": "n2", "count": 3, "size": 10, "rate": 0}')
        assert status == 202
        workload_id = body["workload_id"]
        status, body = call(handle, "GET", "/state")
        assert status == 200 and body["node"] == "n1" and [w["id"] for w in body["workloads"]] == [workload_id]
        status, body = call(handle, "POST", "/workload/multicast", b'{"count": 1}')
        assert status == 400 and "no multicast layer" in body["error"]
    finally:
        await stop_nodes(runtimes)


def test_starting_a_node_imports_neither_aiohttp_nor_prometheus_client():
    """What a node imports before it serves (issue 34: fifty nodes import at once in `splitlab up -n 50`):
    prometheus_client waits for the first scrape of `/metrics`, and the HTTP server is h11's."""
    code = ("import sys, node.__main__, jgnode.__main__; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'aiohttp', 'prometheus_client', 'h11'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "['h11']"


async def test_a_served_nodes_state_shows_what_its_http_server_counted(tmp_path):
    runtimes = await start_nodes(tmp_path)
    server = await serve(runtimes["n1"], "t", "127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"NOT HTTP\r\n\r\n")  # refused before the routes: counted, not lost
        assert (await reader.read()).startswith(b"HTTP/1.1 400 ")
        url = f"http://127.0.0.1:{server.port}/state"
        state = (await asyncio.to_thread(requests.get, url, headers=AUTH, timeout=5)).json()
    finally:
        await server.close()
        await stop_nodes(runtimes)
    assert state["node"] == "n1" and state["control_api"] == {
        "requests": 1, "refused_connections": 0, "bad_requests": 1, "idle_closed": 0}
