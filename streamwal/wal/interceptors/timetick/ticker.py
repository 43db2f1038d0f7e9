"""Periodic time ticks: readers' watermark advances even when nobody appends.

Every interval a time tick is allocated through the ordered write path. Whether it
is persisted is decided by one question: would a reader of the *log* miss it?

- If a non-system message was enqueued since the last persisted time tick (the
  channel is "dirty"), the tick is persisted after it. A reader of the backend (a
  read-only WAL, a scanner that fell back, another node) then gets a watermark after
  the data within one interval, not only at the next data message.
- Otherwise the log already ends with a time tick and says nothing new: the tick is
  only published in memory (write-ahead buffer and MVCC), for tailing readers. An
  idle channel costs no broker traffic.

A failed tick is not retried on its own: the next interval tries again (a failed
persisted tick leaves the channel dirty). A fenced error fences the WAL and ends the
loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from streamwal.errors import ChannelFencedError, ClosedError
from streamwal.tasks import RoundLoop
from streamwal.wal.backend import BackendWAL
from streamwal.wal.fence import Fence
from streamwal.wal.interceptors.timetick.writer import OrderedWriter

__all__ = ["PeriodicTimeTicker"]

_log = logging.getLogger(__name__)


class PeriodicTimeTicker(RoundLoop):
    """Owns the loop task; ``start()`` once, ``close()`` cancels and awaits it."""

    _wait_first = True  # the open wrote the first time tick
    #: the last tick failed: the next one makes sure the channel is writable first
    _failing = False

    def __init__(
        self,
        channel: str,
        writer: OrderedWriter,
        backend: BackendWAL,
        fence: Fence,
        interval: float,
    ) -> None:
        self._channel = channel
        self._writer = writer
        self._backend = backend
        self._fence = fence
        self._interval = interval

    def start(self) -> None:
        task = self._start_rounds(f"wal-time-tick:{self._channel}")
        if task is not None:
            task.add_done_callback(self._on_done)

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # a loop that died was logged (_on_done)
            await self._stop_rounds()

    def _on_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            _log.error(
                "channel %s: the time-tick loop died; watermarks stop advancing",
                self._channel,
                exc_info=task.exception(),
            )

    async def _round(self) -> None:
        if self._failing:
            await self._backend.ensure_writable()
        future = await self._writer.tick()
        if future is not None:
            try:
                await future
            except BaseException:
                self._writer.dirty = True  # the data still lacks a tick after it
                raise
        if self._failing:
            _log.info("channel %s: periodic time ticks recovered", self._channel)
            self._failing = False

    def _round_failed(self, exc: Exception) -> bool:
        if isinstance(exc, ChannelFencedError):
            self._fence.set(exc)
            return False
        if isinstance(exc, ClosedError):
            return False
        if not self._failing:
            _log.warning("channel %s: periodic time tick failed: %r", self._channel, exc)
        self._failing = True
        return True  # the next interval tries again
