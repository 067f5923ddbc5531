"""Entry point of the JGroups node (`python -m jgnode`): the configuration from the environment, the control API
(splitlab's own, `node.control`) first, then the JVM and the channel; a clean stop on SIGTERM/SIGINT with the
history flushed (the channel's graceful close is given CLOSE_TIMEOUT_S). The process ends with `os._exit` once
the history is closed: the JVM's shutdown waits for JGroups' threads, and nothing is left to save by then."""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import sys
import threading
from typing import Callable

from jgnode.config import JgConfig, from_env
from jgnode.runtime import JgRuntime, SharedHistory, resolve
from jgnode.trace import RECORDS
from node import control as control_api
from node.errors import SplitlabError
from node.history import CONTRACT_EVENTS
from node.httpserver import HttpServer

TICK_S = 0.1
CLOSE_TIMEOUT_S = 1.0  # a run stops all its nodes at once: their leaves find no one to answer them


def _daemon(work: Callable[[], None]) -> concurrent.futures.Future:
    """`work()` on a daemon thread, its outcome in the returned future: a JGroups call that blocks (a join, a
    leave) must not hold up the process's exit as a thread of asyncio's executor would."""
    done: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting side, which fails the node
            done.set_exception(exc)
        else:
            done.set_result(None)
    threading.Thread(target=run, daemon=True, name=getattr(work, "__name__", "jgroups")).start()
    return done


async def serve(config: JgConfig) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signals() -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    on_signals()
    node = config.node
    history = SharedHistory(node.history_path, node.run_id, node.name)
    runtime = JgRuntime(config, history, lambda exc: loop.call_soon_threadsafe(stop.set))
    control_host, control_port = node.control_address()
    control_ip = resolve(control_host)
    # An error the loop is handed (the control API's handler failing) stops the node like a JGroups callback's.
    loop.set_exception_handler(lambda _, context: runtime.fail(
        context.get("exception") or RuntimeError(context.get("message", "loop error"))))
    reason = "signal"
    control: HttpServer | None = None
    try:
        control = await control_api.serve(runtime, node.token, control_ip, control_port)
        history.emit("node_start", boot=runtime.boot, data_ip=runtime.data_ip, control_ip=control_ip,
                     members=list(node.members),
                     config={"kind": "jgroups", "unicast": config.unicast, "silence_ms": node.silence_ms,
                             "props": {p: dict(v) for p, v in config.props.items()},
                             "stack": runtime.stack_config(), "records": sorted(CONTRACT_EVENTS | RECORDS)})
        history.flush()
        await asyncio.to_thread(runtime.start_jvm)
        on_signals()  # the JVM's start reset SIGTERM to its default, which PID 1 of a container never acts on
        connect = _daemon(runtime.connect)
        print(f"node {node.name}: JGroups {config.unicast} on {runtime.data_ip}, control "
              f"http://{control_ip}:{control_port}", flush=True)
        flush_every = max(1, round(node.flush_ms / 1000 / TICK_S))
        ticks = 0
        while not stop.is_set():
            if connect.done() and connect.exception() is not None:
                runtime.fail(connect.exception())
                break
            runtime.liveness.tick()
            ticks += 1
            if ticks % flush_every == 0:
                history.flush()
            try:
                await asyncio.wait_for(stop.wait(), TICK_S)
            except asyncio.TimeoutError:
                pass
        if runtime.failure is not None:
            reason = "error"
            print(f"node {node.name}: stopping on error: {runtime.failure!r}", file=sys.stderr, flush=True)
    finally:
        # JChannel.close leaves the group gracefully; in a partition, or with every member leaving, that waits
        closing = _daemon(runtime.stop)
        try:
            await asyncio.wait_for(asyncio.wrap_future(closing), CLOSE_TIMEOUT_S)
        except asyncio.TimeoutError:
            runtime.count("close_timed_out")
        if control is not None:
            await control.close()
        history.end("node_stop", runtime.stop_fields(reason))  # nothing after a `/quiesce`: its history has ended
    return 1 if runtime.failure is not None else 0


def main() -> int:
    try:
        config = from_env(os.environ)
    except SplitlabError as exc:
        print(f"jgnode: {exc}", file=sys.stderr)
        return exc.exit_code
    code = asyncio.run(serve(config))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
