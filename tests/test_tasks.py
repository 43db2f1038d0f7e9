"""``cancel_and_wait``: the task has ended when it returns, and its cancellation is
not the closer's error."""

from __future__ import annotations

import asyncio

from streamwal.tasks import cancel_and_wait


async def test_a_running_task_has_ended_when_it_returns() -> None:
    cleaned_up = asyncio.Event()

    async def loop() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0)  # a cleanup step of its own, after the cancellation
            cleaned_up.set()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled()
    assert cleaned_up.is_set()


async def test_nothing_started_and_a_finished_task_are_no_error() -> None:
    await cancel_and_wait(None)
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    await cancel_and_wait(done)
    assert done.done() and not done.cancelled()
