"""Talk to the warm analysis service (`pipeline.service`): where its socket is, whether it is up, and one request.

The protocol is JSON lines over a Unix socket. The client sends one request line (`{"op": "analyze" | "status" |
"stop", ...}`); the service answers with zero or more step lines (`{"step": LABEL, "phase": "start" | "end"}`,
only for `analyze`, which also sends one `{"verdict": SUMMARY}` line as soon as the checks are done) and one
final line: `{"result": {...}}` or `{"error": {"type", "message", "hint"}}`. An error of splitlab's hierarchy
comes back as the same class, so a caller cannot tell a served analysis from one run in its own process, except
that it took a warm JVM.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator, Mapping

from node import errors
from node.errors import EnvironmentProblem, SplitlabError
from pipeline.master import resolve_master
from pipeline.sequence import DiagramOptions
from pipeline.summary import Summary

SOCKET_ENV = "SPLITLAB_ANALYSIS_SOCKET"
SOCKET_NAME = "analysis.sock"
LOG_NAME = "analysis.log"
MAX_LINE_BYTES = 1 << 20
CONNECT_TIMEOUT_S = 2.0

StepReporter = Callable[[str], ContextManager[None]]


def socket_path() -> Path:
    """`$SPLITLAB_ANALYSIS_SOCKET`, else `<tmp>/splitlab-<uid>/analysis.sock` (a directory only its user reads)."""
    configured = os.environ.get(SOCKET_ENV)
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"splitlab-{os.getuid()}" / SOCKET_NAME


def error_line(exc: BaseException) -> dict[str, Any]:
    """The final line that carries `exc` to the client."""
    if isinstance(exc, SplitlabError):
        return {"error": {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}}
    first = (str(exc).strip().splitlines() or [""])[0]
    return {"error": {"type": "internal", "message": f"the analysis service raised {type(exc).__name__}: {first}",
                      "hint": f"its log is {socket_path().parent / LOG_NAME}"}}


def _raise(error: dict[str, Any]) -> None:
    cls = getattr(errors, str(error.get("type")), None)
    message, hint = str(error.get("message")), error.get("hint")
    if isinstance(cls, type) and issubclass(cls, SplitlabError) and cls.__init__ is SplitlabError.__init__:
        raise cls(message, hint=hint)
    raise SplitlabError(message, hint=hint)


class Connection:
    """One request to the service at `path` (connect with `Connection.open`)."""

    def __init__(self, sock: socket.socket, path: Path) -> None:
        self.sock = sock
        self.path = path
        self.reader = sock.makefile("rb")

    @classmethod
    def open(cls, path: Path | None = None) -> "Connection | None":
        """A connection to the service, or None when nothing listens there (no socket, or a stale one)."""
        path = path or socket_path()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError, socket.timeout):
            sock.close()
            return None
        except OSError as exc:
            sock.close()
            raise EnvironmentProblem(f"cannot reach the analysis service at {path}: {exc}",
                                     hint="splitlab spark down, then splitlab spark up") from None
        sock.settimeout(None)
        return cls(sock, path)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def request(self, op: str, steps: StepReporter | None = None,
                on_verdict: Callable[[dict[str, Any]], None] | None = None, **fields: Any) -> dict[str, Any]:
        """Send one request; enter and leave `steps(label)` as the service reports its steps, call `on_verdict`
        with the summary of an analysis as soon as its checks are done (a `verdict` line); return the result.

        Raises the service's error as the same `SplitlabError` class, `EnvironmentProblem` if the service goes
        away before it answers.
        """
        try:
            self.sock.sendall(json.dumps({"op": op, **fields}).encode() + b"\n")
            with contextlib.ExitStack() as open_step:
                for line in self._lines():
                    if "step" in line:
                        open_step.close()
                        if line.get("phase") == "start" and steps is not None:
                            open_step.enter_context(steps(str(line["step"])))
                    elif "verdict" in line:
                        if on_verdict is not None:
                            on_verdict(dict(line["verdict"]))
                    elif "error" in line:
                        _raise(line["error"])
                    elif "result" in line:
                        return dict(line["result"])
        except OSError as exc:
            raise EnvironmentProblem(f"lost the analysis service at {self.path}: {exc}",
                                     hint=f"its log is {self.path.parent / LOG_NAME}") from None
        finally:
            self.close()
        raise EnvironmentProblem(f"the analysis service at {self.path} closed the connection without an answer",
                                 hint=f"it may have died; its log is {self.path.parent / LOG_NAME}")

    def _lines(self) -> Iterator[dict[str, Any]]:
        while True:
            raw = self.reader.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            if len(raw) > MAX_LINE_BYTES or not raw.endswith(b"\n"):
                raise EnvironmentProblem(f"the analysis service at {self.path} sent a line over "
                                         f"{MAX_LINE_BYTES} bytes or cut off")
            try:
                line = json.loads(raw)
            except ValueError:
                raise EnvironmentProblem(f"the analysis service at {self.path} sent a line that is not JSON: "
                                         f"{raw[:80]!r}") from None
            if not isinstance(line, dict):
                raise EnvironmentProblem(f"the analysis service at {self.path} sent {raw[:80]!r}, not an object")
            yield line


def status(path: Path | None = None) -> dict[str, Any] | None:
    """The service's status (pid, master, started_ts, analyses, socket), or None when it is not up."""
    conn = Connection.open(path)
    return None if conn is None else conn.request("status")


def analyze(run_dir: Path | str, master: str | None, params: Mapping[str, Mapping[str, Any]] | None, report: bool,
            step: StepReporter, diagram: DiagramOptions,
            on_verdict: Callable[[Summary], None] | None) -> Summary | None:
    """The analysis done by the warm service (`pipeline.service`) when it is up on the master asked for, else
    None (the caller analyses in its own process: `pipeline.api.analyze`). The service sends the verdict's summary
    when its checks are done: `on_verdict` is called then (or with the result, from a service that does not send
    it). Loads no Spark."""
    running = status()
    if running is None or running["master"] != resolve_master(master):
        return None
    conn = Connection.open()
    if conn is None:
        return None  # it stopped between the two requests
    told = False

    def early(data: dict[str, Any]) -> None:
        nonlocal told
        told = True
        if on_verdict is not None:
            on_verdict(Summary.from_dict(data))

    result = Summary.from_dict(conn.request("analyze", steps=step, on_verdict=early,
                                            run_dir=str(Path(run_dir).absolute()),
                                            params={k: dict(v) for k, v in (params or {}).items()}, report=report,
                                            diagram=diagram.to_dict()))
    if not told and on_verdict is not None:
        on_verdict(result)
    return result
