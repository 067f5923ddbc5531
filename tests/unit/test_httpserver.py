"""The control API's HTTP server (node/httpserver.py) on loopback, spoken to with raw bytes: keep-alive and
pipelining, what it refuses (a malformed request, a body over the limit, one connection too many) and how
(an answer, then the connection closed, each counted), idle and half-sent connections closed, `Expect:
100-continue`, and a handler's bug answered 500 and handed to the loop. No Docker."""
from __future__ import annotations

import asyncio
import json

import pytest

from node.httpserver import HttpServer, Reply, Request

pytestmark = pytest.mark.timeout(30)


def echo(request: Request) -> Reply:
    if request.path == "/boom":
        raise RuntimeError("a bug in a route")
    return Reply.json({"method": request.method, "path": request.path, "body": request.body.decode(),
                       "auth": request.header("Authorization")})


async def started(**kwargs) -> HttpServer:
    server = HttpServer(echo, **kwargs)
    await server.start("127.0.0.1", 0)
    return server


async def connect(server: HttpServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response off `reader`: status, headers (lower-case names), body."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(head[0].split()[1]), headers, body


async def closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(), 5) == b""


def get(path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: n1\r\n{extra}\r\n".encode()


async def test_pipelined_requests_on_one_connection_are_answered_in_order_and_it_stays_open():
    server = await started()
    try:
        reader, writer = await connect(server)
        body = b'{"to": "n2"}'
        writer.write(get("/one") + b"POST /two?x=1 HTTP/1.1\r\nHost: n1\r\nAuthorization: Bearer t\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body) + get("/three"))
        answers = [await answer(reader) for _ in range(3)]
        assert [(status, json.loads(body)["path"]) for status, _, body in answers] == [
            (200, "/one"), (200, "/two"), (200, "/three")]
        assert json.loads(answers[1][2]) == {"method": "POST", "path": "/two", "body": '{"to": "n2"}',
                                             "auth": "Bearer t"}
        writer.write(get("/four"))  # still open after three
        assert (await answer(reader))[0] == 200
        writer.close()
    finally:
        await server.close()
    assert server.counters["requests"] == 4 and server.counters["bad_requests"] == 0


async def test_a_chunked_body_is_read_whole():
    server = await started()
    try:
        reader, writer = await connect(server)
        writer.write(b"POST /c HTTP/1.1\r\nHost: n1\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        status, _, body = await answer(reader)
        assert status == 200 and json.loads(body)["body"] == "abcde"
    finally:
        await server.close()


@pytest.mark.parametrize("raw, status", [
    (b"NOT HTTP AT ALL\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: n1\r\nContent-Length: x\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\n" + b"X-Long: " + b"a" * 20_000 + b"\r\n\r\n", 400),  # a head over h11's 16 KiB
])
async def test_a_request_that_does_not_parse_is_answered_with_its_status_and_the_connection_closed(raw, status):
    server = await started()
    try:
        reader, writer = await connect(server)
        writer.write(raw)
        got, headers, body = await answer(reader)
        assert got == status and "bad HTTP request" in json.loads(body)["error"]
        assert await closed(reader)
    finally:
        await server.close()
    assert server.counters["bad_requests"] == 1 and server.counters["requests"] == 0


@pytest.mark.parametrize("raw", [
    b"POST /big HTTP/1.1\r\nHost: n1\r\nContent-Length: 2000\r\n\r\n",  # refused on its length alone
    b"POST /big HTTP/1.1\r\nHost: n1\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"300\r\n" + b"x" * 768 + b"\r\n") * 2,
])
async def test_a_body_over_the_limit_is_answered_413_without_reaching_the_handler(raw):
    server = await started(max_body_bytes=1000)
    try:
        reader, writer = await connect(server)
        writer.write(raw)
        status, headers, body = await answer(reader)
        assert status == 413 and headers["connection"] == "close" and "over 1000 bytes" in json.loads(body)["error"]
        assert await closed(reader)
    finally:
        await server.close()
    assert server.counters["requests"] == 0 and server.counters["bad_requests"] == 1


async def test_a_connection_that_sends_nothing_or_half_a_request_is_closed_after_the_idle_timeout():
    server = await started(idle_timeout_s=0.2)
    try:
        silent = await connect(server)
        half = await connect(server)
        half[1].write(b"GET /slow HTTP/1.1\r\nHost: ")
        assert await closed(silent[0]) and await closed(half[0])
    finally:
        await server.close()
    assert server.counters["idle_closed"] == 2


async def test_connections_beyond_the_cap_are_closed_at_once_and_counted_and_a_freed_place_is_taken_again():
    server = await started(max_connections=2)
    try:
        first, second = await connect(server), await connect(server)
        for reader, writer in (first, second):
            writer.write(get("/x"))
            assert (await answer(reader))[0] == 200  # both held by the server
        third = await connect(server)
        assert await closed(third[0])
        first[1].close()
        await asyncio.sleep(0.1)
        reader, writer = await connect(server)
        writer.write(get("/y"))
        assert (await answer(reader))[0] == 200
    finally:
        await server.close()
    assert server.counters["refused_connections"] == 1


async def test_expect_100_continue_is_answered_before_the_body_is_sent():
    server = await started()
    try:
        reader, writer = await connect(server)
        writer.write(b"POST /e HTTP/1.1\r\nHost: n1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100 ")
        writer.write(b"ok")
        status, _, body = await answer(reader)
        assert status == 200 and json.loads(body)["body"] == "ok"
    finally:
        await server.close()


async def test_a_handlers_bug_is_answered_500_and_handed_to_the_loops_exception_handler():
    loop = asyncio.get_running_loop()
    handed: list[dict] = []
    loop.set_exception_handler(lambda _, context: handed.append(context))
    server = await started()
    try:
        reader, writer = await connect(server)
        writer.write(get("/boom"))
        status, _, body = await answer(reader)
        assert status == 500 and "a bug in a route" in json.loads(body)["error"]
        assert await closed(reader)
    finally:
        await server.close()
        loop.set_exception_handler(None)
    assert [str(context["exception"]) for context in handed] == ["a bug in a route"]


async def test_close_ends_the_connections_it_holds():
    server = await started()
    reader, writer = await connect(server)
    writer.write(get("/x"))
    assert (await answer(reader))[0] == 200
    await server.close()
    assert await closed(reader)
