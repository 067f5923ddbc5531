"""Named extension points: entries that modules register when they are imported, found without a central list.

A `Registry` holds named entries (protocol layers in `node.layers`, analysis checks in `pipeline.checks`). A
module registers its entry with one call at import time; on the first lookup the registry imports every module
of its `packages` (`pkgutil`: each file and sub-package, in name order, except names starting with `_`), so a
new file in such a package is registered without any other file naming it. Lookups that happen during that
import (a package's `__init__` registering its built-ins) see what is registered so far.

Discovery is thread-safe: a lookup from another thread while one discovers waits for it to finish (two
scenario runs in one process once saw a half-discovered check registry), while lookups from the discovering
thread itself (during the imports) go on with what is there.

Names keep their registration order. Registering a second, different entry under a taken name raises
`ConfigError`; registering the same one again (the same object, or one from the same origin after a reload:
a class's `module.qualname`, or the `origin` the caller names) keeps a single entry. An entry from a module
outside the packages is registered after the discovery, so it is the one refused when it takes a shipped name.
"""
from __future__ import annotations

import importlib
import pkgutil
import threading
from typing import Generic, Iterable, TypeVar

from node.errors import ConfigError

T = TypeVar("T")


_NO_MODULE = "object "


def _origin(entry: object) -> str:
    """`module.qualname` of a class or function (what a reload keeps), else the object's identity."""
    module, qualname = getattr(entry, "__module__", None), getattr(entry, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else f"{_NO_MODULE}{id(entry):#x}"


class Registry(Generic[T]):
    """Named entries of one kind (`what`, for messages), discovered in `packages` on first lookup."""

    def __init__(self, what: str, packages: Iterable[str]) -> None:
        self.what = what
        self.packages = tuple(packages)
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._state = "new"  # new -> discovering -> discovered
        self._discovery = threading.RLock()  # re-entrant: the discovering thread's own lookups pass

    def register(self, name: str, entry: T, origin: str | None = None) -> T:
        """Add `entry` under `name`; returns it (so a decorator can return the class). `origin` says where it
        comes from (default: the entry's `module.qualname`). Raises ConfigError when an entry of another origin
        holds the name.

        An entry from a module outside the registry's packages (a test's, a user's extension) makes the registry
        discover its own modules first: a name one of them holds is refused at this call. Registered before the
        discovery, the outsider took the name and the shipped module's import failed later, at some lookup."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a {self.what} needs a non-empty name, got {name!r}")
        origin = origin or _origin(entry)
        if self._state == "new" and not origin.startswith(_NO_MODULE) and not self._holds(origin):
            self.discover()
        held = self._origins.get(name)
        if held is not None and self._entries[name] is not entry and held != origin:
            raise ConfigError(f"{self.what} {name!r} is registered twice: by {held} and {origin}",
                              hint="give one of them another name")
        self._entries[name] = entry
        self._origins[name] = origin
        return entry

    def _holds(self, origin: str) -> bool:
        """`origin` (`module.qualname`) is in one of the registry's packages."""
        return any(origin.startswith(f"{package}.") for package in self.packages)

    def unregister(self, name: str) -> None:
        """Remove `name` (tests that register a toy entry clean up with this); unknown names are ignored."""
        self._entries.pop(name, None)
        self._origins.pop(name, None)

    def get(self, name: str) -> T | None:
        """The entry registered as `name`, or None."""
        self.discover()
        return self._entries.get(name)

    def names(self) -> tuple[str, ...]:
        """Every registered name, in registration order."""
        self.discover()
        return tuple(self._entries)

    def entries(self) -> dict[str, T]:
        """{name: entry} in registration order (a copy)."""
        self.discover()
        return dict(self._entries)

    def discover(self) -> None:
        """Import every module of the registry's packages, once (a failing import propagates: a broken
        extension file must be seen, not skipped)."""
        if self._state == "discovered":
            return
        with self._discovery:  # another thread discovering: wait for it
            if self._state != "new":  # discovered meanwhile, or this very thread is discovering (an import's lookup)
                return
            self._state = "discovering"
            done = False
            try:
                for package_name in self.packages:
                    package = importlib.import_module(package_name)
                    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
                        if not info.name.startswith("_"):
                            importlib.import_module(f"{package_name}.{info.name}")
                done = True
            finally:
                self._state = "discovered" if done else "new"  # after a failure the next lookup shows it again
