"""Records of `splitlab fuzz`: every datagram sent, for replays and for naming culprits.

`runs/<run>/fuzz/<seed>.jsonl` holds a header line (kind, version, run, seed, count, targets, mutation classes,
spoofed share, and the generator's context: the targets' windows as their /state showed them) and then one line
per datagram (`fuzzgen.Case.as_record`: index, target, source, sending namespace, mutation, detail, hex);
`<seed>.pcap` holds the same datagrams as raw IP packets (`chaos.wire.capture.pcap_writer`; `splitlab chaos
inject --pcap` replays them).
`load_replay` reads a record back, and regenerates the datagrams from the header alone when its lines are
missing; `select` and `retarget` pick datagrams by index and make them for another run of the same nodes.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from chaos.fuzz import gen as fuzzgen
from chaos.wire import capture
from node import wire
from node.errors import UsageError, WireError

RECORD_KIND = "splitlab-fuzz"
RECORD_VERSION = 1


class Recorder:
    """Writes the header and every datagram of a fuzz run to `<dir>/<stem>.jsonl` and `<dir>/<stem>.pcap`
    (`lines=False`: the header only, from which the same datagrams can be generated again)."""

    def __init__(self, directory: Path, stem: str, header: dict[str, Any], lines: bool = True) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = directory / f"{stem}.jsonl"
        self.pcap_path = directory / f"{stem}.pcap" if lines else None
        self.lines = lines
        self._jsonl = open(self.jsonl_path, "w")
        self._jsonl.write(json.dumps({"kind": RECORD_KIND, "version": RECORD_VERSION, **header}) + "\n")
        self._pcap = capture.pcap_writer(self.pcap_path) if self.pcap_path is not None else None

    def write(self, case: fuzzgen.Case, packet: bytes) -> None:
        if self.lines:
            self._jsonl.write(json.dumps(case.as_record()) + "\n")
            self._pcap.write(packet)

    def close(self) -> None:
        self._jsonl.close()
        if self._pcap is not None:
            self._pcap.close()


def write_cases(path: Path, header: dict[str, Any], cases: list[fuzzgen.Case]) -> Path:
    """A replayable file of `cases` (e.g. the culprits of a failure)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fh.write(json.dumps({"kind": RECORD_KIND, "version": RECORD_VERSION, **header}) + "\n")
        for case in cases:
            fh.write(json.dumps(case.as_record()) + "\n")
    return path


def load_replay(path: Path) -> tuple[dict[str, Any], Iterator[fuzzgen.Case], int]:
    """(header, cases, how many) of a recorded fuzz file; a file with the header only gives the cases the
    header's seed, count and context generate. Raises `UsageError` for a missing or foreign file."""
    try:
        fh = open(path)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    with fh:
        try:
            header = json.loads(fh.readline() or "null")
            records = [json.loads(line) for line in fh if line.strip()]
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not a splitlab fuzz record: {exc}") from None
    if not isinstance(header, dict) or header.get("kind") != RECORD_KIND:
        raise UsageError(f"{path}: not a splitlab fuzz record (no '{RECORD_KIND}' header line)",
                         hint="give a runs/<run>/fuzz/<seed>.jsonl file")
    try:
        if records:
            return header, iter([fuzzgen.Case.from_record(r) for r in records]), len(records)
        ctx = fuzzgen.Context.from_dict(header["context"])
        gen = fuzzgen.Generator(header["seed"], ctx, header["targets"], tuple(header["mutations"]),
                                header["spoof_pct"])
        return header, gen.cases(header["count"]), header["count"]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: a damaged fuzz record: {exc!r}") from None


def select(cases: Iterable[fuzzgen.Case], spec: str | None) -> Iterator[fuzzgen.Case]:
    """The cases whose index is in `spec` ("5,10-20"; None: all). Raises `UsageError` for a bad spec."""
    if not spec:
        yield from cases
        return
    wanted: list[tuple[int, int]] = []
    for part in spec.split(","):
        low, sep, high = part.strip().partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise UsageError(f"--select {spec!r}: use indexes and ranges such as 5,10-20")
        wanted.append((int(low), int(high) if sep else int(low)))
    for case in cases:
        if any(a <= case.index <= b for a, b in wanted):
            yield case


def retarget(cases: Iterable[fuzzgen.Case], old_run: str, new_run: str) -> Iterator[fuzzgen.Case]:
    """Cases recorded on run `old_run` made for `new_run`: the old run's cluster id in a header becomes the new
    one's (other bytes, and foreign cluster ids on purpose, stay)."""
    if old_run == new_run:
        yield from cases
        return
    old, new = wire.cluster_id_of(old_run).to_bytes(4, "big"), wire.cluster_id_of(new_run).to_bytes(4, "big")
    for case in cases:
        data = case.data
        if data[3:7] == old:
            data = data[:3] + new + data[7:]
        yield fuzzgen.Case(case.index, case.target, case.src, case.via, case.mutation, case.types, case.detail,
                           case.well_formed, data)


def decoded(case: fuzzgen.Case, cluster_id: int) -> str:
    """The datagram as node.wire decodes it; for one it refuses, why, and what scapy's dissector (chaos.wire.dissect)
    reads in it."""
    try:
        sender, incarnation, messages = wire.decode_datagram_from(case.data, cluster_id)
    except WireError as exc:
        return f"rejected by node.wire: {exc.message}; scapy reads: {_dissected(case.data)}"
    except Exception as exc:  # a codec bug, reported as the finding it is
        return f"node.wire raised {type(exc).__name__} (a codec bug: only WireError is allowed): {exc}"
    shown = "; ".join(repr(m) if len(repr(m)) <= 160 else repr(m)[:157] + "..." for m in messages[:4])
    more = f" (+{len(messages) - 4} more)" if len(messages) > 4 else ""
    return f"from {sender!r} incarnation {incarnation}: {shown}{more}"


def _dissected(data: bytes, limit: int = 400) -> str:
    from chaos.wire import dissect

    try:
        text = repr(dissect.dissect(data))
    except Exception as exc:  # scapy gives up on some garbage; that is part of the answer
        return f"(nothing: {type(exc).__name__}: {exc})"
    return text if len(text) <= limit else text[:limit - 3] + "..."
