"""`pipeline.tables.shared`: a table the checks share is built once, by the first thread that asks, while the
others wait for it (the checks run in threads, and no longer after the tables were built before them)."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from pipeline.tables import shared


class Built:
    def __init__(self, name: str) -> None:
        self.name = name
        self.builds = 0

    @shared
    def table(self) -> object:
        """slow to build"""
        self.builds += 1
        time.sleep(0.2)  # every asking thread arrives while the first builds
        return object()


def test_threads_asking_at_once_get_the_one_table_built_once() -> None:
    built = Built("a")
    start = threading.Barrier(8)

    def ask(_: int) -> object:
        start.wait()
        return built.table

    with ThreadPoolExecutor(max_workers=8) as pool:
        tables = list(pool.map(ask, range(8)))
    assert built.builds == 1 and all(t is tables[0] for t in tables)


def test_each_instance_builds_its_own_and_the_class_shows_the_descriptor() -> None:
    first, second = Built("a"), Built("b")
    assert first.table is not second.table and (first.builds, second.builds) == (1, 1)
    assert first.table is first.table and first.builds == 1
    assert isinstance(Built.table, shared) and Built.table.__doc__ == "slow to build"
