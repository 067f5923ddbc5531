"""What one shaper process does, as data: its queue, mark and seed, the link faults toward each peer address,
the jammed peer addresses (a jammed partition: held until the jam is lifted), the message rules, and the run's
key on the authenticated wire (what a message rule rewrites is signed again with it: `node.wire.reseal`). Written
by the controller as JSON next to the run (owner only: it may hold the key), read by the shaper on start and on
SIGHUP; `generation` grows with every change so the controller can see when a reload took effect."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from chaos.faults.grudge import Jam, LinkFault
from chaos.faults.msgrules import MsgRule
from node.auth import WireKey
from node.errors import EnvironmentProblem

QUEUE_NUM = 71  # queues are per network namespace, so one number serves every node
BYPASS_MARK = 0x5E1  # packets the shaper sends itself (duplicates, split messages) carry it and skip the queue


def derive_seed(seed: int, *labels: object) -> int:
    """A stable 63-bit seed derived from `seed` and `labels` (the same everywhere, unlike hash())."""
    text = ":".join([str(seed), *map(str, labels)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


@dataclass
class ShaperSpec:
    run_id: str
    node: str
    seed: int
    generation: int = 1
    queue_num: int = QUEUE_NUM
    mark: int = BYPASS_MARK
    links: dict[str, LinkFault] = field(default_factory=dict)  # destination data IP -> fault
    rules: list[MsgRule] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # data IP -> node name
    jams: dict[str, Jam] = field(default_factory=dict)  # destination data IP -> how its held packets go at the heal
    auth_key: str = ""  # the run's key in hex on the authenticated wire (chaos.cluster.authkey); "": the open wire

    @cached_property
    def key(self) -> WireKey | None:
        """The run's key (None: the open wire), made once per spec."""
        return WireKey.from_hex(self.auth_key, "the shaper spec's auth_key") if self.auth_key else None

    @property
    def destinations(self) -> list[str]:
        """Every data IP whose traffic the shaper must see (link faults, jams or message rules)."""
        by_name = {name: ip for ip, name in self.names.items()}
        ips = set(self.links) | set(self.jams) | {by_name[r.dst] for r in self.rules if r.dst in by_name}
        return sorted(ips)

    def to_json(self) -> str:
        data = asdict(self)
        data["links"] = {ip: f.as_dict() for ip, f in self.links.items()}
        data["jams"] = {ip: j.as_dict() for ip, j in self.jams.items()}
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ShaperSpec":
        data = json.loads(text)
        data["links"] = {ip: LinkFault(**f) for ip, f in data["links"].items()}
        data["rules"] = [MsgRule(**r) for r in data["rules"]]
        data["jams"] = {ip: Jam(**j) for ip, j in data.get("jams", {}).items()}
        return cls(**data)

    def write(self, path: Path) -> None:
        """Write atomically (the shaper may read it at any moment)."""
        tmp = path.with_suffix(".tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.unlink(missing_ok=True)
            tmp.touch(mode=0o600)
            tmp.write_text(self.to_json())
            os.replace(tmp, path)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot write the shaper spec {path}: {exc}") from None
