"""Client of a node's control API (HTTP+JSON over the control network, with the run's token)."""
from __future__ import annotations

from typing import Any

import requests

from node.errors import EnvironmentProblem, UsageError


class NodeClient:
    """Talks to one node at `url` (e.g. http://172.20.0.2:7000)."""

    def __init__(self, name: str, url: str, token: str, timeout_s: float = 5.0) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {token}"
        self.timeout_s = timeout_s

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> requests.Response:
        try:
            return self._session.request(method, self.url + path, json=body, timeout=self.timeout_s)
        except requests.RequestException as exc:
            raise EnvironmentProblem(f"node {self.name}: control API at {self.url} not reachable: {exc}",
                                     hint="is the node running? see 'docker logs' of its container") from None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        resp = self._request(method, path, body)
        try:
            data = resp.json()
        except ValueError:
            data = {"error": resp.text[:500]}
        if resp.status_code == 400:
            raise UsageError(f"node {self.name}: {data.get('error')}")
        if resp.status_code >= 300:
            raise EnvironmentProblem(f"node {self.name}: {method} {path} answered {resp.status_code}: "
                                     f"{data.get('error', data)}")
        return data

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def state(self) -> dict[str, Any]:
        return self._call("GET", "/state")

    def metrics(self) -> str:
        """The node's `/metrics`: its state in the Prometheus text format (node/metrics.py)."""
        resp = self._request("GET", "/metrics")
        if resp.status_code != 200:
            raise EnvironmentProblem(f"node {self.name}: GET /metrics answered {resp.status_code}: {resp.text[:200]}")
        return resp.text

    def hears(self) -> set[str]:
        """The peers this node currently hears (liveness layer)."""
        peers = self.state()["layers"]["liveness"]
        return {peer for peer, rec in peers.items() if rec["heard"]}

    def ping(self, to: str, count: int = 1, interval_ms: float = 10) -> dict[str, Any]:
        return self._call("POST", "/workload/ping", {"to": to, "count": count, "interval_ms": interval_ms})

    def unicast(self, to: str, count: int, size: int = 100, rate: float = 0) -> int:
        """Start a reliable unicast workload; returns its workload id."""
        return self._call("POST", "/workload/unicast", {"to": to, "count": count, "size": size,
                                                        "rate": rate})["workload_id"]

    def multicast(self, count: int, size: int = 100, rate: float = 0) -> int:
        """Start a reliable multicast workload (to the node's current view); returns its workload id."""
        return self._call("POST", "/workload/multicast", {"count": count, "size": size,
                                                          "rate": rate})["workload_id"]

    def view(self) -> dict[str, Any] | None:
        """The node's current view: {"view_id": [coord, n], "members": [...]}, or None before the first."""
        return self.state().get("view")

    def quiesce(self) -> dict[str, Any]:
        """End the node's history now (`node_stop`, then nothing more) while it goes on until it stops."""
        return self._call("POST", "/quiesce")

    def admin(self, op: str, peer: str, **extra: Any) -> dict[str, Any]:
        """A unicast admin operation: close, remove_receive or sync, toward `peer`."""
        return self._call("POST", f"/admin/{op}", {"peer": peer, **extra})
