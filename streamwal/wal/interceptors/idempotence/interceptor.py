"""The idempotence interceptor: an append retried with the same producer id and
sequence number is persisted once.

A duplicate is answered with the original message id and time tick, and nothing is
appended. The producer id and sequence travel in the message (``_pid``/``_seq``), so
a new owner rebuilds the windows from the log's tail: at start it reads what earlier
owners wrote in the last ``WALConfig.idempotence_rebuild_window`` seconds (the whole log
if the backend cannot find that position), in the background, bounded by
``WALConfig.idempotence_rebuild_timeout``; only appends that carry a producer id wait
for it. An append whose outcome is unknown is
looked up in the log when it is retried. Appends without a producer id pass through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from streamwal.errors import OutcomeUnknownError, StreamwalError, WriteOutcome, outcome_of
from streamwal.wal.backend import DeliveryPolicy
from streamwal.wal.exactly_once_metrics import record_duplicate
from streamwal.wal.interceptors.base import (
    AppendFunc,
    AppendResult,
    InterceptorBase,
    InterceptorParams,
    Sink,
)
from streamwal.wal.interceptors.idempotence.window import ProducerTable
from streamwal.wal.message import ImmutableMessage, MutableMessage
from streamwal.wal.message_id import MessageId
from streamwal.wal.retention_contract import BackendRetention
from streamwal.wal.tail import read_log

__all__ = ["IdempotenceInterceptor"]

_log = logging.getLogger(__name__)

_LOOKUP_BOUND_S = 10.0


class IdempotenceInterceptor(InterceptorBase):
    """See the module docstring; single event loop."""

    passes_plain = True
    """A message without a producer id or a transaction id passes through unseen."""

    def __init__(self, params: InterceptorParams, sink: Sink) -> None:
        super().__init__(params, sink)
        config = params.config
        self._table = ProducerTable(config.idempotence_window, config.idempotence_producers)
        self._channel = params.channel.name
        self._last_id: MessageId = params.first_message.message_id
        self._rebuild: asyncio.Task[None] | None = None
        self._last_waiter: asyncio.Future[None] | None = None

    @property
    def producers(self) -> ProducerTable:
        return self._table

    async def start(self) -> None:
        self._rebuild = asyncio.get_running_loop().create_task(self._rebuild_from_log())

    async def _tail_start(self) -> DeliveryPolicy:
        """Where the log's tail begins: the first entry published within
        ``idempotence_rebuild_window`` (the whole log if the backend cannot tell)."""
        backend = self.params.backend
        if not isinstance(backend, BackendRetention):
            return DeliveryPolicy.all()
        since_ms = int((time.time() - self.params.config.idempotence_rebuild_window) * 1000)
        try:
            start = await backend.position_at(since_ms)
        except StreamwalError as exc:  # no admin API, say: read it all, still bounded
            _log.info("channel %s: reading the whole log to rebuild (%r)", self._channel, exc)
            return DeliveryPolicy.all()
        return DeliveryPolicy.all() if start is None else DeliveryPolicy.start_from(start)

    async def _rebuild_from_log(self) -> None:
        wal = await self.params.wal
        first = self.params.first_message.message_id
        found = 0
        try:
            entries = read_log(
                self.params.backend,
                wal.message_id_decoder,
                await self._tail_start(),
                until=first,
                bound=self.params.config.idempotence_rebuild_timeout,
            )
            async with contextlib.aclosing(entries):
                async for msg in entries:
                    if msg.producer_id is not None and msg.sequence is not None:
                        result = AppendResult(msg.message_id, msg.time_tick)
                        self._table.record(msg.producer_id, msg.sequence, result)
                        found += 1
        except Exception as exc:  # a partial rebuild still answers what it found
            _log.warning(
                "channel %s: rebuilding the idempotence windows stopped early (%r): "
                "retries of older appends may be appended again",
                self._channel,
                exc,
            )
        if found:
            _log.info(
                "channel %s: %d idempotent appends of %d producers read back from the log",
                self._channel,
                found,
                len(self._table),
            )

    def on_persisted(self, msg: ImmutableMessage) -> None:
        self._last_id = msg.message_id

    def on_persisted_many(self, msgs: Sequence[ImmutableMessage]) -> None:
        self._last_id = msgs[-1].message_id

    async def _after_rebuild(self) -> None:
        """Wait for the rebuild, in arrival order: appends that waited pass one after the
        other, and one arriving while any of them has not passed yet queues behind them
        (the rebuild's end alone would let it overtake them, and the log order of a
        client's pipelined appends is the order it sent them)."""
        rebuild, ahead = self._rebuild, self._last_waiter
        if (rebuild is None or rebuild.done()) and (ahead is None or ahead.done()):
            return
        passed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last_waiter = passed
        try:
            await asyncio.shield(ahead if ahead is not None and not ahead.done() else rebuild)  # type: ignore[arg-type]
        finally:
            passed.set_result(None)

    async def do_append(self, msg: MutableMessage, append: AppendFunc) -> AppendResult:
        producer_id, seq = msg.producer_id, msg.sequence
        if producer_id is None or seq is None:
            return await append(msg)
        await self._after_rebuild()
        while True:
            decision = self._table.decide(producer_id, seq)
            if decision.result is not None:
                record_duplicate(self._channel)
                return decision.result
            if decision.pending is not None:
                settled = await asyncio.shield(decision.pending)
                if settled is not None:
                    record_duplicate(self._channel)
                    return settled
                continue  # it failed: decide again
            break
        self._table.begin(producer_id, seq)
        sent_after = self._last_id
        result: AppendResult | None = None
        unknown_after: MessageId | None = None
        try:
            if decision.look_after is not None:
                result = await self._look_up(producer_id, seq, decision.look_after)
                if result is not None:
                    record_duplicate(self._channel)
                    return result
            result = await append(msg)
            return result
        except BaseException as exc:
            if outcome_of(exc) is WriteOutcome.UNKNOWN:
                unknown_after = decision.look_after or sent_after
            raise
        finally:
            self._table.finish(producer_id, seq, result, unknown_after)

    async def append_new_batch(
        self,
        msgs: Sequence[MutableMessage],
        back_to_back: Callable[
            [Sequence[MutableMessage]], Awaitable[list[AppendResult | StreamwalError]]
        ],
    ) -> list[AppendResult | StreamwalError] | None:
        """A batch of numbered messages none of which this owner has seen, persisted
        back to back; ``None`` (nothing done) if any is a duplicate, in flight, of
        unknown outcome, refused or repeated within the batch: the caller then takes
        the batch one message at a time through the chain, which handles each case.

        A batch numbered as one run (one producer, consecutive sequences: what a node's
        ``ProduceBatch`` carries) past every sequence the producer's window knows is
        decided in one step for the whole run, and recorded in one when it all landed.
        """
        await self._after_rebuild()
        run = _run_of(msgs)
        if run is not None and self._table.begin_range(run[0], run[1], len(msgs)):
            numbers = [(run[0], run[1] + i) for i in range(len(msgs))]
        else:
            decided = self._decide_each(msgs)
            if decided is None:
                return None
            numbers, run = decided, None
        sent_after = self._last_id
        outcomes: list[AppendResult | StreamwalError] | None = None
        try:
            outcomes = await back_to_back(msgs)
            return outcomes
        finally:
            self._finish(numbers, outcomes, sent_after, run)

    def _decide_each(self, msgs: Sequence[MutableMessage]) -> list[tuple[int, int]] | None:
        """Each message decided on its own and, if all are new, reserved (``None``:
        nothing reserved; see :meth:`append_new_batch`)."""
        numbers: list[tuple[int, int]] = []
        for msg in msgs:
            producer_id, seq = msg.producer_id, msg.sequence
            if producer_id is None or seq is None or msg.txn_id is not None:
                return None
            try:
                decision = self._table.decide(producer_id, seq)
            except StreamwalError:
                return None
            if decision.result is not None or decision.pending is not None:
                return None
            if decision.look_after is not None:  # decide took it out: put it back
                self._table.finish(producer_id, seq, None, decision.look_after)
                return None
            numbers.append((producer_id, seq))
        if len(set(numbers)) != len(numbers):
            return None
        for producer_id, seq in numbers:  # no await since decide: still all new
            self._table.begin(producer_id, seq)
        return numbers

    def _finish(
        self,
        numbers: list[tuple[int, int]],
        outcomes: list[AppendResult | StreamwalError] | None,
        sent_after: MessageId,
        run: tuple[int, int] | None,
    ) -> None:
        """Record where each message of a batch landed (or that it did not, or that it
        may have: looked up from ``sent_after`` when retried)."""
        if run is not None and outcomes is not None:
            landed = [o for o in outcomes if type(o) is AppendResult]
            if len(landed) == len(outcomes):
                self._table.finish_range(run[0], run[1], landed)
                return
        for index, (producer_id, seq) in enumerate(numbers):
            outcome = None if outcomes is None else outcomes[index]
            if isinstance(outcome, AppendResult):
                self._table.finish(producer_id, seq, outcome)
            elif outcome is None or outcome_of(outcome) is WriteOutcome.UNKNOWN:
                self._table.finish(producer_id, seq, None, sent_after)
            else:
                self._table.finish(producer_id, seq, None)

    async def _look_up(self, producer_id: int, seq: int, after: MessageId) -> AppendResult | None:
        """Where an earlier attempt of ``seq`` landed, if it did. Raises
        :class:`~streamwal.errors.OutcomeUnknownError` if the log cannot be read (the
        outcome stays unknown; the next retry looks again)."""
        wal = await self.params.wal
        entries = read_log(
            self.params.backend,
            wal.message_id_decoder,
            DeliveryPolicy.start_after(after),
            bound=_LOOKUP_BOUND_S,
        )
        try:
            async with contextlib.aclosing(entries):
                async for msg in entries:
                    if msg.producer_id == producer_id and msg.sequence == seq:
                        return AppendResult(msg.message_id, msg.time_tick)
        except (StreamwalError, TimeoutError) as exc:
            raise OutcomeUnknownError(
                f"producer {producer_id} sequence {seq}: an earlier attempt has an unknown "
                f"outcome and the log could not be read for it: {exc!r}"
            ) from exc
        return None

    async def close(self) -> None:
        if self._rebuild is not None and not self._rebuild.done():
            self._rebuild.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._rebuild


def _run_of(msgs: Sequence[MutableMessage]) -> tuple[int, int] | None:
    """(producer id, first sequence) of a batch numbered as one run outside any
    transaction, else ``None``."""
    head = msgs[0]
    producer_id, first = head.producer_id, head.sequence
    if producer_id is None or first is None:
        return None
    for index, msg in enumerate(msgs):
        if msg.txn_id is not None:
            return None
        if msg.producer_id != producer_id or msg.sequence != first + index:
            return None
    return producer_id, first
