"""The JPype side of the JGroups node: the Python objects JGroups calls (the trace protocol's listener, the
channel's receiver) and the Java objects the node makes (messages). The proxies are declared `deferred`: their
Java interfaces are looked up when the first one is made, after `jpype.startJVM`.

Every callback hands its work to Python code that knows nothing of Java, and turns any exception into the node's
failure (`fail`): JGroups would log it and go on.
"""
from __future__ import annotations

from typing import Any, Callable

import jpype
from jpype import JImplements, JOverride

from jgnode.trace import Trace

Fail = Callable[[BaseException], None]


@JImplements("splitlab.TraceListener", deferred=True)
class _TraceListener:
    def __init__(self, trace: Trace, fail: Fail) -> None:
        self.trace = trace
        self.fail = fail

    @JOverride
    def arrived(self, message: Any, src: Any) -> None:
        try:
            self.trace.arrived(bytes(message), None if src is None else str(src))
        except Exception as exc:  # noqa: BLE001 - any bug here must stop the node, not vanish in JGroups' log
            self.fail(exc)

    @JOverride
    def settled(self) -> None:
        try:
            self.trace.settled()
        except Exception as exc:  # noqa: BLE001 - as above
            self.fail(exc)

    @JOverride
    def departing(self, message: Any, dest: Any) -> None:
        try:
            self.trace.departing(bytes(message), None if dest is None else str(dest))
        except Exception as exc:  # noqa: BLE001 - as above
            self.fail(exc)


@JImplements("org.jgroups.Receiver", deferred=True)
class _Receiver:
    def __init__(self, node: Any, fail: Fail) -> None:
        self.node = node
        self.fail = fail

    @JOverride
    def receive(self, msg: Any) -> None:
        try:
            buf = msg.getBuffer()
            self.node.on_message(bytes(buf) if buf is not None else b"", str(msg.getSrc()), msg.getDest() is None)
        except Exception as exc:  # noqa: BLE001 - as above
            self.fail(exc)

    @JOverride
    def viewAccepted(self, view: Any) -> None:  # noqa: N802 - JGroups' name
        try:
            vid = view.getVid()
            members = list(view.getMembers())
            self.node.on_view(str(vid.getCoordAddress()), int(vid.getId()), [str(m) for m in members],
                              {str(m): m for m in members})
        except Exception as exc:  # noqa: BLE001 - as above
            self.fail(exc)

    @JOverride
    def suspect(self, mbr: Any) -> None:
        try:
            self.node.on_suspect(str(mbr))
        except Exception as exc:  # noqa: BLE001 - as above
            self.fail(exc)

    @JOverride
    def block(self) -> None:
        pass

    @JOverride
    def getState(self) -> None:  # noqa: N802 - JGroups' name
        return None

    @JOverride
    def setState(self, state: Any) -> None:  # noqa: N802 - JGroups' name
        pass


def listener(trace: Trace, fail: Fail) -> Any:
    return _TraceListener(trace, fail)


def receiver(node: Any, fail: Fail) -> Any:
    return _Receiver(node, fail)


def message(dest: Any, payload: bytes) -> Any:
    """A JGroups message to `dest` (None: the group) carrying `payload`."""
    return jpype.JClass("org.jgroups.Message")(dest, None, jpype.JArray(jpype.JByte)(payload))
