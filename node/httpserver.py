"""The HTTP/1.1 server of the control API: asyncio streams at the edge, h11's state machine for the protocol, one
synchronous handler from a `Request` to a `Reply` (node.control's routes).

Why not aiohttp, which served it before: importing `aiohttp.web` takes the whole package, its client included,
about half of the node's import in the image (`python -X importtime`: 0.22 of 0.29 s on one machine, 0.40-0.46
of 0.68-0.87 s on a slower one), and a 50-node `splitlab up` on two cores starts fifty nodes at once (issue 34).
h11 (python-hyper, the HTTP layer under httpcore and uvicorn) parses and frames HTTP/1.1 for 0.02-0.03 s of
import; what is written here is only the loop that feeds it bytes.

Bounds, so that no client can hold the node up or make it grow: at most `max_connections` open at once (a
connection beyond them is closed at once and counted), a request's head within h11's 16 KiB and its body within
`max_body_bytes` (413), and a connection that sends nothing for `idle_timeout_s` is closed (also half-sent
requests). A request h11 cannot parse gets the status it suggests (400) and the connection is closed. Requests
on one connection are answered in order (keep-alive, pipelining). A handler that raises is a bug: its request
is answered 500, and the exception goes to the loop's exception handler, which stops the node. `counters`
counts the requests served and what was refused.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Callable

import h11

MAX_CONNECTIONS = 64
IDLE_TIMEOUT_S = 60.0
MAX_BODY_BYTES = 1 << 20
READ_BYTES = 64 * 1024
SERVER_HEADER = b"splitlab-node"


@dataclass(frozen=True)
class Request:
    """One request: `method` upper-case, `path` without its query, `headers` with lower-case names."""
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, data: object, status: int = 200, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
        return cls(status, json.dumps(data).encode(), headers=headers)


Handler = Callable[[Request], Reply]


def new_counters() -> dict[str, int]:
    """What a server counts: requests answered by the handler, connections refused over the cap, requests
    refused before the handler (unparsable, too large), connections closed for idling."""
    return {"requests": 0, "refused_connections": 0, "bad_requests": 0, "idle_closed": 0}


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class _Refused(Exception):
    """A request answered with `reply` before its handler ran, after which the connection is closed."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


@dataclass
class HttpServer:
    """Serves `handler` on one address once `start`ed; `close` ends the listener and every connection."""
    handler: Handler
    max_connections: int = MAX_CONNECTIONS
    idle_timeout_s: float = IDLE_TIMEOUT_S
    max_body_bytes: int = MAX_BODY_BYTES
    counters: dict[str, int] = field(default_factory=new_counters)
    _server: asyncio.Server | None = None
    _connections: dict[asyncio.Task, asyncio.StreamWriter] = field(default_factory=dict)

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._accept, host, port)

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # Closed, not cancelled: a connection's task then sees the end of its stream and returns (Python 3.11.7's
        # streams report a cancelled connection task to the loop's exception handler as an error).
        for writer in self._connections.values():
            writer.close()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.max_connections:
            self.counters["refused_connections"] += 1
            writer.close()
            return
        self._connections[task] = writer
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away: nothing to answer
        except TimeoutError:
            self.counters["idle_closed"] += 1
        except Exception as exc:  # noqa: BLE001 - a handler's bug, answered 500 and handed to the loop
            # What Python 3.12's asyncio does with a connection callback's exception (3.11 drops it): the node's
            # exception handler stops the node visibly (node.__main__).
            asyncio.get_running_loop().call_exception_handler(
                {"message": "the control API's handler failed", "exception": exc})
        finally:
            del self._connections[task]
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            try:
                request = await self._read_request(conn, reader, writer)
            except (h11.RemoteProtocolError, _Refused) as exc:
                self.counters["bad_requests"] += 1
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self._send(conn, writer, exc.reply if isinstance(exc, _Refused) else Reply.json(
                        {"error": f"bad HTTP request: {exc}"}, exc.error_status_hint))
                return
            if request is None:
                return  # the client closed the connection
            self.counters["requests"] += 1
            try:
                reply = self.handler(request)
            except Exception as exc:
                await self._send(conn, writer, Reply.json({"error": f"internal error: {exc!r}"}, 500))
                raise
            await self._send(conn, writer, reply)
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter, reply: Reply) -> None:
        writer.write(self._encode(conn, reply))
        async with asyncio.timeout(self.idle_timeout_s):  # a client that reads nothing holds no task for long
            await writer.drain()

    async def _read_request(self, conn: h11.Connection, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> Request | None:
        """The next whole request on `conn`, or None when the client closed the connection first."""
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                async with asyncio.timeout(self.idle_timeout_s):
                    conn.receive_data(await reader.read(READ_BYTES))
            elif isinstance(event, h11.Request):
                head = event
                length = dict(event.headers).get(b"content-length")
                if length is not None and int(length) > self.max_body_bytes:
                    raise _Refused(self._too_large())
                if conn.they_are_waiting_for_100_continue:
                    writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self.max_body_bytes:
                    raise _Refused(self._too_large())
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                target = head.target.decode("ascii", "replace")
                return Request(head.method.decode("ascii", "replace").upper(), target.split("?", 1)[0],
                               {k.decode("latin-1"): v.decode("latin-1") for k, v in head.headers}, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                return None
            else:  # h11.PAUSED cannot come before our answer: nothing else is expected
                raise h11.RemoteProtocolError(f"unexpected {event!r}", error_status_hint=400)

    def _too_large(self) -> Reply:
        return Reply.json({"error": f"request body over {self.max_body_bytes} bytes"}, 413)

    @staticmethod
    def _encode(conn: h11.Connection, reply: Reply) -> bytes:
        headers = [(b"content-type", reply.content_type.encode()), (b"content-length", str(len(reply.body)).encode()),
                   (b"server", SERVER_HEADER), *((k.encode(), v.encode()) for k, v in reply.headers)]
        if reply.status >= 400 and conn.their_state is not h11.DONE:
            headers.append((b"connection", b"close"))  # the rest of their request is not read
        return (conn.send(h11.Response(status_code=reply.status, headers=headers, reason=_reason(reply.status)))
                + conn.send(h11.Data(data=reply.body)) + conn.send(h11.EndOfMessage()))
