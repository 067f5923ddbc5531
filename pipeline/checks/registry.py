"""The registry of analysis checks, and `CHECKS`: every registered check, in report order, read live.

A check is one module of this package that ends with its registration:

    CHECK = register_check(Check(name="my_check", summary="...", defaults={"max_x": 0}, func=check))

On first use of `CHECKS` every module of pipeline/checks is imported (`node.registry`), so a new file takes
part in every analysis, in container and simulator runs alike: its parameters are accepted by `--check-param`
and a scenario's `expect` (`pipeline.params.resolve`, `chaos.harness.load`), its result is in summary.json and
the report. A check registered from elsewhere (a test module, a user's package imported before the analysis)
takes part from then on. Report order: the shipped checks in `REPORT_ORDER`, then the others as registered.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Sequence, overload

from node.registry import Registry
from pipeline.checks.base import Check

REPORT_ORDER = ("history", "delivery", "duplicates", "fifo", "latency", "retransmission", "endless_retransmission",
                "heal_recovery", "views", "stale_link", "spurious_xmit", "sync_handshakes", "blocked",
                "resends_without_request")

_REGISTRY: Registry[Check] = Registry("check", ("pipeline.checks",))


def register_check(check: Check) -> Check:
    """Add `check` to every analysis from now on; returns it. Raises ConfigError when another check holds
    its name."""
    return _REGISTRY.register(check.name, check, origin=f"{check.func.__module__}.{check.func.__qualname__}")


def unregister_check(name: str) -> None:
    """Remove the check `name` (a test's toy check cleans up with this)."""
    _REGISTRY.unregister(name)


class _Checks(Sequence[Check]):
    """A read-only, live view of the registry in report order; behaves like the tuple of checks it shows
    (iteration, indexing, len, `CHECKS + (extra,)`)."""

    def _ordered(self) -> tuple[Check, ...]:
        entries = _REGISTRY.entries()
        rank = {name: index for index, name in enumerate(REPORT_ORDER)}
        return tuple(entries[name] for name in sorted(entries, key=lambda n: rank.get(n, len(REPORT_ORDER))))

    @overload
    def __getitem__(self, index: int) -> Check: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Check, ...]: ...

    def __getitem__(self, index: Any) -> Any:
        return self._ordered()[index]

    def __len__(self) -> int:
        return len(self._ordered())

    def __iter__(self) -> Iterator[Check]:
        return iter(self._ordered())

    def __add__(self, other: Iterable[Check]) -> tuple[Check, ...]:
        return self._ordered() + tuple(other)

    def __repr__(self) -> str:
        return f"CHECKS({', '.join(c.name for c in self._ordered())})"


CHECKS = _Checks()
