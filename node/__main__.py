"""Entry point of the node process (`python -m node`): configuration from the environment, the protocol stack
(`node.layers.build_stack`), the UDP runtime, the control API and the history; a clean stop on SIGTERM/SIGINT
with the history flushed."""
from __future__ import annotations

import asyncio
import gc
import signal
import sys

from node.config import NodeConfig, from_env
from node import control as control_api
from node.errors import SplitlabError
from node.history import HistoryWriter
from node.httpserver import HttpServer
from node.layers import build_stack  # the stack the config asks for
from node.runtime import NodeRuntime, resolve_host


# The cyclic garbage collector, once the node has started: what exists then (modules, classes, the stack) is
# frozen out of every collection, and a young collection waits for 20,000 new objects instead of 700. A message
# makes a dozen short-lived objects that reference counting frees at once (none of them cycles), so the default
# collected about every 60 messages for nothing: 0.2 us a message on the sender and 0.5 us on the receiver, on
# loopback, nothing else running (issue 34).
GC_YOUNG_OBJECTS = 20_000


async def serve(config: NodeConfig) -> int:
    """Run the node until SIGTERM or SIGINT; returns the exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    failure: list[BaseException] = []

    def on_loop_error(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        # A bug inside a protocol must stop the node visibly, not be logged and forgotten.
        failure.append(context.get("exception") or RuntimeError(context.get("message", "loop error")))
        stop.set()

    loop.set_exception_handler(on_loop_error)
    history = HistoryWriter(config.history_path, config.run_id, config.name)
    runtime = NodeRuntime(config, build_stack(config), history)
    control: HttpServer | None = None
    reason = "signal"
    try:
        await runtime.bind()
        control_host, control_port = config.control_address()
        control_ip = await resolve_host(control_host)
        control = await control_api.serve(runtime, config.token, control_ip, control_port)
        history.emit("node_start", boot=runtime.boot, data_ip=runtime.data_ip, control_ip=control_ip,
                     members=list(config.members),
                     config={"heartbeat_ms": config.heartbeat_ms, "silence_ms": config.silence_ms,
                             "bundle_max_bytes": config.bundle_max_bytes,
                             "recv_buffer_bytes": runtime.recv_buffer_bytes, "unicast": config.unicast,
                             **config.unicast_config.as_dict(),
                             "membership": config.membership,
                             "membership_config": config.membership_config.as_dict(),
                             "multicast": config.multicast, "bcast_sync": config.bcast_sync,
                             "nakack4": config.nakack4_config.as_dict(), "auth": config.auth_key is not None})
        runtime.start_protocols()  # after node_start, so the initial view follows it in the history
        gc.freeze()
        gc.set_threshold(GC_YOUNG_OBJECTS)
        history.flush()
        print(f"node {config.name}: data {runtime.data_ip}:{config.data_address(config.name)[1]}, "
              f"control http://{control_ip}:{control_port}", flush=True)
        await stop.wait()
        if failure:
            reason = "error"
            print(f"node {config.name}: stopping on error: {failure[0]!r}", file=sys.stderr, flush=True)
    finally:
        await runtime.stop()
        if control is not None:
            await control.close()
        history.end("node_stop", runtime.stop_fields(reason))  # nothing after a `/quiesce`: its history has ended
    return 1 if failure else 0


def main() -> int:
    try:
        config = from_env()
    except SplitlabError as exc:
        print(f"node: {exc}", file=sys.stderr)
        return exc.exit_code
    return asyncio.run(serve(config))


if __name__ == "__main__":
    sys.exit(main())
