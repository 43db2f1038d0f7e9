"""The caller side of TSO: hand out timestamps from a locally cached range.

A :class:`LocalAllocator` asks its :class:`TimestampSource` for ``batch_size``
timestamps in one call and hands them out one by one without I/O. Concurrent callers
that find the range empty share one in-flight fetch. A fetched range that is not
strictly above the previous one is rejected with :class:`TimestampRegressionError`
and never handed out, so the values an allocator returns strictly increase.

A range is handed out for at most ``max_age_s`` after it was fetched, then dropped
(the next caller fetches): a timestamp's physical part is the TSO's clock when its
range was fetched, so on a channel written a few times a minute a range of 1000 would
stamp time ticks many seconds, even minutes, behind the time of the write, and
``channel status`` would date the last append that far back. The drop is a timer, so
the append path pays nothing for it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final, Protocol, runtime_checkable

from streamwal.errors import ClosedError, InvalidInputError, TimestampRegressionError
from streamwal.lifecycle import Closeable
from streamwal.timestamps import TimestampAllocator
from streamwal.tso.metrics import record_fetch_latency
from streamwal.tso.timestamp import MAX_LOGICAL

__all__ = ["DEFAULT_MAX_AGE_S", "LocalAllocator", "TimestampAllocator", "TimestampSource"]

#: how long a fetched range is handed out at most: time ticks stay within this of the
#: TSO's clock, for one fetch a second at most on an idle channel
DEFAULT_MAX_AGE_S = 1.0


@runtime_checkable
class TimestampSource(Protocol):
    """Where ranges come from (the in-process oracle, a remote TSO service)."""

    async def fetch(self, count: int) -> int:
        """Reserve ``count`` consecutive timestamps; return the largest of them."""
        ...

    async def close(self) -> None: ...


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class LocalAllocator(Closeable):
    """A cached range of timestamps over ``source``; a
    :class:`~streamwal.timestamps.CachedTimestampAllocator`.

    Errors of the source (``UnavailableError``, ``NotLeaderError``, ...) reach every
    caller waiting on the failed fetch; the next call fetches again. Cancelling a
    caller never cancels a fetch others wait on. :meth:`close` fails waiting callers
    with :class:`ClosedError`; the source is closed too when ``close_source``.
    """

    def __init__(
        self,
        source: TimestampSource,
        batch_size: int = 1000,
        *,
        close_source: bool = False,
        max_age_s: float = DEFAULT_MAX_AGE_S,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise InvalidInputError(f"batch_size: must be an integer: {batch_size!r}")
        if not 0 < batch_size < MAX_LOGICAL:
            raise InvalidInputError(f"batch_size: must be in [1, {MAX_LOGICAL}): {batch_size}")
        if not max_age_s > 0:
            raise InvalidInputError(f"max_age_s: must be > 0: {max_age_s!r}")
        self._source = source
        self.batch_size: Final = batch_size
        self._max_age = max_age_s
        self._expiry: asyncio.TimerHandle | None = None
        self._close_source = close_source
        self._next = 1  # the cached range is [_next, _end]; empty when _next > _end
        self._end = 0
        self._high = 0  # top of the last range accepted from the source
        self._last = 0  # the last timestamp handed out
        self._epoch = 0  # bumped by sync(): ranges requested before it are not used
        self._fetch: asyncio.Task[None] | None = None
        self._closed = False
        self._attributes = {"source": type(source).__name__}

    @property
    def last(self) -> int:
        """The last timestamp handed out (0 before the first)."""
        return self._last

    @property
    def cached(self) -> int:
        """How many timestamps the cached range still holds."""
        return max(0, self._end - self._next + 1)

    def allocate_cached(self) -> int | None:
        """The next timestamp if the cached range holds one (without suspending), else None.

        The append path's fast lane: most appends are served from the cache, and not
        creating a coroutine for them is measurable at tens of thousands per second.
        """
        nxt = self._next
        if nxt <= self._end:
            self._next = nxt + 1
            self._last = nxt
            return nxt
        return None

    async def allocate(self) -> int:
        """The next timestamp; fetches a new range only when the cached one is used up."""
        nxt = self._next
        if nxt <= self._end:
            self._next = nxt + 1
            self._last = nxt
            return nxt
        first, _ = await self._alloc_slow(1)
        return first

    async def alloc(self, count: int) -> tuple[int, int]:
        """``count`` consecutive timestamps as ``(first, last)``, both inclusive."""
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count < MAX_LOGICAL:
            raise InvalidInputError(f"count: must be in [1, {MAX_LOGICAL}): {count!r}")
        taken = self._take(count)
        return taken if taken is not None else await self._alloc_slow(count)

    async def sync(self) -> None:
        """Drop the cached range; a fetch already in flight is not used either."""
        if self._closed:
            raise ClosedError("timestamp allocator is closed")
        self._epoch += 1
        self._next, self._end = 1, 0

    async def close(self) -> None:
        """Stop handing out timestamps; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._next, self._end = 1, 0
        if self._expiry is not None:
            self._expiry.cancel()
        task, self._fetch = self._fetch, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        if self._close_source:
            await self._source.close()

    def _take(self, count: int) -> tuple[int, int] | None:
        """``count`` timestamps from the cached range, or ``None`` (nothing taken) when it
        holds fewer: synchronous, so no other task takes the same ones."""
        nxt = self._next
        last = nxt + count - 1
        if last > self._end:
            return None
        self._next = last + 1
        self._last = last
        return nxt, last

    async def _alloc_slow(self, count: int) -> tuple[int, int]:
        while True:
            if self._closed:
                raise ClosedError("timestamp allocator is closed")
            taken = self._take(count)
            if taken is not None:
                return taken
            task = self._fetch
            if task is None:
                task = asyncio.create_task(self._do_fetch(max(count, self.batch_size), self._epoch))
                task.add_done_callback(_consume_exception)
                self._fetch = task
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if self._closed and task.cancelled() and not _current_task_cancelling():
                    raise ClosedError("timestamp allocator closed while fetching") from None
                raise

    async def _do_fetch(self, size: int, epoch: int) -> None:
        started = time.perf_counter()
        try:
            top = await self._source.fetch(size)
        finally:
            if self._fetch is asyncio.current_task():
                self._fetch = None
            record_fetch_latency(time.perf_counter() - started, self._attributes)
        first = top - size + 1
        if first <= self._high:
            raise TimestampRegressionError(
                f"timestamp range [{first}, {top}] is not above the previous range "
                f"(which ended at {self._high}); not handed out"
            )
        self._high = top
        if epoch == self._epoch and not self._closed:
            self._next, self._end = first, top
            if self._expiry is not None:
                self._expiry.cancel()
            self._expiry = asyncio.get_running_loop().call_later(self._max_age, self._expire, top)

    def _expire(self, top: int) -> None:
        """Drop the range that ends at ``top`` if it is still the cached one."""
        if self._end == top:
            self._next, self._end = 1, 0


def _consume_exception(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()
