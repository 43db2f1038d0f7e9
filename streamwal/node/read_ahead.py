"""Reading a scanner ahead of the frames that carry its messages (``ConsumeBatch``).

A task keeps the scanner going into a bounded buffer while a frame is being sent, taking
what the scanner has ready in one go (:meth:`~streamwal.wal.scanner.Scanner.next_batch`);
:meth:`ReadAhead.take` hands out what is ready, never waiting to fill a frame. A deque
and two events rather than ``asyncio.Queue``: a frame is taken in bulk, and its byte
bound needs to look at the next message before taking it, which a queue cannot.
"""

from __future__ import annotations

import asyncio
from collections import deque

from streamwal.wal.message import ImmutableMessage
from streamwal.wal.scanner import Scanner

__all__ = ["ReadAhead"]


class ReadAhead:
    """``start()`` once; :meth:`take` from one task; :meth:`close` closes the scanner."""

    def __init__(self, scanner: Scanner, limit: int) -> None:
        self._scanner = scanner
        self._limit = limit
        self._items: deque[ImmutableMessage] = deque()
        self._error: BaseException | None = None
        self._ready = asyncio.Event()  # something to take, or the error
        self._space = asyncio.Event()  # below the limit again
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        items = self._items
        try:
            while True:
                if len(items) >= self._limit:
                    self._space.clear()
                    await self._space.wait()
                items.extend(await self._scanner.next_batch(self._limit - len(items)))
                self._ready.set()
        except Exception as exc:  # after the messages before it, in order
            self._error = exc
            self._ready.set()

    async def take(self, max_messages: int, max_bytes: int) -> list[ImmutableMessage]:
        """At least one message, at most ``max_messages`` and about ``max_bytes`` of
        payload (a larger message goes alone). Raises the scanner's error once every
        message before it was taken."""
        items = self._items
        while not items:
            if self._error is not None:
                raise self._error
            self._ready.clear()
            await self._ready.wait()
        first = items.popleft()
        taken = [first]
        size = len(first.payload)
        while items and len(taken) < max_messages:
            size += len(items[0].payload)
            if size > max_bytes:
                break
            taken.append(items.popleft())
        self._space.set()
        return taken

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        await self._scanner.close()
