"""``cancel_and_wait``: the task has ended when it returns, and its cancellation is
not the closer's error. ``RoundLoop``: a failed round does not end the loop unless
the component says so."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.tasks import RoundLoop, cancel_and_wait


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


class _Rounds(RoundLoop):
    """Counts its rounds; a round raises what ``failures`` holds next."""

    def __init__(self, failures: list[Exception], *, wait_first: bool = False) -> None:
        self._interval = 0.001
        self._wait_first = wait_first
        self.failures = failures
        self.rounds = 0
        self.failed: list[Exception] = []
        self.done = asyncio.Event()

    async def _round(self) -> None:
        self.rounds += 1
        if self.failures:
            raise self.failures.pop(0)
        self.done.set()

    def _round_failed(self, exc: Exception) -> bool:
        self.failed.append(exc)
        return not isinstance(exc, LookupError)


async def test_a_failed_round_is_followed_by_the_next() -> None:
    loop = _Rounds([ValueError("first"), ValueError("second")])
    task = loop._start_rounds("rounds")
    assert task is not None and task.get_name() == "rounds"
    await asyncio.wait_for(loop.done.wait(), 5)
    assert loop.rounds >= 3
    assert [str(e) for e in loop.failed] == ["first", "second"]
    assert await loop._stop_rounds()
    assert task.cancelled()


async def test_a_failure_the_component_refuses_ends_the_loop_quietly() -> None:
    loop = _Rounds([KeyError("gone")])
    task = loop._start_rounds()
    assert task is not None
    await asyncio.wait_for(asyncio.shield(task), 5)
    assert loop.rounds == 1 and not task.cancelled() and task.exception() is None
    assert await loop._stop_rounds()  # a loop that ended is no error to its closer


async def test_a_failure_outside_the_round_errors_ends_the_task_with_it() -> None:
    loop = _Rounds([ValueError("unexpected")])
    loop._round_errors = (LookupError,)
    task = loop._start_rounds()
    assert task is not None
    await asyncio.wait([task], timeout=5)
    assert isinstance(task.exception(), ValueError) and loop.failed == []
    with pytest.raises(ValueError, match="unexpected"):
        await loop._stop_rounds()


async def test_started_once_stopped_once_and_never_restarted() -> None:
    loop = _Rounds([], wait_first=True)
    loop._interval = 3600
    task = loop._start_rounds()
    assert task is not None
    assert loop._start_rounds() is None  # started already
    await asyncio.sleep(0.01)
    assert loop.rounds == 0  # the first round waits one interval
    assert await loop._stop_rounds()
    assert not await loop._stop_rounds()
    assert loop._start_rounds() is None  # closed
    assert task.cancelled() and loop.rounds == 0
