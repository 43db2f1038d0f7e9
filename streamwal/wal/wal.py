"""The WAL of one channel, as handed back by :func:`streamwal.wal.initializing.open_wal`.

Lifecycle: built and started by ``open_wal`` (its constructor does no I/O);
``close()`` is idempotent and, once it has started, every method raises
:class:`~streamwal.errors.ClosedError`. Close order, each wait bounded by
``WALConfig.close_timeout``: refuse new appends; stop the periodic time tick; wait for
appends in flight; seal the write-ahead buffer; close the scanners; close the backend.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Final

from streamwal.errors import (
    BatchAppendError,
    ChannelFencedError,
    ClosedError,
    InvalidInputError,
    MisconfiguredError,
    QuotaExceededError,
    StreamwalError,
)
from streamwal.lifecycle import Closeable
from streamwal.wal.backend import BackendWAL, DeliveryPolicy
from streamwal.wal.config import WALConfig
from streamwal.wal.interceptors import AppendResult, InterceptorChain, InterceptorParams
from streamwal.wal.interceptors.txn import TxnInterceptor
from streamwal.wal.message import MessageIdDecoder, MutableMessage
from streamwal.wal.message.checks import check_append as _check_message
from streamwal.wal.message_id import MessageId
from streamwal.wal.metrics import record_append, record_append_batch
from streamwal.wal.mvcc import MVCCManager
from streamwal.wal.retention_contract import (
    BackendRetention,
    Checkpoint,
    QuotaExplainer,
    RetentionState,
)
from streamwal.wal.scanner import Scanner
from streamwal.wal.truncation import Truncator, retention_of
from streamwal.wal.write_ahead_buffer import WriteAheadBuffer

__all__ = ["WAL", "ReadOnlyWAL"]

_log = logging.getLogger(__name__)


class _Readable(Closeable):
    """What both WAL kinds share: scanners, and closing the backend."""

    channel: Final[str]
    #: the backend's ``message_id_from_bytes``
    message_id_decoder: Final[MessageIdDecoder]

    def __init__(
        self,
        channel: str,
        backend: BackendWAL,
        message_id_from_bytes: MessageIdDecoder,
        config: WALConfig,
        buffer: WriteAheadBuffer | None,
    ) -> None:
        self.channel = channel
        self._backend = backend
        self.message_id_decoder = message_id_from_bytes
        self._config = config
        self._buffer = buffer
        self._scanners: set[Scanner] = set()
        self._closing = False
        self._closed = asyncio.Event()

    def _check_open(self) -> None:
        if self._closing:
            raise ClosedError(f"WAL of channel {self.channel!r} is closed")

    async def read(
        self,
        policy: DeliveryPolicy | None = None,
        vchannel: str | None = None,
        *,
        appended_only: bool = False,
    ) -> Scanner:
        """A started scanner from ``policy`` (default: all), filtered to ``vchannel``;
        ``appended_only``: only messages a caller appended (no time ticks or transaction
        markers the WAL wrote; a transaction's messages still come at its commit).

        Raises :class:`~streamwal.errors.InvalidInputError` for a policy the backend rejects
        (an unknown message id), :class:`~streamwal.errors.TruncatedError` for a position
        before the truncation point, ``ClosedError`` after close.
        ``DeliveryPolicy.after_checkpoint(consumer)`` resumes after that consumer's
        checkpoint (from the earliest kept entry if it has none).
        """
        self._check_open()
        policy = policy if policy is not None else DeliveryPolicy.all()
        if policy.kind == DeliveryPolicy.AFTER_CHECKPOINT:
            assert policy.consumer is not None
            checkpoint = (await self.retention()).checkpoint_of(policy.consumer)
            policy = (
                DeliveryPolicy.all()
                if checkpoint is None
                else DeliveryPolicy.start_after(checkpoint.message_id)
            )
        truncated = None
        if isinstance(self._backend, BackendRetention) and (
            policy.kind == DeliveryPolicy.ALL  # may start inside the pack holding the point
            or (policy.kind == DeliveryPolicy.START_FROM_TIME_TICK and self._buffer is not None)
        ):  # served from the buffer, which may hold what a truncate to an id discarded
            try:
                truncated = await self._backend.truncation()
            except MisconfiguredError:
                pass  # no admin API: nothing can have been truncated
        scanner = Scanner(
            channel=self.channel,
            backend=self._backend,
            message_id_from_bytes=self.message_id_decoder,
            policy=policy,
            vchannel=vchannel,
            buffer=self._buffer,
            backoff=self._config.scanner_backoff,
            on_close=self._scanners.discard,
            appended_only=appended_only,
            truncated=truncated,
        )
        self._scanners.add(scanner)
        try:
            await scanner.start()
        except BaseException:
            await scanner.close()
            raise
        if self._closing:  # closed while starting
            await scanner.close()
            self._check_open()
        return scanner

    async def checkpoint(self, consumer: str, message_id: MessageId, time_tick: int) -> None:
        """Record that ``consumer`` has persisted everything up to ``message_id``
        (inclusive, at ``time_tick``). Durable, kept across changes of owner; from now
        on the channel is not truncated past it. Any node may record it, owner or not.

        Raises :class:`~streamwal.errors.TruncatedError` for a position already truncated,
        :class:`~streamwal.errors.InvalidInputError` for a bad name or a backend that keeps
        no checkpoints.
        """
        self._check_open()
        checkpoint = Checkpoint(consumer, message_id, time_tick)
        await retention_of(self._backend, self.channel).save_checkpoint(checkpoint)

    async def remove_checkpoint(self, consumer: str) -> None:
        """Unregister ``consumer``: it no longer holds truncation back."""
        self._check_open()
        await retention_of(self._backend, self.channel).remove_checkpoint(consumer)

    async def retention(self) -> RetentionState:
        """The truncation point, storage used, and each consumer's checkpoint and backlog."""
        self._check_open()
        return await retention_of(self._backend, self.channel).retention_state()

    async def close(self) -> None:
        if self._closing:
            await self._closed.wait()
            return
        self._closing = True
        try:
            await self._close_writer()
            for scanner in list(self._scanners):
                await scanner.close()
            try:
                async with asyncio.timeout(self._config.close_timeout):
                    await self._backend.close()
            except TimeoutError:
                _log.warning("channel %s: the backend did not close in time", self.channel)
            except Exception:
                _log.exception("channel %s: closing the backend failed", self.channel)
        finally:
            self._closed.set()

    async def _close_writer(self) -> None:
        return None


class WAL(_Readable):
    """The owner's WAL: appends with time ticks, reads through the write-ahead buffer."""

    #: how many attempts the first time tick took
    open_attempts: Final[int]
    node_id: Final[int]
    #: the channel's term this owner opened it under (0: none given)
    term: Final[int]
    #: the time tick this owner opened the channel with
    first_time_tick: Final[int]
    first_message_id: Final[MessageId]
    mvcc: Final[MVCCManager]
    buffer: Final[WriteAheadBuffer]

    def __init__(
        self,
        params: InterceptorParams,
        message_id_from_bytes: MessageIdDecoder,
        open_attempts: int = 1,
    ) -> None:
        super().__init__(
            params.channel.name,
            params.backend,
            message_id_from_bytes,
            params.config,
            params.buffer,
        )
        self.params = params
        """What the interceptors were built from (buffer, MVCC, channel info, ...)."""
        self.node_id = params.channel.node_id
        self.term = params.channel.term
        self.first_time_tick = params.first_message.time_tick
        self.first_message_id = params.first_message.message_id
        self.mvcc = params.mvcc
        self.buffer = params.buffer
        self._chain = InterceptorChain(params)
        txns = self._chain.find(TxnInterceptor)
        assert txns is not None, "the chain order includes the transaction interceptor"
        self._txns: TxnInterceptor = txns
        self._started = False
        self.open_attempts = open_attempts
        self._truncator = Truncator(
            params.channel.name,
            params.backend,
            params.config.retention,
            params.config.truncate_interval,
            lambda: self.params.mvcc.pchannel.time_tick,
        )
        #: wall-clock ns of this owner's first acknowledged append (see first_acknowledged)
        self._first_ack_ns: int | None = None
        self._first_ack = asyncio.Event()

    async def first_acknowledged(self) -> int | None:
        """When (wall-clock ns) this owner acknowledged its first append: where a
        failover ends for the channel's writers. ``None`` once closed without one."""
        await self._first_ack.wait()
        return self._first_ack_ns

    def _acknowledged(self) -> None:
        if self._first_ack_ns is None:
            self._first_ack_ns = time.time_ns()
            self._first_ack.set()

    @property
    def is_fenced(self) -> bool:
        """True once another owner took the channel; appends fail, reads go on."""
        return self._chain.fence.error is not None

    async def start(self) -> None:
        """Start the interceptors (the periodic time tick); once, by ``open_wal``."""
        self._check_open()
        if not self._started:
            self._started = True
            await self._chain.start()
            self._truncator.start()

    async def truncate(self, retention: float | None = None) -> MessageId | None:
        """Truncate now: before the slowest registered consumer's checkpoint and the
        retention window (``retention`` seconds, default ``WALConfig.retention``),
        whichever is older. Returns the new truncation point, ``None`` if it did not
        move. Also records each consumer's lag. Owner only; the periodic rounds do the
        same while ``WALConfig.retention`` is set.
        """
        self._check_open()
        return await self._truncator.round(retention)

    async def truncate_to(self, up_to: MessageId) -> MessageId | None:
        """Truncate every message up to and including ``up_to`` (Milvus's
        ``WALImpls.Truncate``): reads from it or before it get
        :class:`~streamwal.errors.TruncatedError` from now on, and ``all`` starts
        after it. Registered consumers clamp it to just before the slowest checkpoint.
        Returns the last message id truncated (the point used), ``None`` if nothing
        new was. :class:`~streamwal.errors.InvalidInputError` for an id that is not a
        message of this channel: nothing is truncated then. Owner only; beside the
        retention rule of :meth:`truncate`, which never undoes it.
        """
        self._check_open()
        return await self._truncator.to(up_to)

    def _check_writable(self) -> None:
        self._check_open()
        self._chain.fence.check()

    async def write_system(self, msg: MutableMessage) -> AppendResult:
        """Append a message the WAL writes itself (a transaction marker): for interceptors."""
        self._check_writable()
        return await self._chain.append(msg)

    async def begin_txn(self, vchannel: str = "", keepalive: float | None = None) -> int:
        """Open a transaction on ``vchannel``; its id (the time tick of its begin).

        Append into it with ``append(msg.with_txn(txn_id))`` (same vchannel), then
        :meth:`commit_txn` or :meth:`rollback_txn`. Readers deliver its messages only
        after the commit, together and in order. Without an append or
        :meth:`keepalive_txn` for ``keepalive`` seconds (default
        ``WALConfig.txn_keepalive``) on this owner's monotonic clock, never TSO time, it
        is rolled back and its next call raises
        :class:`~streamwal.errors.TransactionExpiredError`. A fence or close ends it
        (:class:`~streamwal.errors.TransactionAbortedError`).
        """
        self._check_writable()
        return await self._txns.begin(self._chain.append, vchannel, keepalive)

    async def keepalive_txn(self, txn_id: int) -> None:
        """Push the transaction's expiry back by its keepalive.

        Raises :class:`~streamwal.errors.TransactionError` if it is no longer open.
        """
        self._check_writable()
        self._txns.keep_alive(txn_id)

    async def commit_txn(self, txn_id: int) -> AppendResult:
        """Commit: wait for the transaction's appends in flight, write one ``CommitTxn``.

        A repeat of a commit this owner made (recently) is answered with its result and
        writes nothing, so a commit whose answer was lost can be retried. Raises
        :class:`~streamwal.errors.TransactionError` if it is no longer open (or one of
        its appends has an unknown outcome: it is rolled back); after a commit of unknown
        outcome, its repeats raise ``TransactionAbortedError`` with an unknown
        ``outcome``: the commit may be in the log.
        """
        self._check_open()
        return await self._txns.commit(self._chain.append, txn_id)

    async def rollback_txn(self, txn_id: int) -> AppendResult:
        """Roll back: nothing of the transaction is ever delivered. A repeat is answered
        with the first rollback's result."""
        self._check_open()
        return await self._txns.rollback(self._chain.append, txn_id)

    @property
    def open_transactions(self) -> int:
        return self._txns.open_transactions

    async def append(self, msg: MutableMessage) -> AppendResult:
        """Persist ``msg`` with a fresh time tick; concurrent calls are pipelined.

        With a producer id and sequence (:meth:`MutableMessage.with_producer`) the append
        is idempotent: a retry is answered with the first result, nothing appended;
        :class:`~streamwal.errors.SequenceError` for a sequence a whole window ahead or
        older than the window. With a transaction id, it goes into that transaction.

        Raises :class:`~streamwal.errors.ChannelFencedError` (now and for good) once another
        owner took the channel, :class:`~streamwal.errors.InvalidInputError` for a system
        message or an oversized one, :class:`~streamwal.errors.UnavailableError` once the
        retries (``WALConfig.append_backoff``) are spent, ``ClosedError`` after close.
        Cancelling the caller does not cancel an entry already handed to the backend.
        """
        self._check_writable()
        _check_message(msg, self._config.max_message_bytes)
        started = time.perf_counter()
        outcome = "error"
        try:
            chain = self._chain
            plain = msg.producer_id is None and msg.txn_id is None
            result = await (chain.append_plain if plain else chain.append)(msg)
            outcome = "ok"
            self._acknowledged()
            return result
        except ChannelFencedError:
            outcome = "fenced"
            raise
        except QuotaExceededError as exc:
            if isinstance(self._backend, QuotaExplainer):
                raise await self._backend.explain_quota(exc) from exc
            raise
        finally:
            record_append(self.channel, len(msg.payload), time.perf_counter() - started, outcome)

    def check_message(self, msg: MutableMessage) -> None:
        """:class:`~streamwal.errors.InvalidInputError` if :meth:`append` would refuse
        ``msg`` as invalid (its size, its kind): a caller gathering separate appends into
        one :meth:`append_many` leaves such a message out and answers it alone."""
        _check_message(msg, self._config.max_message_bytes)

    async def append_many(self, msgs: Sequence[MutableMessage]) -> list[AppendResult]:
        """Persist ``msgs`` back to back, in order; their results, in the same order.

        Each message gets its own time tick (increasing in batch order), its own id and
        its own receipt, exactly as :meth:`append` would give it; nothing else enters
        the log between them. A batch with an invalid message is refused whole
        (:class:`~streamwal.errors.InvalidInputError`, naming it) before anything is
        written; so is one on a fenced or closed WAL. Once the batch is handed over, a
        failure raises :class:`~streamwal.errors.BatchAppendError`, whose ``results``
        say which messages landed and which failed, each with the error (and outcome)
        its single append would have had. Retries as for :meth:`append`, for a failed
        tail of the batch only, so the batch order holds in the log.
        """
        self._check_writable()
        batch = list(msgs)
        limit = self._config.max_message_bytes
        for index, msg in enumerate(batch):
            try:
                _check_message(msg, limit)
            except InvalidInputError as exc:
                raise InvalidInputError(f"message {index} of the batch: {exc}") from exc
        if not batch:
            return []
        started = time.perf_counter()
        outcomes = await self._chain.append_many(batch)
        seconds = time.perf_counter() - started
        results = [o for o in outcomes if type(o) is AppendResult]
        if len(results) == len(outcomes):  # the usual case: one count for the batch
            nbytes = sum(map(len, [msg.payload for msg in batch]))
            record_append_batch(self.channel, len(batch), nbytes, {}, seconds)
            self._acknowledged()
            return results
        failed: dict[str, int] = {}
        nbytes = 0
        for msg, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, AppendResult):
                nbytes += len(msg.payload)
            else:
                label = _outcome_label(outcome)
                failed[label] = failed.get(label, 0) + 1
        record_append_batch(self.channel, len(results), nbytes, failed, seconds)
        if results:
            self._acknowledged()
        quota = next((o for o in outcomes if isinstance(o, QuotaExceededError)), None)
        if quota is not None and isinstance(self._backend, QuotaExplainer):
            why = str(await self._backend.explain_quota(quota))  # one look-up per batch
            outcomes = [
                QuotaExceededError(why, o.outcome) if isinstance(o, QuotaExceededError) else o
                for o in outcomes
            ]
        raise BatchAppendError(self.channel, list(outcomes))

    async def _close_writer(self) -> None:
        self._first_ack.set()  # a waiter for the first append gets None
        await self._truncator.close()
        await self._chain.close()

    async def __aenter__(self) -> WAL:
        return self


def _outcome_label(outcome: AppendResult | StreamwalError) -> str:
    if isinstance(outcome, AppendResult):
        return "ok"
    return "fenced" if isinstance(outcome, ChannelFencedError) else "error"


class ReadOnlyWAL(_Readable):
    """A channel opened without ownership: it reads the backend only, fences nobody."""

    def __init__(
        self, backend: BackendWAL, message_id_from_bytes: MessageIdDecoder, config: WALConfig
    ) -> None:
        super().__init__(backend.channel, backend, message_id_from_bytes, config, buffer=None)

    async def __aenter__(self) -> ReadOnlyWAL:
        return self
