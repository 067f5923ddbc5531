"""The report's plots drawn in a process of their own, for the analysis service: `PlotProcess`.

A warm analysis draws its four plots (matplotlib, about 0.3 s of CPU for 15k events) while it reads and matches the
message sequence diagram's events through Py4J; in the service's process both needed its one GIL, so they ran one
after the other although the machine had a core for each. In a process of its own matplotlib has an interpreter of
its own. The process is spawned once (not forked: the service runs a JVM and threads), imports the plotting module
as it starts, and is replaced when it died (a draw it died in is made again in the new one, once). An analysis in
its own process draws in a thread of that process: another interpreter's start and matplotlib's import there cost
on a cold machine what they save.
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, TypeVar

from node.errors import EnvironmentProblem
from pipeline.report_data import PlotData

PLOTS_MODULE = "pipeline.plots"
PARENT_POLL_S = 0.5  # how often the plot process looks whether the service is still its parent
T = TypeVar("T")


def draw_plots(data: PlotData) -> dict[str, str]:
    """The report's plots of `data` (title -> base64 PNG), matplotlib imported on first use (in whichever process
    draws)."""
    return importlib.import_module(PLOTS_MODULE).all_plots(data)


def _watch_parent(parent_pid: int) -> None:
    """In the plot process, as it starts: end it when `parent_pid` has gone (a killed service). The pool's worker
    alone did not notice (a service killed with SIGKILL left it running: tests/unit/test_analysis_service.py).
    Polled, as the kernel's parent-death signal follows the thread that spawned the process, and the service
    replaces a dead process from the thread of whichever request found it dead."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class PlotProcess:
    """One process that draws the report's plots for any thread (the service's analyses share it): `draw(data)`
    starts `draw_plots(data)` there and returns the call that waits for its result; `close()` ends the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._pid: tuple[ProcessPoolExecutor, int] | None = None  # the pool's process' id, once asked

    def _started(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_watch_parent, initargs=(os.getpid(),))
                # its first task, not its initializer: an import that fails (no matplotlib) fails the draws with
                # its own error, where an initializer's would break the pool
                self._pool.submit(importlib.import_module, PLOTS_MODULE)
            return self._pool

    def _forget(self, pool: ProcessPoolExecutor) -> None:
        """`pool`'s process died: the next draw starts another."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False)

    def _submit(self, fn: Callable[..., T], *args: Any) -> Callable[[], T]:
        """Start `fn(*args)` in the process; the call returned waits for its result. A process that died before or
        during it is replaced and the call made once more in the new one; when that one dies too, the wait raises
        `EnvironmentProblem`."""
        pool = self._started()
        try:
            future: Future[T] | None = pool.submit(fn, *args)
        except BrokenProcessPool:  # it died since the last call
            future = None

        def result() -> T:
            if future is not None:
                try:
                    return future.result()
                except BrokenProcessPool:
                    pass
            self._forget(pool)  # it died before or during the call: once more, in a new process
            again = self._started()
            try:
                return again.submit(fn, *args).result()
            except BrokenProcessPool as exc:
                self._forget(again)
                raise EnvironmentProblem("the report's plot process ended twice while it drew (killed?)",
                                         hint="analyse again: the next analysis starts another") from exc
        return result

    def start(self) -> None:
        """Start the process now (it imports matplotlib while the caller goes on)."""
        self._started()

    def pid(self) -> int:
        """The process' id (started if it was not; asked once per process, so that a status does not wait behind
        a draw every time)."""
        pool = self._started()
        with self._lock:
            known = self._pid
        if known is not None and known[0] is pool:
            return known[1]
        pid = self._submit(os.getpid)()
        with self._lock:
            if self._pool is not None:
                self._pid = (self._pool, pid)
        return pid

    def draw(self, data: PlotData) -> Callable[[], dict[str, str]]:
        """Start drawing the plots of `data` in the process; the call returned waits for them (`_submit`)."""
        return self._submit(draw_plots, data)

    def close(self) -> None:
        """End the process, once a draw under way has ended (the draws waiting behind it are cancelled)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
