"""Answering a request stream in order (unit): the order, in-band failures, the answer
timeout, the window, and an input that fails."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import cast

import pytest

from streamwal.errors import UnavailableError
from streamwal.node.pipeline import NoAnswerError, answer_in_order


async def _frames(items: Iterable[int], fail_after: bool = False) -> AsyncIterator[int]:
    for item in items:
        yield item
    if fail_after:
        raise UnavailableError("the input broke")


def _failed(request: int, exc: BaseException) -> str:
    return f"{request}:{type(exc).__name__}"


async def test_answers_keep_the_arrival_order_when_appends_finish_out_of_order() -> None:
    async def start(request: int) -> str:
        await asyncio.sleep(0.001 * (5 - request))  # the first one finishes last
        return f"{request}:ok"

    answers = [
        a
        async for a in answer_in_order(
            _frames(range(5)), start, _failed, window=8, answer_timeout=5.0
        )
    ]
    assert answers == [f"{i}:ok" for i in range(5)]


async def test_a_failed_append_is_answered_in_band_and_the_stream_goes_on() -> None:
    async def start(request: int) -> str:
        if request == 1:
            raise UnavailableError("broker down")
        return f"{request}:ok"

    answers = [
        a
        async for a in answer_in_order(
            _frames(range(3)), start, _failed, window=8, answer_timeout=5.0
        )
    ]
    assert answers == ["0:ok", "1:UnavailableError", "2:ok"]


async def test_an_append_not_answered_in_time_is_answered_unknown_and_cancelled() -> None:
    stuck: list[asyncio.Task[str]] = []

    async def start(request: int) -> str:
        if request == 0:
            stuck.append(asyncio.current_task())  # type: ignore[arg-type]
            await asyncio.sleep(60)
        return f"{request}:ok"

    answers = [
        a
        async for a in answer_in_order(
            _frames(range(2)), start, _failed, window=8, answer_timeout=0.05
        )
    ]
    assert answers == [f"0:{NoAnswerError.__name__}", "1:ok"]
    await asyncio.sleep(0)
    assert stuck[0].cancelled()


async def test_no_more_than_the_window_is_held() -> None:
    running = 0
    most = 0
    release = asyncio.Event()

    async def start(request: int) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1
        return str(request)

    async def answers() -> list[str]:
        return [
            a
            async for a in answer_in_order(
                _frames(range(10)), start, _failed, window=3, answer_timeout=5.0
            )
        ]

    task = asyncio.create_task(answers())
    await asyncio.sleep(0.05)
    # the window's queued frames, the one being answered, and the one the feeder
    # holds while it waits for room; no frame is read beyond those
    assert 3 <= most <= 3 + 2
    release.set()
    assert await task == [str(i) for i in range(10)]


async def test_a_failed_input_ends_the_call_after_the_answers_before_it() -> None:
    async def start(request: int) -> str:
        return f"{request}:ok"

    answers: list[str] = []
    with pytest.raises(UnavailableError, match="the input broke"):
        async for a in answer_in_order(
            _frames(range(2), fail_after=True), start, _failed, window=8, answer_timeout=5.0
        ):
            answers.append(a)
    assert answers == ["0:ok", "1:ok"]


async def test_leaving_early_cancels_the_appends_still_running() -> None:
    started: list[asyncio.Task[str]] = []

    async def start(request: int) -> str:
        started.append(asyncio.current_task())  # type: ignore[arg-type]
        if request > 0:
            await asyncio.sleep(60)
        return f"{request}:ok"

    stream = cast(
        AsyncGenerator[str, None],
        answer_in_order(_frames(range(3)), start, _failed, window=8, answer_timeout=5.0),
    )
    assert await anext(stream) == "0:ok"
    await asyncio.sleep(0.01)
    await stream.aclose()
    await asyncio.sleep(0)
    assert len(started) == 3 and all(t.cancelled() for t in started[1:])
