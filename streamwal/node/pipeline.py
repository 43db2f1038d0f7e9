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
                item = (request, asyncio.ensure_future(start(request)))
                if pending.full():
                    await pending.put(item)
                else:  # no coroutine to make and run for the common case
                    pending.put_nowait(item)
        finally:
            # the queue may be full and nobody left to empty it (the call ended); when it
            # is, the loop below finds the feeder done once it has emptied it
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
                # the queue is empty, so the feeder's sentinel fits when it ends
                item = await pending.get()
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
    """``task``'s answer. Not shielded: on a timeout, or when the call ends, the append is
    cancelled anyway; one timer, not ``wait_for``'s extra future and callbacks."""
    try:
        if not task.done():
            async with asyncio.timeout(answer_timeout):
                await task
        return task.result()
    except TimeoutError:
        task.cancel()
        return failed(request, NoAnswerError(f"the WAL did not answer within {answer_timeout:g}s"))
    except (StreamwalError, Exception) as exc:
        return failed(request, exc)
