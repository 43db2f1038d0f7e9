"""What the WAL needs from the timestamp oracle (structurally met by ``tso``'s allocators)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["TimestampAllocator"]


@runtime_checkable
class TimestampAllocator(Protocol):
    """Hands out strictly increasing timestamps; may be shared by several WALs.

    The WAL relies on two guarantees:

    - ``allocate()`` returns a value above every value it returned before.
    - after ``sync()`` returns, the next ``allocate()`` returns a value above every
      timestamp handed out by the oracle, to anyone, before ``sync()`` was called (a
      locally cached batch is dropped). The first time tick depends on it.

    Both raise retriable :class:`~streamwal.errors.StreamwalError` subclasses
    (:class:`~streamwal.errors.UnavailableError`, :class:`~streamwal.errors.NotLeaderError`, ...)
    when the oracle cannot answer.
    """

    async def allocate(self) -> int: ...

    async def sync(self) -> None: ...
