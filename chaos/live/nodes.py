"""The nodes' `/metrics`, scraped over the control network and parsed with prometheus_client's own parser, as
one `NodeMetrics` per node: its samples and the few figures `splitlab top` shows. A node that does not answer,
or answers something that is not the Prometheus text format, is a `NodeMetrics` with `error` set, never an
exception."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

from prometheus_client.parser import text_string_to_metric_families

from chaos.cluster.client import NodeClient
from chaos.cluster.model import Cluster
from node.errors import SplitlabError

SCRAPE_TIMEOUT_S = 0.8  # below top's refresh period: a node that does not answer costs at most one frame
Labels = dict[str, str]


@dataclass
class NodeMetrics:
    """One node's samples (sample name -> [(labels, value)]), or why there are none."""

    node: str
    samples: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)
    error: str | None = None

    def total(self, *names: str) -> float | None:
        """The sum of every sample of `names`; None when the node gave none of them."""
        values = [v for name in names for _labels, v in self.samples.get(name, ())]
        return sum(values) if values else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """The samples of `name`, summed per value of `label`."""
        out: dict[str, float] = {}
        for labels, value in self.samples.get(name, ()):
            key = labels.get(label, "")
            out[key] = out.get(key, 0.0) + value
        return out

    def first(self, name: str) -> tuple[Labels, float] | None:
        found = self.samples.get(name)
        return found[0] if found else None


def parse(node: str, text: str) -> NodeMetrics:
    """`text` (the Prometheus text format) as a node's metrics; text that does not parse gives `error`."""
    samples: dict[str, list[tuple[Labels, float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        return NodeMetrics(node, error=f"unreadable metrics ({exc})")
    if not any(name.startswith("splitlab_") for name in samples):
        return NodeMetrics(node, error="no splitlab metrics in the answer")
    return NodeMetrics(node, samples)


def scrape_one(client: NodeClient) -> NodeMetrics:
    try:
        return parse(client.name, client.metrics())
    except SplitlabError as exc:
        return NodeMetrics(client.name, error=exc.message.splitlines()[0])


def scrape(clients: Iterable[NodeClient]) -> list[NodeMetrics]:
    """Every node's metrics, scraped side by side, in the order of `clients`."""
    clients = list(clients)
    if not clients:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(clients))) as pool:
        return list(pool.map(scrape_one, clients))


def scrape_cluster(cluster: Cluster, timeout_s: float = SCRAPE_TIMEOUT_S) -> list[NodeMetrics]:
    """Every node of `cluster`, each asked with `timeout_s`."""
    return scrape(cluster.client(name, timeout_s) for name in cluster.names)
