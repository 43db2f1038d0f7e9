"""The one retry helper: attempts, waits, deadline, give-up rules, cancellation and the
per-attempt hook, on a fake clock and a fake sleep (no real time passes)."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.backoff import Backoff
from streamwal.errors import (
    ChannelFencedError,
    InvalidInputError,
    OutcomeUnknownError,
    UnavailableError,
)
from streamwal.retry import Retry, RetryAttempt, retriable, retry_call


class FakeTime:
    """A clock that only the fake sleep moves; every wait is recorded."""

    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.waits.append(delay)
        self.now += delay
        await asyncio.sleep(0)


class Failing:
    """A call that fails with ``errors`` in turn, then returns ``"done"``."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def _retry(t: FakeTime, backoff: Backoff, **kwargs: object) -> Retry:
    return Retry(backoff, sleep=t.sleep, clock=t.clock, **kwargs)  # type: ignore[arg-type]


async def test_waits_follow_the_backoff_until_the_call_succeeds() -> None:
    t = FakeTime()
    call = Failing(*[UnavailableError("down")] * 5)
    result = await retry_call(call, _retry(t, Backoff(initial=0.02, maximum=0.1)))
    assert result == "done"
    assert call.calls == 6
    assert t.waits == pytest.approx([0.02, 0.04, 0.08, 0.1, 0.1])


async def test_max_attempts_bounds_the_tries_and_the_last_error_is_raised() -> None:
    t = FakeTime()
    errors = [UnavailableError(f"down {i}") for i in range(5)]
    call = Failing(*errors)
    with pytest.raises(UnavailableError) as info:
        await retry_call(call, _retry(t, Backoff(initial=0.01, maximum=1.0, max_attempts=3)))
    assert info.value is errors[2]
    assert call.calls == 3
    assert t.waits == pytest.approx([0.01, 0.02])


async def test_max_attempts_given_wins_over_the_backoffs() -> None:
    t = FakeTime()
    call = Failing(*[UnavailableError("down")] * 5)
    retry = _retry(t, Backoff(initial=0.01, maximum=1.0, max_attempts=3), max_attempts=None)
    assert await retry_call(call, retry) == "done"
    assert call.calls == 6
    with pytest.raises(InvalidInputError):
        Retry(Backoff(initial=0.01, maximum=1.0), max_attempts=0)


async def test_a_wait_that_would_end_past_the_deadline_gives_up_at_once() -> None:
    t = FakeTime()
    call = Failing(*[UnavailableError("down")] * 10)
    retry = _retry(t, Backoff(initial=1.0, maximum=1.0), deadline=t.now + 2.5)
    with pytest.raises(UnavailableError):
        await retry_call(call, retry)
    assert t.waits == [1.0, 1.0]  # a third wait would end at 3.0 > 2.5
    assert call.calls == 3


async def test_a_margin_keeps_room_for_the_next_attempt() -> None:
    t = FakeTime()
    retry = _retry(t, Backoff(initial=1.0, maximum=1.0), deadline=t.now + 2.5)
    assert retry.next(UnavailableError("x"), margin=1.0) == 1.0  # 1 + 1 <= 2.5
    t.now += 1.0
    assert retry.next(UnavailableError("x"), margin=1.0) is None  # 1 + 1 > 1.5


async def test_a_clipped_wait_ends_at_the_deadline_and_the_loop_with_it() -> None:
    t = FakeTime()
    call = Failing(*[UnavailableError("down")] * 10)
    retry = _retry(
        t, Backoff(initial=1.0, maximum=1.0), deadline=t.now + 2.5, clip_to_deadline=True
    )
    with pytest.raises(UnavailableError):
        await retry_call(call, retry)
    assert t.waits == pytest.approx([1.0, 1.0, 0.5])
    assert call.calls == 4
    assert t.now == pytest.approx(retry.deadline)


async def test_by_default_an_error_says_itself_whether_to_retry() -> None:
    t = FakeTime()
    fenced = ChannelFencedError("ch", "newer owner")
    call = Failing(UnavailableError("down"), fenced)
    with pytest.raises(ChannelFencedError) as info:
        await retry_call(call, _retry(t, Backoff(initial=0.01, maximum=1.0)))
    assert info.value is fenced
    assert call.calls == 2
    assert retriable(UnavailableError("x"))
    assert not retriable(OutcomeUnknownError("lost"))
    assert retriable(OSError("reset"))
    assert not retriable(asyncio.CancelledError())


async def test_retry_if_by_type_and_by_predicate() -> None:
    t = FakeTime()
    by_type = _retry(t, Backoff(initial=0.01, maximum=1.0), retry_if=(OSError, KeyError))
    assert by_type.allows(OSError("x"))
    assert by_type.allows(KeyError("x"))
    assert not by_type.allows(UnavailableError("x"))
    by_predicate = _retry(
        t, Backoff(initial=0.01, maximum=1.0), retry_if=lambda e: "again" in str(e)
    )
    assert by_predicate.allows(ValueError("try again"))
    assert not by_predicate.allows(ValueError("never"))


async def test_give_up_on_wins_over_retry_if() -> None:
    t = FakeTime()
    retry = _retry(
        t,
        Backoff(initial=0.01, maximum=1.0),
        retry_if=Exception,
        give_up_on=ChannelFencedError,
    )
    assert retry.allows(OutcomeUnknownError("not retriable, retried here"))
    assert not retry.allows(ChannelFencedError("ch", "newer"))
    call = Failing(OSError("x"), ChannelFencedError("ch", "newer"))
    with pytest.raises(ChannelFencedError):
        await retry_call(call, retry)
    assert t.waits == [0.01]


async def test_the_hook_is_told_each_failed_attempt_followed_by_another() -> None:
    t = FakeTime()
    seen: list[RetryAttempt] = []
    errors = [UnavailableError(f"down {i}") for i in range(3)]
    retry = _retry(t, Backoff(initial=0.1, maximum=1.0, max_attempts=3), on_retry=seen.append)
    with pytest.raises(UnavailableError):
        await retry_call(Failing(*errors), retry)
    # the third, given up on, is the caller's to report
    assert [(a.attempt, a.error) for a in seen] == [(1, errors[0]), (2, errors[1])]
    assert [a.delay for a in seen] == pytest.approx([0.1, 0.2])
    assert retry.attempt == 3


async def test_a_cancellation_during_the_wait_is_raised_not_retried() -> None:
    started = asyncio.Event()
    calls = 0

    async def sleep(delay: float) -> None:
        started.set()
        await asyncio.Event().wait()  # for ever: only the cancellation ends it

    async def call() -> None:
        nonlocal calls
        calls += 1
        raise UnavailableError("down")

    retry = Retry(Backoff(initial=0.01, maximum=1.0), sleep=sleep)
    task = asyncio.create_task(retry_call(call, retry))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls == 1


async def test_a_cancellation_raised_by_the_call_is_never_retried() -> None:
    t = FakeTime()
    call = Failing(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await retry_call(
            call, _retry(t, Backoff(initial=0.01, maximum=1.0), retry_if=BaseException)
        )
    assert call.calls == 1
    assert t.waits == []


async def test_reset_starts_the_schedule_and_the_count_over() -> None:
    t = FakeTime()
    retry = _retry(t, Backoff(initial=0.1, maximum=1.0, max_attempts=3))
    assert retry.next(UnavailableError("x")) == pytest.approx(0.1)
    assert retry.next(UnavailableError("x")) == pytest.approx(0.2)
    assert retry.next(UnavailableError("x")) is None
    retry.reset(deadline=t.now + 0.05)
    assert retry.attempt == 1
    assert retry.next(UnavailableError("x")) is None  # 0.1 > 0.05 left
    retry.reset()
    assert retry.next(UnavailableError("x")) == pytest.approx(0.1)


async def test_a_step_without_a_failure_takes_the_next_wait_and_asks_no_rule() -> None:
    t = FakeTime()
    seen: list[RetryAttempt] = []
    retry = _retry(
        t, Backoff(initial=0.1, maximum=1.0), deadline=t.now + 0.01, on_retry=seen.append
    )
    assert retry.step() == pytest.approx(0.1)  # past the deadline: not asked
    assert retry.step() == pytest.approx(0.2)
    assert retry.attempt == 3
    assert seen == []
    assert retry.next(UnavailableError("x")) is None  # a failure still is
