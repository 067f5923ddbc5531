"""The live fault matrix of a run: which link has which fault, since when, verified or not; as Prometheus metrics.

Read, never written, at every scrape from the run's files:
- `chaos/state.json` (chaos.net.docker keeps it; `splitlab heal` removes it): `active`, fault id -> kind,
  detail, `applied_ts`: the faults in force now. A missing file means none;
- `events/controller.jsonl`: the `fault_start` of each fault, whose `effective_ts` is set when UDP probes saw it
  take effect (partitions on one machine): verified.

Each active fault becomes one `FaultLink` per link it acts on: a partition per cut (src, dst) of its grudge, a
link fault (slow, flaky, shape) per link of its matrix, a message fault on its one link, a node fault (pause,
kill) on `src` = the node and `dst` = `*`. What cannot be read (a torn or foreign file) is a `problem` of the
matrix, never an exception: a scrape always answers.

Families: `splitlab_fault_active{fault_id,kind,src,dst,detail}` (1 per link), and per fault
`splitlab_fault_since_timestamp_seconds`, `splitlab_fault_verified` (1 or 0) and, once verified,
`splitlab_fault_effective_timestamp_seconds`; `splitlab_fault_matrix_readable` (0 when something could not be
read, each problem in `splitlab_fault_matrix_problem{problem}`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric

from chaos.faults.grudge import NODE_FAULTS, fault_links
from chaos.faults.msgrules import MsgRule
from node.errors import EnvironmentProblem, SplitlabError
from node.wire import message_types



@dataclass(frozen=True)
class FaultLink:
    """One fault on one link (src -> dst; `dst` is `*` for a node fault)."""

    fault_id: str
    kind: str
    src: str
    dst: str
    detail: str
    since_ts: float
    effective_ts: float | None  # when probes saw it in effect; None: not verified

    @property
    def verified(self) -> bool:
        return self.effective_ts is not None


@dataclass
class Matrix:
    """Every link of every active fault, and what could not be read."""

    links: list[FaultLink] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def faults(self) -> dict[str, FaultLink]:
        """One link of each fault, by fault id (what the per-fault families are made of)."""
        return {link.fault_id: link for link in self.links}


def _link_detail(fault: Mapping[str, Any], backends: list[str]) -> str:
    text = " ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in fault.items())
    return text + (f" ({','.join(backends)})" if backends else "")


def _msg_detail(detail: Mapping[str, Any]) -> str:
    rule = MsgRule(**detail)
    cls = message_types().get(rule.type)
    return f"{rule.describe().split(' type ', 1)[0]} {cls.__name__ if cls else f'type {rule.type}'}"


def expand(fault_id: str, info: Mapping[str, Any], effective_ts: float | None) -> list[FaultLink]:
    """The links of one active fault (`info`: its entry in state.json's `active`). Raises KeyError, TypeError,
    ValueError or `SplitlabError` for an entry it cannot read."""
    kind, detail, since = str(info["kind"]), info["detail"], float(info["applied_ts"])

    def link(src: str, dst: str, text: str) -> FaultLink:
        return FaultLink(fault_id, kind, src, dst, text, since, effective_ts)

    links = fault_links(kind, detail)
    if kind == "partition":
        text = "cut" if detail.get("mode") != "jam" else f"jam (release {detail.get('release')})"
        return [link(s, d, text) for s, d in links]
    if "links" in detail:  # slow, flaky, shape
        backends = [str(b) for b in detail.get("backends", [])]
        return [link(s, d, _link_detail(detail["links"][f"{s}->{d}"], backends)) for s, d in links]
    if kind == "msg_fault":
        return [link(s, d, _msg_detail(detail)) for s, d in links]
    if kind in NODE_FAULTS:
        method = detail.get("method")
        return [link(s, d, kind + (f" ({method})" if method else "")) for s, d in links]
    return [link(s, d, json.dumps(detail, sort_keys=True)[:80]) for s, d in links]


def verifications(history: Path, problems: list[str]) -> dict[str, float | None]:
    """fault id -> the `effective_ts` of its `fault_start` in the controller history (unreadable lines are
    counted in `problems`)."""
    out: dict[str, float | None] = {}
    try:
        lines = history.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return out
    except OSError as exc:
        problems.append(f"{history}: {exc.strerror or exc}")
        return out
    bad = 0
    for line in lines:
        try:
            event = json.loads(line)
            if event.get("type") == "fault_start":
                ts = event.get("effective_ts")
                out[str(event["fault_id"])] = None if ts is None else float(ts)
        except (ValueError, KeyError, TypeError, AttributeError):
            bad += 1
    if bad:
        problems.append(f"{history}: {bad} unreadable line(s)")
    return out


def read_matrix(run_dir: Path) -> Matrix:
    """The fault matrix of the run in `run_dir`, now (see the module docstring)."""
    matrix = Matrix()
    state_path = Path(run_dir) / "chaos" / "state.json"
    try:
        active = json.loads(state_path.read_text())["active"]
        if not isinstance(active, dict):
            raise TypeError(f"'active' is a {type(active).__name__}")
    except FileNotFoundError:
        return matrix  # nothing applied, or healed
    except (OSError, ValueError, KeyError, TypeError) as exc:
        matrix.problems.append(f"{state_path}: {exc}")
        return matrix
    verified = verifications(Path(run_dir) / "events" / "controller.jsonl", matrix.problems)
    for fault_id, info in sorted(active.items()):
        try:
            matrix.links += expand(fault_id, info, verified.get(fault_id))
        except (KeyError, TypeError, ValueError, AttributeError, SplitlabError) as exc:
            matrix.problems.append(f"fault {fault_id}: unreadable entry ({type(exc).__name__}: {exc})")
    matrix.links.sort(key=lambda link: (link.since_ts, link.fault_id, link.src, link.dst))
    return matrix


def families(matrix: Matrix) -> list[Metric]:
    """The Prometheus families of a matrix (see the module docstring)."""
    active = GaugeMetricFamily("splitlab_fault_active", "1 for each link of each fault in force",
                               labels=["fault_id", "kind", "src", "dst", "detail"])
    since = GaugeMetricFamily("splitlab_fault_since_timestamp_seconds", "when the fault was applied (unix time)",
                              labels=["fault_id", "kind"])
    verified = GaugeMetricFamily("splitlab_fault_verified", "1 when probes saw the fault take effect, else 0",
                                 labels=["fault_id", "kind"])
    effective = GaugeMetricFamily("splitlab_fault_effective_timestamp_seconds",
                                  "when probes saw the fault take effect (unix time)", labels=["fault_id", "kind"])
    for link in matrix.links:
        active.add_metric([link.fault_id, link.kind, link.src, link.dst, link.detail], 1.0)
    for fault_id, link in sorted(matrix.faults().items()):
        since.add_metric([fault_id, link.kind], link.since_ts)
        verified.add_metric([fault_id, link.kind], 1.0 if link.verified else 0.0)
        if link.effective_ts is not None:
            effective.add_metric([fault_id, link.kind], link.effective_ts)
    readable = GaugeMetricFamily("splitlab_fault_matrix_readable", "1 when the run's chaos state and controller "
                                 "history were read whole, else 0")
    readable.add_metric([], 0.0 if matrix.problems else 1.0)
    problem = GaugeMetricFamily("splitlab_fault_matrix_problem", "what could not be read", labels=["problem"])
    for text in matrix.problems:
        problem.add_metric([text], 1.0)
    return [active, since, verified, effective, readable, problem]


class FaultMatrixCollector:
    """A `prometheus_client` collector of the run in `run_dir`, read at every scrape."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)

    def collect(self) -> Iterator[Metric]:
        yield from families(read_matrix(self.run_dir))


def registry(run_dir: Path) -> CollectorRegistry:
    """A registry holding the fault matrix of the run in `run_dir` alone."""
    reg = CollectorRegistry()
    reg.register(FaultMatrixCollector(run_dir))
    return reg


def serve(run_dir: Path, port: int, addr: str = "127.0.0.1") -> Any:
    """Serve the fault matrix of the run in `run_dir` at http://ADDR:PORT/metrics from a daemon thread (port 0:
    any free one); returns the server (`server_port`, `shutdown()`). Raises `EnvironmentProblem` when the port
    cannot be bound."""
    try:
        server, _thread = start_http_server(port, addr=addr, registry=registry(run_dir))
    except OSError as exc:
        raise EnvironmentProblem(f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}",
                                 hint="choose another --port") from None
    return server
