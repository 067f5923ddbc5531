"""Partitions and link faults as plain data, built by pure functions (no commands, no root).

A *grudge* maps each node to the set of nodes whose data traffic it drops: `{"n2": {"n1"}}` means n2 drops what
comes from n1 (a one-way cut n1 -> n2). Topologies (one-way, asymmetric, split/bisect, isolate, bridge, ring,
majority/minority) are functions returning grudges; `parse_grudge` reads the command-line forms:

    n2<-n1            n2 drops what comes from n1 (one way); `n1->n2` says the same
    n2,n3<-n1         n2 and n3 drop what comes from n1
    n1<->n2           both directions
    n1,n2|n3          symmetric split into components {n1,n2} and {n3}; unlisted nodes are not cut
    a; b              several of the above, united
    isolate:n1  bisect  bridge  ring  majority  minority-third      named topologies over all nodes

A partition drops what crosses the cut, or, *jammed* (`Jam`), holds it and lets it go at the heal, in the order
it came or shuffled, the oldest dropped beyond an optional cap: how messages of an older connection arrive after
a heal.

A *link matrix* maps (src, dst) to a `LinkFault` (delay, jitter and its distribution, loss, duplication,
reordering, corruption, rate, correlations, the queue's packet limit) applied to src's data traffic toward dst.
`parse_link_fault` reads `delay_ms=20,loss_pct=5`, and every value is validated with a `UsageError` that names the
field.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Mapping, Sequence

from node.errors import UsageError
from node.sim import jam as jams

Grudge = dict[str, frozenset[str]]
LinkMatrix = dict[tuple[str, str], "LinkFault"]

_NAME = r"[a-z][a-z0-9_-]*"
_NAME_RE = re.compile(rf"^{_NAME}$")


# --- grudges ----------------------------------------------------------------------------------------------------
def _freeze(grudge: Mapping[str, Iterable[str]]) -> Grudge:
    return {node: frozenset(srcs) for node, srcs in grudge.items() if srcs}


def union(*grudges: Mapping[str, Iterable[str]]) -> Grudge:
    """Every drop of every grudge."""
    out: dict[str, set[str]] = {}
    for grudge in grudges:
        for node, srcs in grudge.items():
            out.setdefault(node, set()).update(srcs)
    return _freeze(out)


def one_way(src: str, dst: str) -> Grudge:
    """Cut src -> dst only: dst drops what comes from src; dst -> src still flows."""
    return asymmetric([src], [dst])


def asymmetric(senders: Iterable[str], receivers: Iterable[str]) -> Grudge:
    """Every receiver drops what comes from every sender; the other direction still flows."""
    senders = list(senders)
    return _freeze({r: {s for s in senders if s != r} for r in receivers})


def two_way(a: Iterable[str], b: Iterable[str]) -> Grudge:
    """Cut both directions between the node groups a and b."""
    a, b = list(a), list(b)
    return union(asymmetric(a, b), asymmetric(b, a))


def split(*components: Iterable[str]) -> Grudge:
    """A symmetric partition: each node drops every node of the other components (Jepsen's complete grudge)."""
    comps = [list(c) for c in components]
    seen: set[str] = set()
    for comp in comps:
        twice = seen.intersection(comp)
        if twice:
            raise UsageError(f"node(s) {', '.join(sorted(twice))} appear in two components of a split")
        seen.update(comp)
    out: dict[str, set[str]] = {}
    for index, comp in enumerate(comps):
        others = {n for j, c in enumerate(comps) if j != index for n in c}
        for node in comp:
            out[node] = set(others)
    return _freeze(out)


def halves(nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """The nodes cut in two, the smaller half first (5 nodes: 2 | 3)."""
    nodes = list(nodes)
    mid = len(nodes) // 2
    return nodes[:mid], nodes[mid:]


def bisect(nodes: Sequence[str]) -> Grudge:
    """A symmetric split into two halves, the smaller (minority) first. Needs at least 2 nodes."""
    _need(nodes, 2, "bisect")
    return split(*halves(nodes))


def isolate(node: str, nodes: Sequence[str]) -> Grudge:
    """Cut `node` from every other node, both directions."""
    if node not in nodes:
        raise UsageError(f"isolate: unknown node {node!r}; nodes: {', '.join(nodes)}")
    return split([node], [n for n in nodes if n != node])


def bridge(nodes: Sequence[str]) -> Grudge:
    """Two halves, but the first node of the larger half (the bridge) still talks with both sides."""
    _need(nodes, 3, "bridge")
    low, high = halves(nodes)
    middle = high[0]
    grudge = split(low, high)
    return _freeze({n: srcs - {middle} for n, srcs in grudge.items() if n != middle})


def ring(nodes: Sequence[str]) -> Grudge:
    """Majorities ring: every node still sees a majority (itself and its ring neighbours), no two the same one.

    Each node keeps the nodes within ring distance d = ceil((majority - 1) / 2) and drops the others. Needs at
    least 4 nodes (with 3, every node's majority is everybody).
    """
    _need(nodes, 4, "ring")
    nodes = list(nodes)
    count = len(nodes)
    majority = count // 2 + 1
    reach = math.ceil((majority - 1) / 2)
    out = {}
    for i, node in enumerate(nodes):
        out[node] = {nodes[j] for j in range(count) if min((i - j) % count, (j - i) % count) > reach}
    return _freeze(out)


def majority_minority(nodes: Sequence[str], rng: random.Random | None = None) -> Grudge:
    """A symmetric split into a minority and a majority; with `rng`, the members of each side are shuffled."""
    nodes = list(nodes)
    if rng is not None:
        rng.shuffle(nodes)
    return bisect(nodes)


def minority_third(nodes: Sequence[str], rng: random.Random | None = None) -> Grudge:
    """Cut a third of the nodes (at least one) from the rest, symmetric; `rng` shuffles who is cut."""
    _need(nodes, 2, "minority-third")
    nodes = list(nodes)
    if rng is not None:
        rng.shuffle(nodes)
    size = max(1, len(nodes) // 3)
    return split(nodes[:size], nodes[size:])


def _need(nodes: Sequence[str], minimum: int, what: str) -> None:
    if len(nodes) < minimum:
        raise UsageError(f"{what} needs at least {minimum} nodes, the run has {len(nodes)}")


def check_grudge(grudge: Mapping[str, Iterable[str]], nodes: Sequence[str]) -> None:
    """Raises `UsageError` naming an unknown node or a node that holds a grudge against itself."""
    known = set(nodes)
    for node, srcs in grudge.items():
        unknown = ({node} | set(srcs)) - known
        if unknown:
            raise UsageError(f"grudge names unknown node(s) {', '.join(sorted(unknown))}; nodes: {', '.join(nodes)}")
        if node in srcs:
            raise UsageError(f"grudge makes {node} drop its own traffic")


def cut_links(grudge: Mapping[str, Iterable[str]]) -> set[tuple[str, str]]:
    """The cut (src, dst) pairs of a grudge."""
    return {(src, dst) for dst, srcs in grudge.items() for src in srcs}


def describe(grudge: Mapping[str, Iterable[str]]) -> str:
    """A grudge in the `parse_grudge` syntax (`n2<-n1; n3<-n1,n2`), or `(none)`."""
    parts = [f"{node}<-{','.join(sorted(srcs))}" for node, srcs in sorted(grudge.items()) if srcs]
    return "; ".join(parts) if parts else "(none)"


@dataclass(frozen=True)
class Jam:
    """A jammed partition: held, not dropped, released at the heal in `release` order (`fifo` | `shuffle`); at
    most `cap` packets per link (None: `node.sim.jam.MAX_HELD`), the oldest dropped beyond it and counted."""

    release: str = "fifo"
    cap: int | None = None

    def __post_init__(self) -> None:
        jams.check(self.release, self.cap)

    def as_dict(self) -> dict[str, object]:
        return {"release": self.release, "cap": self.cap}

    def describe(self) -> str:
        return f"jammed, released {self.release}" + (f", cap {self.cap}" if self.cap is not None else "")


def partition_detail(grudge: Mapping[str, Iterable[str]], jam: Jam | None = None) -> dict[str, object]:
    """What a partition's `fault_start` records: the grudge, and for a jammed one `mode: jam`, release and cap."""
    detail: dict[str, object] = {"grudge": {k: sorted(v) for k, v in grudge.items()}}
    if jam is not None:
        detail.update(mode="jam", **jam.as_dict())
    return detail


def jam_end_detail(lifted: Mapping[str, int] | None) -> dict[str, object] | None:
    """What a jammed partition's `fault_end` records: `jam` with what it held, released at its end and dropped
    by the cap (`node.sim.jam.outcome`, summed over its links); None for a partition that was not jammed."""
    return {"jam": dict(lifted)} if lifted is not None else None


NODE_FAULTS = ("pause", "kill")
EVERY_LINK = "*"  # the dst of a node fault (every link of the node), both ends of a fault of no known shape


def fault_links(kind: str, detail: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (src, dst) links a fault acts on, read from its `fault_start` detail: a partition's cut pairs, a
    link fault's matrix (slow, flaky, shape), a message rule's link, a node fault's node with `dst` = `*`; a
    fault of another shape is `(*, *)`. Raises KeyError or TypeError for a detail of the wrong shape."""
    if kind == "partition":
        return sorted(cut_links(detail["grudge"]))
    if "links" in detail:
        return [(src, dst) for src, _, dst in (pair.partition("->") for pair in sorted(detail["links"]))]
    if kind == "msg_fault":
        return [(str(detail["src"]), str(detail["dst"]))]
    if kind in NODE_FAULTS:
        return [(str(detail["node"]), EVERY_LINK)]
    return [(EVERY_LINK, EVERY_LINK)]


_TOPOLOGIES = ("bisect", "bridge", "ring", "majority", "minority-third", "isolate:<node>")


def _names(text: str, whole: str) -> list[str]:
    names = [t.strip() for t in text.split(",")]
    for name in names:
        if not _NAME_RE.match(name):
            raise UsageError(f"malformed grudge {whole!r}: {name!r} is not a node name",
                             hint="examples: 'n2<-n1', 'n1->n2', 'n1<->n2', 'n1,n2|n3', 'isolate:n1', 'bisect'")
    return names


def parse_grudge(text: str, nodes: Sequence[str], rng: random.Random | None = None) -> Grudge:
    """Read a grudge in the syntax of this module's docstring and check it against `nodes`.

    Raises `UsageError` for malformed text or unknown nodes.
    """
    hint = "examples: 'n2<-n1', 'n1->n2', 'n1<->n2', 'n1,n2|n3', 'isolate:n1', 'bisect', 'ring'"
    if not text or not text.strip():
        raise UsageError("empty grudge", hint=hint)
    parts = []
    for clause in (c.strip() for c in text.split(";")):
        if not clause:
            raise UsageError(f"malformed grudge {text!r}: empty clause", hint=hint)
        parts.append(_parse_clause(clause, text, list(nodes), rng, hint))
    grudge = union(*parts)
    check_grudge(grudge, nodes)
    return grudge


def _parse_clause(clause: str, whole: str, nodes: list[str], rng: random.Random | None, hint: str) -> Grudge:
    if clause.startswith("isolate:"):
        (node,) = _names(clause[len("isolate:"):], whole)
        return isolate(node, nodes)
    named = {"bisect": lambda: bisect(nodes), "bridge": lambda: bridge(nodes), "ring": lambda: ring(nodes),
             "majority": lambda: majority_minority(nodes, rng), "minority": lambda: majority_minority(nodes, rng),
             "minority-third": lambda: minority_third(nodes, rng)}
    if clause in named:
        return named[clause]()
    for arrow, build in (("<->", lambda a, b: two_way(a, b)), ("<-", lambda a, b: asymmetric(b, a)),
                         ("->", lambda a, b: asymmetric(a, b))):
        if arrow in clause:
            left, _, right = clause.partition(arrow)
            if any(a in right for a in ("<-", "->")):
                raise UsageError(f"malformed grudge {whole!r}: one arrow per clause (separate clauses with ';')",
                                 hint=hint)
            lefts, rights = _names(left, whole), _names(right, whole)
            same = set(lefts) & set(rights)
            if same:
                raise UsageError(f"grudge {whole!r} makes {', '.join(sorted(same))} drop its own traffic", hint=hint)
            return build(lefts, rights)
    if "|" in clause:
        return split(*(_names(part, whole) for part in clause.split("|")))
    raise UsageError(f"malformed grudge {whole!r}: {clause!r} has no '<-', '->', '<->' or '|' and is not one of "
                     f"{', '.join(_TOPOLOGIES)}", hint=hint)


# --- link faults ------------------------------------------------------------------------------------------------
DISTRIBUTIONS = ("uniform", "normal", "pareto", "paretonormal")
DEFAULT_LIMIT_PKTS = 1000  # netem's default limit: packets a link's queue holds
MAX_LIMIT_PKTS = jams.MAX_HELD  # the most a link holds, as for a jammed link without a cap


def _bad_limit(value: object) -> UsageError:
    return UsageError(f"limit_pkts must be an integer in 1..{MAX_LIMIT_PKTS} (the packets a link's queue holds), "
                      f"got {value!r}", hint="e.g. 'rate_kbit=2000,limit_pkts=500'")


@dataclass(frozen=True)
class LinkFault:
    """What happens to one direction of a link's data traffic. The defaults everywhere mean untouched.

    `delay_ms` +- `jitter_ms`, drawn from `distribution` (uniform, or iproute2's normal, pareto and paretonormal
    tables, as netem does), `loss_pct`, `duplicate_pct`, `reorder_pct` (that share of packets skips the delay and
    so overtakes the others; needs `delay_ms` > 0, as in netem), `corrupt_pct` (one bit of the UDP payload
    flipped), `rate_kbit` (0: unlimited). `delay_corr_pct` correlates each delay draw with the previous one as
    netem does (`next = (1 - rho) * fresh + rho * last`, which also narrows the spread; needs `jitter_ms`).
    netem's loss and duplication correlations are left out on purpose: the same formula lowers the effective
    loss rate well below the asked one instead of making bursts.

    `limit_pkts` is netem's `limit`: the link's queue (what waits for its delay or its turn at the rate) holds at
    most that many packets, and a packet arriving at a full queue is dropped (1000, netem's default; at most
    `MAX_LIMIT_PKTS`). A limit alone shapes nothing (nothing waits), so such a fault is `empty`.
    """

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0
    duplicate_pct: float = 0.0
    reorder_pct: float = 0.0
    corrupt_pct: float = 0.0
    rate_kbit: float = 0.0
    delay_corr_pct: float = 0.0
    distribution: str = "uniform"
    limit_pkts: int = DEFAULT_LIMIT_PKTS

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "distribution":
                if value not in DISTRIBUTIONS:
                    raise UsageError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, got {value!r}")
                continue
            if f.name == "limit_pkts":
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT_PKTS:
                    raise _bad_limit(value)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UsageError(f"{f.name} must be a number, got {value!r}")
            if value < 0:
                raise UsageError(f"{f.name} must be >= 0, got {value:g}")
            if f.name.endswith("_pct") and value > 100:
                raise UsageError(f"{f.name} must be within 0..100, got {value:g}")
        if self.delay_ms > 60_000 or self.jitter_ms > 60_000:
            raise UsageError(f"delay_ms/jitter_ms must be at most 60000, got {self.delay_ms:g}/{self.jitter_ms:g}")
        if self.reorder_pct > 0 and self.delay_ms == 0:
            raise UsageError(f"reorder_pct={self.reorder_pct:g} needs delay_ms > 0: reordered packets overtake "
                             "delayed ones (as in netem)", hint="e.g. delay_ms=10,reorder_pct=25")
        if self.delay_corr_pct and not self.jitter_ms:
            raise UsageError(f"delay_corr_pct={self.delay_corr_pct:g} needs jitter_ms > 0: it correlates the jitter")
        if self.distribution != "uniform" and not self.jitter_ms:
            raise UsageError(f"distribution={self.distribution} needs jitter_ms > 0: it shapes the jitter",
                             hint="e.g. delay_ms=20,jitter_ms=5,distribution=normal")

    @property
    def empty(self) -> bool:
        """Nothing to do: every field at its default, or only the queue's limit set (nothing waits in it)."""
        return not self.as_dict().keys() - {"limit_pkts"}

    @property
    def only_loss(self) -> bool:
        """Uncorrelated loss and nothing else (what iptables statistic can do)."""
        return set(self.as_dict()) == {"loss_pct"}

    def merged(self, other: "LinkFault") -> "LinkFault":
        """This fault with every non-default field of `other` on top (slow then flaky keeps both)."""
        return LinkFault(**{**asdict(self), **other.as_dict()})

    def as_dict(self) -> dict[str, float | int | str]:
        """The fields that differ from the defaults."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}


FAULT_FIELDS = tuple(f.name for f in fields(LinkFault))
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)(kbit|mbit|gbit)$")
_INT_RE = re.compile(r"^[+-]?\d+$")


def _field_value(field_name: str, raw: object) -> float | int | str:
    if field_name == "distribution":
        return str(raw).strip()
    if field_name == "limit_pkts":
        return _limit_pkts(raw)
    if field_name == "rate_kbit" and isinstance(raw, str):
        match = _RATE_RE.match(raw.strip().lower())
        if match:
            return float(match.group(1)) * {"kbit": 1, "mbit": 1000, "gbit": 1_000_000}[match.group(2)]
    if isinstance(raw, bool):
        raise UsageError(f"{field_name} must be a number, got {raw!r}")
    try:
        return float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"{field_name} must be a number, got {raw!r}") from None


def _limit_pkts(raw: object) -> int:
    """`limit_pkts` as an int: an int, or the text of one (`500`); LinkFault checks its range."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    text = raw.strip() if isinstance(raw, str) else ""
    if not _INT_RE.match(text):
        raise _bad_limit(raw)
    return int(text)


def link_fault(values: Mapping[str, object]) -> LinkFault:
    """A `LinkFault` from a mapping of field names to numbers (`rate` may be `1mbit`). Raises `UsageError`."""
    unknown = set(values) - set(FAULT_FIELDS) - {"rate"}
    if unknown:
        raise UsageError(f"unknown link fault field(s) {', '.join(sorted(unknown))}; known: {', '.join(FAULT_FIELDS)}")
    kwargs = {("rate_kbit" if k == "rate" else k): _field_value("rate_kbit" if k == "rate" else k, v)
              for k, v in values.items()}
    return LinkFault(**kwargs)


def parse_link_fault(text: str) -> LinkFault:
    """`delay_ms=20,jitter_ms=5,loss_pct=1` -> LinkFault. Raises `UsageError` naming the bad field."""
    values: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"malformed link fault {text!r}: {item!r} is not field=value",
                             hint="e.g. 'delay_ms=20,jitter_ms=5,loss_pct=1'")
        values[key.strip()] = value.strip()
    if not values:
        raise UsageError("empty link fault", hint="e.g. 'delay_ms=20,loss_pct=1'")
    return link_fault(values)


def matrix(links: Iterable[tuple[str, str]], fault: LinkFault) -> LinkMatrix:
    """The same fault on every (src, dst) link of `links`."""
    return {(src, dst): fault for src, dst in links}


def all_links(nodes: Sequence[str], between: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """Every directed link among `nodes` (or from/to the nodes of `between` only)."""
    scope = set(between) if between is not None else set(nodes)
    return [(a, b) for a in nodes for b in nodes if a != b and (a in scope or b in scope)]


def _link_pairs(link: str, nodes: Sequence[str], whole: str, hint: str) -> list[tuple[str, str]]:
    both = "<->" in link
    left, arrow, right = link.partition("<->" if both else "->")
    if not arrow:
        raise UsageError(f"malformed link {link.strip()!r}: expected src->dst or a<->b", hint=hint)
    srcs = list(nodes) if left.strip() == "*" else _names(left, whole)
    dsts = list(nodes) if right.strip() == "*" else _names(right, whole)
    unknown = set(srcs + dsts) - set(nodes)
    if unknown:
        raise UsageError(f"link {link.strip()!r} names unknown node(s) {', '.join(sorted(unknown))}; "
                         f"nodes: {', '.join(nodes)}")
    pairs = [(s, d) for s in srcs for d in dsts if s != d]
    if both:
        pairs += [(d, s) for s, d in pairs]
    if not pairs:
        raise UsageError(f"link {link.strip()!r} names no link between two different nodes")
    return pairs


def parse_links(text: str, nodes: Sequence[str]) -> list[tuple[str, str]]:
    """`n1->n2;n2<->n3;*->n1` -> directed (src, dst) pairs. Raises `UsageError`."""
    hint = "e.g. 'n1->n2;n2<->n3;*->n1'"
    pairs: list[tuple[str, str]] = []
    for link in filter(None, (c.strip() for c in text.split(";"))):
        pairs += [p for p in _link_pairs(link, nodes, text, hint) if p not in pairs]
    if not pairs:
        raise UsageError("no link given", hint=hint)
    return pairs


def parse_matrix(text: str, nodes: Sequence[str]) -> LinkMatrix:
    """`n1->n2:delay_ms=20;n2->n1:loss_pct=5` (also `n1<->n2:...`, `*->n3:...`) -> LinkMatrix.

    Raises `UsageError` for malformed text, unknown nodes and bad values.
    """
    out: LinkMatrix = {}
    hint = "e.g. 'n1->n2:delay_ms=20;n2<->n3:loss_pct=5;*->n1:duplicate_pct=10'"
    for clause in filter(None, (c.strip() for c in text.split(";"))):
        link, sep, spec = clause.partition(":")
        if not sep:
            raise UsageError(f"malformed link matrix clause {clause!r}: expected 'src->dst:field=value,...'",
                             hint=hint)
        fault = parse_link_fault(spec)
        for pair in _link_pairs(link, nodes, text, hint):
            out[pair] = out[pair].merged(fault) if pair in out else fault
    if not out:
        raise UsageError("empty link matrix", hint=hint)
    return out


def check_matrix(links: Mapping[tuple[str, str], LinkFault], nodes: Sequence[str]) -> None:
    """Raises `UsageError` for a link naming an unknown node or a node linked to itself."""
    for src, dst in links:
        unknown = {src, dst} - set(nodes)
        if unknown:
            raise UsageError(f"link {src}->{dst} names unknown node(s) {', '.join(sorted(unknown))}; "
                             f"nodes: {', '.join(nodes)}")
        if src == dst:
            raise UsageError(f"link {src}->{dst} links a node to itself")
