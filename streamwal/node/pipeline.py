"""Answering a request stream in order while its requests run concurrently.

Shared by the produce streams (one message or one batch per frame): each request is
started in arrival order, which is its place in the log (the WAL's writer lets waiting
appends through first come, first served), and answered in that order. Every frame
read is answered before the call ends, and the call ends once the input does: at most
``window`` requests are held (no frame is read while they are), and one the WAL has not
answered within ``answer_timeout`` is answered with ``failed`` (it may still land).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from streamwal.errors import OutcomeUnknownError, StreamwalError

__all__ = ["NoAnswerError", "answer_in_order"]

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class NoAnswerError(OutcomeUnknownError):
    """A streamed append the WAL did not answer in time; it is no longer waited for."""


async def answer_in_order(
    requests: AsyncIterator[Req],
    start: Callable[[Req], Awaitable[Resp]],
    failed: Callable[[Req, BaseException], Resp],
    *,
    window: int,
    answer_timeout: float,
) -> AsyncIterator[Resp]:
    """``start(request)`` for each request as it arrives; its answer, in order, or
    ``failed(request, error)`` when it raised or took longer than ``answer_timeout``."""
    pending: asyncio.Queue[tuple[Req, asyncio.Future[Resp]] | None] = asyncio.Queue(window)

    async def feed() -> None:
        try:
            async for request in requests:
                await pending.put((request, asyncio.ensure_future(start(request))))
        finally:
            # the queue may be full and nobody left to empty it (the call ended)
            with contextlib.suppress(asyncio.QueueFull):
                pending.put_nowait(None)

    feeder = asyncio.create_task(feed())
    started: list[asyncio.Future[Resp]] = []
    try:
        while True:
            if not pending.empty():
                item = pending.get_nowait()
            elif feeder.done():
                break  # it ended without its sentinel (the queue was full)
            else:
                got = asyncio.ensure_future(pending.get())
                await asyncio.wait({got, feeder}, return_when=asyncio.FIRST_COMPLETED)
                if not got.done():
                    got.cancel()
                    continue
                item = got.result()
            if item is None:
                break
            request, task = item
            started.append(task)
            yield await _answer(request, task, failed, answer_timeout)
            started.pop()
        await feeder  # the input failed: let gRPC end the call with that
    finally:
        feeder.cancel()
        while not pending.empty():
            queued = pending.get_nowait()
            if queued is not None:
                started.append(queued[1])
        for task in started:  # the client went away: its appends are not waited for
            task.cancel()


async def _answer(
    request: Req,
    task: asyncio.Future[Resp],
    failed: Callable[[Req, BaseException], Resp],
    answer_timeout: float,
) -> Resp:
    try:
        return await asyncio.wait_for(asyncio.shield(task), answer_timeout)
    except TimeoutError:
        task.cancel()
        return failed(request, NoAnswerError(f"the WAL did not answer within {answer_timeout:g}s"))
    except (StreamwalError, Exception) as exc:
        return failed(request, exc)
