"""What the WAL needs from the timestamp oracle: the allocator protocols.

They sit at the package root, beside the errors, so that the WAL and the TSO share
them without importing each other. :class:`streamwal.tso.LocalAllocator` implements
both; any other allocator needs only :class:`TimestampAllocator`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["CachedTimestampAllocator", "TimestampAllocator"]


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

    async def allocate(self) -> int:
        """A timestamp above every one this allocator returned before."""
        ...

    async def sync(self) -> None:
        """Forget any cached range: the next :meth:`allocate` is fetched from the oracle."""
        ...


@runtime_checkable
class CachedTimestampAllocator(TimestampAllocator, Protocol):
    """An allocator that can also answer from a local cache without suspending.

    The WAL's append path uses :meth:`allocate_cached` when the allocator has it (the
    ordered writer checks once, with ``isinstance``): an append served from the cache
    does its whole ordered section without suspending.
    """

    def allocate_cached(self) -> int | None:
        """The next timestamp if one is cached (same guarantee as ``allocate``), else None."""
        ...
