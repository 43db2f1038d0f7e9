"""Bounded reads of a channel's log by the owner itself (not by a reader).

Used to rebuild state from what earlier owners wrote (idempotence windows) and to
look an append of unknown outcome up. A read ends at ``until`` (exclusive), when no
entry comes for ``idle`` seconds (the end of the log), or after ``bound`` seconds;
entries that do not decode are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from streamwal.errors import DecodeError
from streamwal.timeouts import within
from streamwal.wal.backend import BackendWAL, DeliveryPolicy
from streamwal.wal.message import ImmutableMessage, MessageIdDecoder, decode
from streamwal.wal.message_id import MessageId

__all__ = ["read_log"]


async def read_log(
    backend: BackendWAL,
    decode_id: MessageIdDecoder,
    policy: DeliveryPolicy,
    *,
    until: MessageId | None = None,
    idle: float = 1.0,
    bound: float = 10.0,
) -> AsyncGenerator[ImmutableMessage, None]:
    """The decoded entries from ``policy``; raises ``TimeoutError`` past ``bound``."""
    async with asyncio.timeout(bound):
        scanner = await backend.read(policy)
        try:
            while True:
                try:
                    raw = await within(anext(scanner), idle)
                except (TimeoutError, StopAsyncIteration):
                    return
                if until is not None and not raw.message_id < until:
                    return
                with contextlib.suppress(DecodeError):
                    yield decode(raw, decode_id)
        finally:
            await scanner.close()
