"""Errors of the multicast layer (part of the one `node.errors.SplitlabError` hierarchy)."""
from __future__ import annotations

from node.errors import UsageError, WindowFull

__all__ = ["SenderClosed", "WindowFull"]  # WindowFull lives in node.errors: unicast raises it too


class SenderClosed(UsageError):
    """The multicast sender was closed (`close` request): sends fail cleanly, blocked senders were woken."""
