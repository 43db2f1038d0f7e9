"""The WAL's knowledge that its owner was fenced: one object, asked by everything.

The backend is where a fence is learned (the broker's word): it raises
:class:`~streamwal.errors.ChannelFencedError` from ``ensure_writable`` or an append, and
keeps its own record of it, which is the backend's business (the backend contract does
not know the WAL). The WAL records the first such error here, once, and never copies the
backend's flag: whoever needs to know whether appends may go on asks this object. The
interceptor chain owns it (``InterceptorChain.fence``) and hands it to the interceptors
as their sink's ``fence``; the persisting interceptor and its periodic tick set it, the
WAL and the persisting interceptor check it, and the log listeners that must react
(seal the write-ahead buffer, end the transactions, wake retries) are told once through
their ``on_fenced`` hook, in the order the chain declares.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from streamwal.errors import ChannelFencedError
from streamwal.wal.metrics import record_fenced

__all__ = ["Fence", "FenceListener"]

_log = logging.getLogger(__name__)

FenceListener = Callable[[ChannelFencedError], None]


class Fence:
    """Holds the first :class:`~streamwal.errors.ChannelFencedError` of one WAL; for good."""

    __slots__ = ("_channel", "_error", "_listeners")

    def __init__(self, channel: str) -> None:
        self._channel = channel
        self._error: ChannelFencedError | None = None
        self._listeners: list[FenceListener] = []

    @property
    def error(self) -> ChannelFencedError | None:
        """The error that fenced this owner, if it was."""
        return self._error

    def listen(self, listener: FenceListener) -> None:
        """Call ``listener`` once, synchronously, when the fence is set (in the order
        listeners were added). A listener must not raise; one that does is logged."""
        self._listeners.append(listener)

    def set(self, error: ChannelFencedError) -> bool:
        """Record that this owner was fenced. The first call wins: it records the metric
        and tells the listeners, and returns ``True``; later calls change nothing."""
        if self._error is not None:
            return False
        self._error = error
        record_fenced(self._channel)
        _log.warning("channel %s: fenced, appends stop: %s", self._channel, error)
        for listener in self._listeners:
            try:
                listener(error)
            except Exception:
                _log.exception("channel %s: %r failed on fence", self._channel, listener)
        return True

    def check(self) -> None:
        """Raise a :class:`~streamwal.errors.ChannelFencedError` (nothing written) once
        this owner was fenced."""
        if self._error is not None:
            raise ChannelFencedError(self._channel, f"this owner was fenced: {self._error.reason}")
