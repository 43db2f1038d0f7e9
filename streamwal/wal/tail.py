"""Bounded reads of a channel's log by the owner itself (not by a reader).

Used to rebuild state from what earlier owners wrote (idempotence windows) and to
look an append of unknown outcome up. A read ends at ``until`` (exclusive), when no
entry comes for ``idle`` seconds (the end of the log), or after ``bound`` seconds;
entries that do not decode are skipped. Closing the scanner is outside the bound: it
is bounded by the backend's own operation timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from streamwal.errors import DecodeError
from streamwal.timeouts import within
from streamwal.wal.backend import BackendWAL, DeliveryPolicy
from streamwal.wal.message import ImmutableMessage, MessageIdDecoder, decode_entry
from streamwal.wal.message.codec import from_position
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
    """The decoded entries from ``policy``; raises ``TimeoutError`` past ``bound``.

    The bound is a deadline each step waits within, not an ``asyncio.timeout`` around
    the generator: that one spans the ``yield``, so it would cancel whatever the
    consumer awaited between two entries once the bound passed, and could run out
    while the consumer closes the read after finding what it looked for, turning a
    found entry into a ``TimeoutError``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound

    def left() -> float:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"the log was not read to its end within {bound} s")
        return remaining

    # computed before the call: left() raising inside the argument list would leave
    # backend.read's coroutine made and never awaited
    first_wait = left()
    scanner = await within(backend.read(policy), first_wait)
    start: DeliveryPolicy | None = policy  # a position inside a pack, for the first entry
    try:
        while True:
            wait = min(idle, left())
            try:
                raw = await within(anext(scanner), wait)
            except StopAsyncIteration:
                return
            except TimeoutError:
                if wait < idle:  # the bound, not the idle wait, ran out
                    raise
                return
            if until is not None and not raw.message_id < until:
                return
            msgs: list[ImmutableMessage] = []
            with contextlib.suppress(DecodeError):
                msgs = decode_entry(raw, decode_id)
            if start is not None:
                msgs, start = from_position(msgs, start), None
            for msg in msgs:
                yield msg
    finally:
        await scanner.close()
