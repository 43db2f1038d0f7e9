"""Closing what the client made for nobody: a producer or consumer whose creation was
given up on, or one that is no longer used.

A creation the caller stops waiting for goes on in the client, which may still make
the producer or consumer later; left open, a late fencer would evict the next
writer, and a late consumer would hold a subscription's slot until its connection
closes. So an abandoned creation gets a reaper that closes what it makes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from streamwal.timeouts import within

__all__ = ["close_quietly", "reap"]


async def close_quietly(handle: Any, timeout: float) -> None:
    """Close a producer, consumer or reader nobody uses any more; a close that fails
    or does not answer within ``timeout`` is left to the client."""
    try:
        await within(handle.close(), timeout)
    except Exception:
        pass  # fenced, closed or disconnected already: gone from the topic either way


async def _close_made(creation: Awaitable[Any], timeout: float) -> None:
    try:
        made = await creation
    except Exception:
        return  # refused or timed out at the client: nothing was made
    await close_quietly(made, timeout)


def reap(
    creation: Awaitable[Any], timeout: float, reapers: set[asyncio.Future[None]]
) -> asyncio.Future[None]:
    """Close what an abandoned ``creation`` makes, if it makes anything; the reaper
    is kept in ``reapers`` until it is done."""
    reaper = asyncio.ensure_future(_close_made(creation, timeout))
    reapers.add(reaper)
    reaper.add_done_callback(reapers.discard)
    return reaper
