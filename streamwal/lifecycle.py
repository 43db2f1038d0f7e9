"""The two lifecycles a component offers a caller's ``async with``.

A component does no I/O in ``__init__``; a caller either uses it in ``async with`` or
calls its ``start`` (if it has one) and ``close`` itself, as aiokafka's clients do.
:class:`Closeable` is for a component ready once built (a client over a lazy
channel, an allocator): leaving the block closes it. :class:`Startable` is for one
that must reach something first (a store, a server): entering the block starts it.
Neither closes a component whose ``start`` raised: ``start`` leaves nothing behind
when it fails, or its own ``close`` is idempotent and the caller may call it.
"""

from __future__ import annotations

from typing import Self

__all__ = ["Closeable", "Startable"]


class Closeable:
    """Leaving ``async with`` awaits :meth:`close` (idempotent in every subclass)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        raise NotImplementedError


class Startable(Closeable):
    """Entering ``async with`` awaits :meth:`start`, leaving it :meth:`close`."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def start(self) -> None:
        raise NotImplementedError
