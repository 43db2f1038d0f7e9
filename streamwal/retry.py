"""``Retry``: the one retry loop of the product, driven by a :class:`~streamwal.backoff.Backoff`.

Every loop that tries something again (the first time tick, an append, a backend
read, a node call, a TSO fetch, an etcd call) counts its attempts, watches its
deadline, picks the errors worth another try and logs each failure. A :class:`Retry`
holds that state for one loop, so the rules are written once, and each loop says only
its own values:

- **attempts**: at most ``max_attempts`` (the backoff's own by default; ``None``:
  unbounded);
- **deadline**: a point on ``clock`` (monotonic) after which no attempt starts:
  a wait that would end past it gives up at once, or, with ``clip_to_deadline``, is cut
  to it and the loop ends there (for a loop whose caller asked for "this long", not
  "this many");
- **give-up rule**: ``retry_if`` (types or a predicate; by default an error's own
  ``retriable``, see :mod:`streamwal.errors`) and ``give_up_on`` (types or a predicate
  that win over it);
- **cancellation**: ``asyncio.CancelledError`` (or any ``BaseException`` that is not an
  ``Exception``) is never retried, and a cancelled wait raises;
- **a hook per failed attempt** (``on_retry``), for the loop's log line or span event,
  told the attempt, its error and the wait before the next.

A loop around one call uses :func:`retry_call`. A loop whose attempt is more than a
call (a span per attempt, a batch whose tail is retried, a result that is not an
exception) keeps its own ``while`` and asks the :class:`Retry` at each failure:
:meth:`Retry.next` for the wait or ``None`` (give up, raising what it chooses), then
:meth:`Retry.wait`; :meth:`Retry.pause` does both and raises the error on give-up.
A loop that also goes on after an end that is not a failure takes that wait from
:meth:`Retry.step`; one that makes progress starts over with :meth:`Retry.reset`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Final, TypeVar

from streamwal.backoff import Backoff
from streamwal.errors import InvalidInputError, StreamwalError

__all__ = ["ErrorRule", "Retry", "RetryAttempt", "retriable", "retry_call"]

_T = TypeVar("_T")

#: which errors a rule matches: exception types, or a predicate on the error
ErrorRule = type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]


class _Default:
    """The backoff's own ``max_attempts`` (a caller may pass ``None``: unbounded)."""


_FROM_BACKOFF: Final = _Default()


def retriable(error: BaseException) -> bool:
    """The default rule: a streamwal error says itself whether another try may succeed
    (``retriable``); any other ``Exception`` is tried again; a cancellation never."""
    if isinstance(error, StreamwalError):
        return error.retriable
    return isinstance(error, Exception)


@dataclass(frozen=True, slots=True)
class RetryAttempt:
    """A failed attempt that is followed by another: what the ``on_retry`` hook is told."""

    attempt: int  # the failed attempt's number, from 1
    error: BaseException
    delay: float  # seconds before the next attempt


def _matcher(rule: ErrorRule) -> Callable[[BaseException], bool]:
    if isinstance(rule, type | tuple):
        types = rule
        return lambda error: isinstance(error, types)
    return rule


def _never(error: BaseException) -> bool:
    return False


class Retry:
    """The state of one retrying loop: attempts made, the schedule, the give-up rules.

    ``clock`` reads the deadline (pass the event loop's ``time`` where the loop's
    other bounds use it); ``sleep`` is the wait (one that ends early, on a close or a
    fence, is fine: the next attempt then decides). Tests pass fakes of both.
    """

    def __init__(
        self,
        backoff: Backoff,
        *,
        max_attempts: int | _Default | None = _FROM_BACKOFF,
        deadline: float | None = None,
        clip_to_deadline: bool = False,
        retry_if: ErrorRule = retriable,
        give_up_on: ErrorRule | None = None,
        on_retry: Callable[[RetryAttempt], None] | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        limit = backoff.max_attempts if isinstance(max_attempts, _Default) else max_attempts
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise InvalidInputError(f"max_attempts: must be an int >= 1 or None, got {limit!r}")
        self.backoff = backoff
        self.max_attempts = limit
        self.deadline = deadline
        self._clip = clip_to_deadline
        self._retry_if = _matcher(retry_if)
        self._give_up_on = _never if give_up_on is None else _matcher(give_up_on)
        self._on_retry = on_retry
        self._sleep = sleep
        self._clock = clock
        self._delays: Iterator[float] = backoff.delays()
        self._attempt = 1

    @property
    def attempt(self) -> int:
        """The number of the attempt under way (or just failed), from 1."""
        return self._attempt

    def reset(self, deadline: float | None = None) -> None:
        """Start over after progress: attempt 1, the schedule from its first wait, and
        ``deadline`` (``None``: no deadline)."""
        self._delays = self.backoff.delays()
        self._attempt = 1
        self.deadline = deadline

    def allows(self, error: BaseException) -> bool:
        """Whether ``error``, failing the current attempt, may be followed by another:
        the attempts and the give-up rules, not the deadline (it needs the wait)."""
        if not isinstance(error, Exception):  # cancellation, KeyboardInterrupt, exit
            return False
        if self.max_attempts is not None and self._attempt >= self.max_attempts:
            return False
        return not self._give_up_on(error) and self._retry_if(error)

    def next(self, error: BaseException, *, margin: float = 0.0) -> float | None:
        """The current attempt failed with ``error``: the wait before the next one, or
        ``None`` to give up. ``margin``: seconds the next attempt needs before the
        deadline, beyond the wait. Calls ``on_retry`` and counts the attempt unless
        giving up."""
        if not self.allows(error):
            return None
        delay = next(self._delays)
        if self.deadline is not None:
            remaining = self.deadline - self._clock()
            if self._clip:
                if remaining <= 0:
                    return None
                delay = min(delay, remaining)
            elif delay + margin > remaining:
                return None
        if self._on_retry is not None:
            self._on_retry(RetryAttempt(self._attempt, error, delay))
        self._attempt += 1
        return delay

    def step(self) -> float:
        """The wait before the next attempt when the last one did not fail but the loop
        goes on (a read its server ended: follow it): no rule is asked, no hook told."""
        self._attempt += 1
        return next(self._delays)

    async def wait(self, delay: float) -> None:
        """Wait ``delay`` seconds before the next attempt (cancellation raises here)."""
        await self._sleep(delay)

    async def pause(self, error: BaseException) -> None:
        """:meth:`next` then :meth:`wait`; ``error`` is raised if the loop gives up."""
        delay = self.next(error)
        if delay is None:
            raise error
        await self.wait(delay)


async def retry_call(call: Callable[[], Awaitable[_T]], retry: Retry) -> _T:
    """``await call()`` until it returns, trying again as ``retry`` says; on give-up the
    last error is raised (a cancellation at once)."""
    while True:
        try:
            return await call()
        except Exception as exc:
            await retry.pause(exc)
