"""Reading a channel's topic with a Pulsar reader (no subscription, no acks)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pulsar
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.errors import translate
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.errors import ClosedError
from streamwal.timeouts import within
from streamwal.wal.backend import BackendMessage
from streamwal.wal.message_id import MessageId

__all__ = ["PulsarScanner"]

#: how often a read that waits checks whether its reader was closed under it
CLOSE_PROBE_S = 1.0


class PulsarScanner:
    """An async iterator over a topic; ``close()`` may be called at any time.

    ``first`` is delivered before what the reader reads (StartFrom read it to check
    the start id against the topic); ``drop`` tells the messages a read opened inside
    the truncated part skips, until the first it keeps (ids only grow from there).
    """

    def __init__(
        self,
        reader: Any,
        channel: str,
        first: BackendMessage | None = None,
        on_close: Callable[[PulsarScanner], None] = lambda _: None,
        drop: Callable[[MessageId], bool] | None = None,
    ) -> None:
        self._reader = reader
        self._drop = drop
        self._channel = channel
        self._pending = first
        self._closed = False
        # the C extension's reader: a read of a message already received returns at once
        self._read_now: Callable[[int], Any] | None = getattr(
            getattr(reader, "_reader", None), "read_next", None
        )
        self.on_close = on_close
        """Told once, at close (the channel forgets the scanner: no leak per read)."""

    def __aiter__(self) -> AsyncIterator[BackendMessage]:
        return self

    async def __anext__(self) -> BackendMessage:
        if self._drop is None:
            return await self._next()
        while True:
            message = await self._next()
            if not self._drop(message.message_id):
                self._drop = None
                return message

    async def _next(self) -> BackendMessage:
        if self._closed:
            raise ClosedError(f"scanner of {self._channel!r} is closed")
        if self._pending is not None:
            entry, self._pending = self._pending, None
            return entry
        read_now = self._read_now
        if read_now is not None:
            try:
                return to_backend_message(read_now(0))
            except Exception:  # nothing received yet, or an error: the read below says which
                pass
        try:
            message = await self._read_next()
        except PulsarException as exc:
            if self._closed or exc.error() == pulsar.Result.AlreadyClosed:
                raise ClosedError(f"scanner of {self._channel!r} is closed") from exc
            raise translate(exc, channel=self._channel, what="read") from exc
        return to_backend_message(message)

    async def _read_next(self) -> Any:
        """The reader's next message, or AlreadyClosed once its client is gone.

        Only for a read that does not complete at once (:meth:`__anext__` first takes
        what the reader has already received, without a task or a timer: the probe
        cost most of a catch-up read's time when every read paid for it).

        The client's close fails pending reads, but not always: it races the
        receive queue (Java's client has the same flaky race). So a read that waits
        probes, while the reader is disconnected, whether it is closed for good (a
        closed reader answers at once; one that reconnects does not say closed).
        """
        read = asyncio.ensure_future(self._reader.read_next())
        try:
            while True:
                done, _ = await asyncio.wait({read}, timeout=CLOSE_PROBE_S)
                if done:
                    return read.result()
                if not self._reader._reader.is_connected() and await self._closed_for_good():
                    raise PulsarException(pulsar.Result.AlreadyClosed)
        finally:
            if not read.done():
                read.cancel()

    async def _closed_for_good(self) -> bool:
        try:
            await within(self._reader.has_message_available(), CLOSE_PROBE_S)
        except PulsarException as exc:
            return bool(exc.error() == pulsar.Result.AlreadyClosed)
        except TimeoutError:
            pass  # reconnecting: the read goes on
        return False

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.on_close(self)
        try:
            await self._reader.close()
        except PulsarException:
            pass  # already closed by the client or the broker


def to_backend_message(message: Any) -> BackendMessage:
    return BackendMessage(
        PulsarMessageId.from_pulsar(message.message_id()),
        message.data(),
        message.properties(),
    )
