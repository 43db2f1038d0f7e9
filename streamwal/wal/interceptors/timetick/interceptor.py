"""The time-tick interceptor: gives every message its time tick and persists it.

It is the last interceptor of the chain: it allocates the time tick and hands the
message to the backend in one critical section (:mod:`.writer`), publishes results in
log order (:mod:`.sequencer`), and runs the periodic time tick (:mod:`.ticker`).

Retries: an append that fails with a retriable error is tried again after a backoff
(``WALConfig.append_backoff``, bounded), after ``ensure_writable()``, with a fresh time
tick, so it never enters the log behind a message with a higher one. A fenced error
fences the WAL for good (it is recorded in ``sink.fence``, the WAL's one record of the
fence, which this interceptor asks rather than keeping a flag of its own); from then on
every append fails fast with :class:`~streamwal.errors.ChannelFencedError`. An append
the fence caught in flight is looked up in the log (:mod:`.fence_readback`): acknowledged if
it landed, answered not written if it provably did not, unknown otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from streamwal.errors import (
    ChannelFencedError,
    ClosedError,
    OutcomeUnknownError,
    StreamwalError,
    WriteOutcome,
)
from streamwal.retry import Retry, RetryAttempt
from streamwal.timeouts import within
from streamwal.wal.interceptors.base import (
    AppendFunc,
    AppendResult,
    InterceptorBase,
    InterceptorParams,
    Sink,
)
from streamwal.wal.interceptors.timetick.fence_readback import FenceReadback
from streamwal.wal.interceptors.timetick.sequencer import AckSequencer
from streamwal.wal.interceptors.timetick.ticker import PeriodicTimeTicker
from streamwal.wal.interceptors.timetick.writer import OrderedWriter
from streamwal.wal.message import MutableMessage
from streamwal.wal.message_id import MessageId

__all__ = ["TimeTickInterceptor"]

_log = logging.getLogger(__name__)


class TimeTickInterceptor(InterceptorBase):
    """Persists messages; see the module docstring for ordering and retries."""

    def __init__(self, params: InterceptorParams, sink: Sink) -> None:
        super().__init__(params, sink)
        self._channel = params.channel.name
        self._backend = params.backend
        self._sequencer = AckSequencer(
            params.first_message,
            sink,
            self._channel,
            params.channel.node_id,
            params.holds,
            params.buffer.mark_gap,
        )
        self._writer = OrderedWriter(params, self._sequencer, self._check_usable)
        self._fence = sink.fence
        self._ticker = PeriodicTimeTicker(
            self._channel,
            self._writer,
            self._backend,
            self._fence,
            params.config.time_tick_interval,
        )
        self._readback = FenceReadback(self._channel, self._backend, params.channel.node_id)
        self._closing = False
        self._wake = asyncio.Event()  # set on fence or close: retry waits end early
        self._active = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def start(self) -> None:
        self._ticker.start()

    def _check_usable(self) -> None:
        self._fence.check()
        if self._closing:
            raise ClosedError(f"WAL of channel {self._channel!r} is closing")

    async def do_append(self, msg: MutableMessage, append: AppendFunc) -> AppendResult:
        """Persist ``msg`` (``append`` is never called: this interceptor is the last)."""
        self._active += 1
        self._idle.clear()
        retry: Retry | None = None  # made at the first failure: most appends need none
        try:
            while True:
                if retry is not None:
                    self._check_usable()
                try:
                    if retry is not None:
                        await self._backend.ensure_writable()
                    # the fast lane checks where it stamps (.writer); the slow one first,
                    # so a fenced or closing WAL never waits for an allocation
                    stamped = self._writer.write_now(msg)
                    if stamped is None:
                        if retry is None:
                            self._check_usable()
                        stamped = await self._writer.write(msg)
                    time_tick, future, index = stamped
                    sent_after = self._sequencer.last_confirmed
                    try:
                        return AppendResult((await future)[index], time_tick)
                    except ChannelFencedError as exc:
                        if exc.outcome is not WriteOutcome.UNKNOWN:
                            raise
                        self._fence.set(exc)
                        settled = await self._readback.settle(time_tick, sent_after)
                        if isinstance(settled, WriteOutcome):
                            if settled is WriteOutcome.NOT_WRITTEN:
                                raise ChannelFencedError(exc.channel, exc.reason) from exc
                            raise
                        return AppendResult(settled, time_tick)
                except ChannelFencedError as exc:
                    self._fence.set(exc)
                    raise
                except StreamwalError as exc:
                    retry = retry or self._retry()
                    await retry.pause(exc)
        finally:
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    async def do_append_many(
        self, msgs: Sequence[MutableMessage]
    ) -> list[AppendResult | StreamwalError]:
        """Persist ``msgs`` back to back in batch order; one outcome per message.

        Each message is stamped, published and acknowledged exactly as a single
        append. Retries keep the batch order: only a failed tail (every message from
        the first failure on failed, each retriably) is tried again, as a batch, after
        the backoff; a failure followed by a landed message is final, since retrying it
        would put it after its successors.
        """
        self._active += 1
        self._idle.clear()
        results: list[AppendResult | StreamwalError] = []
        retry: Retry | None = None  # made at the first failure: most batches need none
        try:
            while len(results) < len(msgs):
                rest = msgs[len(results) :]
                try:
                    self._check_usable()
                    if retry is not None:
                        await self._backend.ensure_writable()
                except StreamwalError as exc:  # nothing of the rest reached the backend
                    retry = retry or self._retry()
                    if isinstance(exc, ChannelFencedError):
                        self._fence.set(exc)
                    elif retry.allows(exc):
                        await retry.pause(exc)
                        continue
                    results.extend([exc] * len(rest))
                    break
                sent_after = self._sequencer.last_confirmed
                placed, refused = await self._writer.write_many(rest)
                outcomes: list[AppendResult | StreamwalError] = []
                whole = refused is None  # every pack landed: no outcome to look through
                for ticks, future, index in placed:
                    landed_pack = await self._pack_outcomes(future, ticks, index, sent_after)
                    if landed_pack is None:
                        whole = False
                        landed_pack = await self._settle_each(future, ticks, index, sent_after)
                    outcomes += landed_pack
                if whole:
                    results.extend(outcomes)
                    continue
                if refused is not None:
                    outcomes.extend([refused] * (len(rest) - len(outcomes)))
                landed = next(
                    (i for i, o in enumerate(outcomes) if isinstance(o, StreamwalError)),
                    len(outcomes),
                )
                results.extend(outcomes[:landed])
                tail = outcomes[landed:]
                if tail:
                    retry = retry or self._retry()
                    if all(isinstance(o, StreamwalError) and retry.allows(o) for o in tail):
                        first = tail[0]
                        assert isinstance(first, StreamwalError)
                        await retry.pause(first)
                        continue
                results.extend(tail)
            return results
        finally:
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    async def _pack_outcomes(
        self,
        future: asyncio.Future[list[MessageId]],
        ticks: list[int],
        index: int,
        sent_after: MessageId,
    ) -> list[AppendResult | StreamwalError] | None:
        """The results of a batch's messages in one pack, its future awaited once;
        ``None`` if it failed (:meth:`_settle_each` then)."""
        try:
            ids = await future
        except Exception:
            return None
        return list(map(AppendResult, ids[index : index + len(ticks)], ticks))

    async def _settle_each(
        self,
        future: asyncio.Future[list[MessageId]],
        ticks: list[int],
        index: int,
        sent_after: MessageId,
    ) -> list[AppendResult | StreamwalError]:
        """A failed pack's messages, each settled as a single append's (a fenced one
        may yet be found in the log by its own time tick)."""
        return [
            await self._outcome(future, tick, index + k, sent_after) for k, tick in enumerate(ticks)
        ]

    async def _outcome(
        self,
        future: asyncio.Future[list[MessageId]],
        time_tick: int,
        index: int,
        sent_after: MessageId,
    ) -> AppendResult | StreamwalError:
        """One batched message's outcome, settled as :meth:`do_append` settles it (the
        messages of one pack share its future: awaited once, then at once)."""
        try:
            return AppendResult((await future)[index], time_tick)
        except ChannelFencedError as exc:
            self._fence.set(exc)
            if exc.outcome is not WriteOutcome.UNKNOWN:
                return exc
            settled = await self._readback.settle(time_tick, sent_after)
            if settled is WriteOutcome.NOT_WRITTEN:
                return ChannelFencedError(exc.channel, exc.reason)
            if isinstance(settled, WriteOutcome):
                return exc
            return AppendResult(settled, time_tick)
        except StreamwalError as exc:
            return exc
        except Exception as exc:  # a broken backend: the entry was handed over
            return OutcomeUnknownError(f"the backend failed the append: {exc!r}")

    def _retry(self) -> Retry:
        """The retries of one append or batch (``append_backoff``, its ``max_attempts``)."""
        return Retry(
            self.params.config.append_backoff,
            retry_if=self._may_retry,
            on_retry=self._failed,
            sleep=self._backoff_wait,
        )

    def _may_retry(self, error: BaseException) -> bool:
        return (
            isinstance(error, StreamwalError)
            and error.retriable
            and not self._closing
            and self._fence.error is None
        )

    def _failed(self, attempt: RetryAttempt) -> None:
        _log.warning(
            "channel %s: append attempt %d failed (%r); retrying in %.0f ms",
            self._channel,
            attempt.attempt,
            attempt.error,
            attempt.delay * 1000,
        )

    async def _backoff_wait(self, delay: float) -> None:
        """The backoff before the next attempt; ends early on fence or close."""
        with contextlib.suppress(TimeoutError):
            await within(self._wake.wait(), delay)

    def on_fenced(self, error: ChannelFencedError) -> None:
        self._wake.set()  # a retry waiting for its backoff gives up now

    async def close(self) -> None:
        """Stop the ticker, refuse new attempts, wait (bounded) for appends in flight."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        await self._ticker.close()
        await self._readback.close()
        try:
            async with asyncio.timeout(self.params.config.close_timeout):
                await self._idle.wait()
                await self._writer.drained()
        except TimeoutError:
            _log.warning(
                "channel %s: %d appends still in flight after %.1f s; closing anyway",
                self._channel,
                self._active + self._writer.in_flight,
                self.params.config.close_timeout,
            )
