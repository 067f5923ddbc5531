"""A node's protocol stack: several sans-IO layers, each fed the events that belong to it.

`Stack` is itself sans-IO and is what both the UDP runtime and the simulator drive:
- a `Received` message goes to the layer whose `MESSAGES` lists its class; the driver feeds a datagram's messages
  together (`received_batch`), and a layer with `handle_batch` takes a run of them in one call;
- timers are namespaced per layer: a layer's `SetTimer(key)` becomes `SetTimer((layer_name, key))`, and the
  runtime's `TimerFired((layer_name, key))` goes back to that layer as `TimerFired(key)`;
- an `AppRequest` goes to the layer named in `request(layer, ...)`;
- `PeerRestarted` goes to every layer (`peer_restarted`);
- `ViewInstalled` goes to every layer; an `InstallView` effect of any layer (the membership layer's) is kept in
  the output and followed at once by the effects of `view()` on every layer (the installing layer included), so
  the runtime and the simulator only record it.

A layer is a `node.core.Protocol` with `MESSAGES` (the wire classes it receives), and optionally
`start(now_s) -> effects` (first timers) and `state(now_s) -> dict` (for the control API).
"""
from __future__ import annotations

from typing import Any, Hashable

from node.core import (AppRequest, CancelTimer, Effect, InstallView, PeerRestarted, Protocol, Received, SetTimer,
                       TimerFired, ViewInstalled)
from node.errors import UsageError


class Stack:
    """Routes events to named layers and namespaces their timers."""

    def __init__(self, layers: dict[str, Protocol]) -> None:
        self.layers = dict(layers)
        self._by_message: dict[type, str] = {}
        for name, layer in self.layers.items():
            for cls in getattr(layer, "MESSAGES", ()):
                if cls in self._by_message:
                    raise ValueError(f"{cls.__name__} claimed by layers {self._by_message[cls]} and {name}")
                self._by_message[cls] = name

    def _scoped(self, name: str, effects: list[Effect], now_s: float | None = None) -> list[Effect]:
        """Namespace the timers of `name`'s effects; with `now_s`, expand `InstallView` into every layer's view."""
        for eff in effects:  # most lists (a message's) have none of them: returned as they are, not copied
            cls = type(eff)
            if cls is SetTimer or cls is CancelTimer or cls is InstallView:
                break
        else:
            return effects
        out: list[Effect] = []
        for eff in effects:
            if isinstance(eff, SetTimer):
                out.append(SetTimer((name, eff.key), eff.at_s))
            elif isinstance(eff, CancelTimer):
                out.append(CancelTimer((name, eff.key)))
            elif isinstance(eff, InstallView) and now_s is not None:
                out.append(eff)
                out += self.view(now_s, eff.view_id, eff.members)
            else:
                out.append(eff)
        return out

    def received(self, now_s: float, src: str, msg: Any) -> list[Effect]:
        """Feed one decoded message; a message no layer claims yields no effects (the runtime counts it)."""
        name = self._by_message.get(type(msg))
        if name is None:
            return []
        return self._scoped(name, self.layers[name].handle(now_s, Received(src, msg)), now_s)

    def received_batch(self, now_s: float, src: str, msgs: list[Any]) -> tuple[list[Effect], int]:
        """Feed the messages of one datagram, in order: (their effects, how many no layer claims). A run of
        messages for a layer with `handle_batch` (`node.core.BatchingProtocol`) goes to it at once (a bundled
        datagram of DATA or acks: one call, the layer's bookkeeping once); any other message is fed on its own, as by
        `received`, so a view a message installs reaches every layer before the next message."""
        by_message = self._by_message
        out: list[Effect] = []
        unclaimed = 0
        run: list[Any] = []
        run_layer = ""  # the layer of `run` (while `run` is empty: none)
        for msg in msgs:
            name = by_message.get(type(msg))
            if name is None:
                unclaimed += 1
                continue
            if run and name != run_layer:
                out += self._batch(run_layer, run, now_s, src)
                run = []
            run_layer = name
            run.append(msg)
        if run:
            out += self._batch(run_layer, run, now_s, src)
        return out, unclaimed

    def _batch(self, name: str, msgs: list[Any], now_s: float, src: str) -> list[Effect]:
        handle_batch = getattr(self.layers[name], "handle_batch", None)
        if handle_batch is not None:
            return self._scoped(name, handle_batch(now_s, src, msgs), now_s)
        out: list[Effect] = []
        for msg in msgs:
            out += self.received(now_s, src, msg)
        return out

    def timer(self, now_s: float, key: tuple[str, Hashable]) -> list[Effect]:
        name, inner = key  # keys are always (layer, key) because _scoped made them so
        return self._scoped(name, self.layers[name].handle(now_s, TimerFired(inner)), now_s)

    def request(self, now_s: float, layer: str, op: str, args: dict[str, Any] | None = None) -> list[Effect]:
        """Send an application request to `layer`. Raises `UsageError` for an unknown layer."""
        return self._scoped(layer, self._layer(layer).handle(now_s, AppRequest(op, args or {})), now_s)

    def send(self, now_s: float, layer: str, to: str, payload: bytes) -> list[Effect]:
        """An application message to `to` through `layer`, its arguments checked by the caller
        (`node.core.Protocol.handle_send`). Raises `UsageError` for an unknown layer."""
        return self._scoped(layer, self._layer(layer).handle_send(now_s, to, payload), now_s)

    def _layer(self, name: str) -> Protocol:
        """The layer an application request or send names. Raises `UsageError` for an unknown one."""
        layer = self.layers.get(name)
        if layer is None:
            raise UsageError(f"no protocol layer {name!r} on this node; layers: {', '.join(self.layers)}")
        return layer

    def view(self, now_s: float, view_id: tuple[str, int], members: tuple[str, ...]) -> list[Effect]:
        """Give every layer the view (a layer's own `InstallView` in reaction is expanded in turn)."""
        return self._to_every_layer(now_s, ViewInstalled(view_id, members))

    def peer_restarted(self, now_s: float, peer: str) -> list[Effect]:
        """Tell every layer that `peer` restarted (before its new life's first message is fed)."""
        return self._to_every_layer(now_s, PeerRestarted(peer))

    def _to_every_layer(self, now_s: float, event: ViewInstalled | PeerRestarted) -> list[Effect]:
        out: list[Effect] = []
        for name, layer in self.layers.items():
            out += self._scoped(name, layer.handle(now_s, event), now_s)
        return out

    def start(self, now_s: float) -> list[Effect]:
        """Let every layer that has `start(now_s)` set its first timers."""
        out: list[Effect] = []
        for name, layer in self.layers.items():
            starter = getattr(layer, "start", None)
            if starter is not None:
                out += self._scoped(name, starter(now_s), now_s)
        return out
