"""A deadline that passes in the very loop iteration a step finishes still ends the
read (:func:`streamwal.timeouts.within`), where Python 3.11's ``wait_for`` drops it."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from streamwal.timeouts import within

Step = Callable[[Awaitable[str], float], Awaitable[str]]

#: how long each step of the read may take
_STEP_S = 1.0


async def _read_whose_first_step_finishes_as_the_deadline_passes(bounded: Step) -> float:
    """Two steps of a read inside a deadline: the first one's answer and the deadline
    come in the same loop iteration, the second one never gets an answer. Seconds
    until the read ended with :class:`TimeoutError`."""
    loop = asyncio.get_running_loop()
    first: asyncio.Future[str] = loop.create_future()
    never: asyncio.Future[str] = loop.create_future()

    async def step(answer: asyncio.Future[str]) -> str:
        return await answer

    started = loop.time()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as deadline:

            def both() -> None:
                first.set_result("a message")
                deadline.reschedule(loop.time())  # the deadline passes now

            loop.call_soon(both)
            assert await bounded(step(first), _STEP_S) == "a message"
            await bounded(step(never), _STEP_S)
    return loop.time() - started


async def test_within_ends_the_read_at_its_deadline() -> None:
    assert await _read_whose_first_step_finishes_as_the_deadline_passes(within) < _STEP_S / 2


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps the deadline from 3.12")
async def test_wait_for_on_3_11_reads_on_past_that_deadline() -> None:
    """Why ``within`` exists: the control, with the standard library's ``wait_for``,
    goes on to the next step and waits it out."""
    wait_for: Any = asyncio.wait_for
    assert await _read_whose_first_step_finishes_as_the_deadline_passes(wait_for) >= _STEP_S


async def test_within_answers_a_step_in_time_and_times_out_a_slow_one() -> None:
    assert await within(asyncio.sleep(0, "read"), 1.0) == "read"
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await within(asyncio.sleep(10), 0.05)
    assert loop.time() - started < 1.0
