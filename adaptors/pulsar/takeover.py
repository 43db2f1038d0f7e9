"""Taking a Pulsar topic over: the fence, then the writing producer.

Taking a topic over (``ExclusiveWithFencing``, the default) is two steps. A Pulsar
4.0.7 broker reconnecting a fenced ``ExclusiveWithFencing`` producer first evicts the
current producers and only then checks the reconnecting one's topic epoch, against
the epoch before the update of a concurrent takeover has completed: it may accept it,
and the old owner's pending messages then land after the new owner's first time tick
(or the legitimate owner, evicted, resends a message already persisted). So a
short-lived fencer in ``ExclusiveWithFencing`` mode evicts every producer and moves
the epoch on (its creation returns once that epoch is stored) and is closed at once;
the producer that writes is created afterwards in ``Exclusive`` mode. A reconnecting
``Exclusive`` producer evicts nobody and is refused while any exclusive producer
exists or once the epoch moved: a fenced owner cannot come back.

A creation the opener stops waiting for is not over at the broker: the client keeps
trying, and a fencer it creates late would evict the writer of the next attempt (its
own node's), or hold the topic open until the connection closes. So a creation that
timed out is handed to a reaper, which closes what it creates, and the next creation
on the channel starts only once the reaper is done.

Do not take one channel over from two nodes at the same time: the same broker can
deadlock its I/O threads when a producer's creation fences another producer that its
client is closing at that moment (lock order inversion between the topic and the
producer), which two overlapping takeovers make likely. A cluster's new owner waits
for the old owner's close for that reason (:mod:`streamwal.cluster.follower`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pulsar
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.closing import close_quietly, reap
from streamwal.adaptors.pulsar.config import PulsarAccessMode
from streamwal.adaptors.pulsar.errors import FENCING_RESULTS, translate
from streamwal.adaptors.pulsar.segments import SEGMENT_BYTES, SEGMENT_MESSAGES
from streamwal.adaptors.pulsar.state import ChannelState, log
from streamwal.backoff import Backoff
from streamwal.errors import (
    ChannelFencedError,
    InvalidInputError,
    QuotaExceededError,
    UnavailableError,
)
from streamwal.retry import Retry, retry_call
from streamwal.timeouts import within
from streamwal.wal.backend import AccessMode

__all__ = ["BeforeFirstWrite", "ExplainQuota", "PrepareTopic", "Takeover"]

_OWNER_PRESENT = frozenset({pulsar.Result.ProducerFenced, pulsar.Result.ProducerBusy})
_WRITER_ATTEMPTS = 10
#: a fixed pause between the writer's attempts
_WRITER_PAUSE = Backoff(initial=0.05, maximum=0.05)
_WRITER_RETRY_WINDOW_S = 3.0
#: how long a creation waits for an earlier, abandoned one to end (in operation timeouts)
_SETTLE_TIMEOUTS = 2.0


#: what the opener runs before a channel's first write (its broker self-checks)
BeforeFirstWrite = Callable[[], Awaitable[None]]
#: the opener's preparation of a topic (cursor, policies), run beside the fence
PrepareTopic = Callable[[str, str, Awaitable[None] | None], Awaitable[None]]
#: the reason a quota refused a producer, asked of the topic's retention
ExplainQuota = Callable[[QuotaExceededError], Awaitable[QuotaExceededError]]


class Takeover:
    """Makes the channel writable: fence any earlier owner, then create the producer."""

    def __init__(
        self,
        state: ChannelState,
        before_first_write: BeforeFirstWrite,
        prepare_topic: PrepareTopic,
        explain_quota: ExplainQuota,
    ) -> None:
        self._state = state
        self._before_first_write = before_first_write
        self._prepare_topic = prepare_topic
        self._explain_quota = explain_quota
        self._lock = asyncio.Lock()
        #: producer creations given up on, closing what they create (module doc)
        self._reapers: set[asyncio.Future[None]] = set()

    async def ensure_writable(self) -> None:
        state = self._state
        state.check_open()
        if state.mode is not AccessMode.READ_WRITE:
            raise InvalidInputError(f"channel {state.channel!r} was opened read-only")
        async with self._lock:
            if state.fenced is not None:
                raise state.fenced
            if state.producer is not None:
                return
            await self._before_first_write()
            state.check_open()  # closed meanwhile: take nothing over for nobody
            fencing = state.config.access_mode is PulsarAccessMode.EXCLUSIVE_WITH_FENCING
            try:
                await self._fence_and_prepare(fencing)
            except QuotaExceededError as exc:  # the fencer is a producer too
                raise await self._explain_quota(exc) from exc
            state.check_open()
            try:
                producer = await self._create_writer(retry_owner_present=fencing)
            except PulsarException as exc:
                if exc.error() in _OWNER_PRESENT:
                    if fencing:  # another node took the topic between our fence and now
                        state.fenced = ChannelFencedError(
                            state.channel,
                            f"taken over during the open: broker says {exc.error()}",
                        )
                        raise state.fenced from exc
                    raise UnavailableError(
                        f"channel {state.channel!r}: an earlier owner still holds the topic "
                        "(access mode Exclusive waits for it to leave)"
                    ) from exc
                error = translate(exc, channel=state.channel, what="create producer")
                if isinstance(error, ChannelFencedError):
                    state.fenced = error
                if isinstance(error, QuotaExceededError):
                    error = await self._explain_quota(error)
                raise error from exc
            except TimeoutError as exc:
                raise UnavailableError(
                    f"channel {state.channel!r}: broker {state.config.service_url} did not "
                    f"answer within {state.config.operation_timeout_s:g}s"
                ) from exc
            if state.closed:  # closed while it was created: nobody would ever close it
                await close_quietly(producer, state.config.operation_timeout_s)
                state.check_open()
            state.producer = producer
            state.writer_name = producer.producer_name()
            state.abandoned = None  # the writer given up on, if any, failed what it held
            log.info(
                "channel %s: exclusive producer created on %s",
                state.channel,
                state.topic,
            )

    async def _create_writer(self, *, retry_owner_present: bool) -> Any:
        """The writing producer (``Exclusive``); right after our own fence, the broker
        may still be removing the fencer: try again for a while (at least
        ``_WRITER_ATTEMPTS`` times, for up to ``_WRITER_RETRY_WINDOW_S`` or the
        operation timeout). A broker that has just restarted can take a second or more
        to let go of a fencer whose close it did not see; a real takeover by another
        node in the meantime is still reported as fenced, only later."""
        loop = asyncio.get_running_loop()
        window = min(self._state.config.operation_timeout_s, _WRITER_RETRY_WINDOW_S)
        deadline = loop.time() + window

        def owner_going(exc: BaseException) -> bool:
            """The fencer is still there: again, until both the attempts and the window
            are spent (either alone is too short after a broker restart)."""
            return (
                isinstance(exc, PulsarException)
                and exc.error() in _OWNER_PRESENT
                and retry_owner_present
                and (retry.attempt < _WRITER_ATTEMPTS or loop.time() < deadline)
            )

        retry = Retry(_WRITER_PAUSE, retry_if=owner_going)
        return await retry_call(
            lambda: self._create_producer(
                access_mode=pulsar.ProducerAccessMode.Exclusive,
                batching_enabled=self._state.batching,
                batching_max_publish_delay_ms=self._state.config.batching_max_delay_ms,
                # room for many segments: one is cut at most once (.segments)
                batching_max_messages=64 * SEGMENT_MESSAGES,
                batching_max_allowed_size_in_bytes=8 * SEGMENT_BYTES,
                max_pending_messages=self._state.config.max_pending_messages,
                block_if_queue_full=False,
                send_timeout_millis=self._state.config.send_timeout_ms,
            ),
            retry,
        )

    async def settle(self) -> None:
        """Wait until every creation given up on has ended and what it made is closed
        (bounded as a next creation's wait is): the channel's close waits for this, so
        a close that ends within its callers' bounds leaves nothing of this channel to
        be made or closed on the topic later, when a new owner may be fencing (see the
        module)."""
        reapers = list(self._reapers)
        if reapers:
            bound = _SETTLE_TIMEOUTS * self._state.config.operation_timeout_s + 1
            await asyncio.wait(reapers, timeout=bound)

    async def _create_producer(self, **options: Any) -> Any:
        """A producer of the topic, once every earlier creation given up on has ended
        (see the module); a creation this one gives up on goes to a reaper."""
        reapers = list(self._reapers)
        if reapers:
            bound = _SETTLE_TIMEOUTS * self._state.config.operation_timeout_s + 1
            _, pending = await asyncio.wait(reapers, timeout=bound)
            if pending:
                raise UnavailableError(
                    f"channel {self._state.channel!r}: an earlier producer creation on broker "
                    f"{self._state.config.service_url} is still unanswered after {bound:g}s"
                )
        creation = asyncio.ensure_future(
            (self._state.writer_client or self._state.client).create_producer(
                self._state.topic, **options
            )
        )
        try:
            return await within(
                asyncio.shield(creation), timeout=self._state.config.operation_timeout_s + 1
            )
        except (TimeoutError, asyncio.CancelledError):
            if not creation.done() or (not creation.cancelled() and not creation.exception()):
                reap(creation, self._state.config.operation_timeout_s, self._reapers)
            raise

    async def _fence_others(self) -> None:
        """Evict every producer of the topic and move its epoch on (see the module)."""
        try:
            fencer = await self._create_producer(
                access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
                batching_enabled=False,
            )
        except PulsarException as exc:
            raise translate(exc, channel=self._state.channel, what="fence") from exc
        except TimeoutError as exc:
            raise UnavailableError(
                f"channel {self._state.channel!r}: broker {self._state.config.service_url} did not "
                f"answer the fence within {self._state.config.operation_timeout_s:g}s"
            ) from exc
        try:
            await within(fencer.close(), timeout=self._state.config.operation_timeout_s)
        except PulsarException as exc:
            if exc.error() not in FENCING_RESULTS:  # fenced already: gone from the topic
                raise translate(exc, channel=self._state.channel, what="fence") from exc
        except TimeoutError as exc:
            raise UnavailableError(
                f"channel {self._state.channel!r}: closing the fencer timed out"
            ) from exc

    async def _fence_and_prepare(self, fencing: bool) -> None:
        """Fence (if ``fencing``) and prepare the topic (its durable cursor, its
        policies): the opener runs both side by side, and both are done before the
        writer exists, so the cursor is there before the first time tick."""
        await self._prepare_topic(
            self._state.channel, self._state.topic, self._fence_others() if fencing else None
        )
