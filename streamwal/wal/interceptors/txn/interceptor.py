"""The transaction interceptor: begin, append into, commit or roll back, expire.

The owner keeps each open transaction (:class:`TxnSession`) and holds LastConfirmed at
its begin (:mod:`streamwal.wal.interceptors.holds`) until it ends. A commit waits for
the transaction's appends in flight, then writes one ``CommitTxn``; an append with an
unknown outcome forbids the commit (it could deliver the transaction incomplete).
Without an append or a keepalive for its keepalive in TSO time, a transaction is
rolled back (a ``RollbackTxn`` is written). A fence or a close ends every open
transaction (:class:`~streamwal.errors.TransactionAbortedError`); the next owner knows
nothing of them, and readers never deliver a transaction without its commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import OrderedDict

from opentelemetry import trace

from streamwal.errors import (
    ChannelFencedError,
    InvalidInputError,
    TransactionAbortedError,
    TransactionError,
    TransactionExpiredError,
    TransactionNotFoundError,
    WriteOutcome,
    outcome_of,
)
from streamwal.wal.exactly_once_metrics import record_txn_begin, record_txn_end
from streamwal.wal.interceptors.base import (
    AppendFunc,
    AppendResult,
    InterceptorBase,
    InterceptorParams,
    Sink,
)
from streamwal.wal.interceptors.txn.session import (
    TxnSession,
    TxnState,
    decimal_payload,
    parse_decimal_payload,
    physical_ms,
)
from streamwal.wal.message import ImmutableMessage, MessageType, MutableMessage

__all__ = ["TxnInterceptor"]

_log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)
_ENDED_KEPT = 4096  # ended transaction ids remembered, to answer why they ended


class TxnInterceptor(InterceptorBase):
    """See the module docstring; single event loop."""

    passes_plain = True
    """A message without a producer id or a transaction id passes through unseen."""

    def __init__(self, params: InterceptorParams, sink: Sink) -> None:
        super().__init__(params, sink)
        self._channel = params.channel.name
        self._open: dict[int, TxnSession] = {}
        self._spans: dict[int, trace.Span] = {}
        self._ended: OrderedDict[int, TransactionError] = OrderedDict()
        self._now = params.first_message.time_tick
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped: str | None = None

    @property
    def open_transactions(self) -> int:
        return len(self._open)

    # -- the WAL's calls -------------------------------------------------------------

    async def begin(self, append: AppendFunc, vchannel: str, keepalive: float | None) -> int:
        """Open a transaction on ``vchannel``; its id (its begin's time tick)."""
        seconds = self.params.config.txn_keepalive if keepalive is None else keepalive
        if (
            not isinstance(seconds, int | float)
            or isinstance(seconds, bool)
            or not math.isfinite(seconds)
            or seconds <= 0
        ):
            raise InvalidInputError(f"keepalive must be a number of seconds > 0, got {seconds!r}")
        keepalive_ms = max(1, round(seconds * 1000))
        msg = MutableMessage(MessageType.BEGIN_TXN, decimal_payload(keepalive_ms), vchannel)
        result = await append(msg)
        return result.time_tick

    def keep_alive(self, txn_id: int) -> None:
        self._session(txn_id).keep_alive(self._now)

    async def commit(self, append: AppendFunc, txn_id: int) -> AppendResult:
        session = self._session(txn_id)
        session.state = TxnState.COMMITTING
        try:
            await session.idle.wait()
            if session.state is not TxnState.COMMITTING:  # ended while waiting
                raise self._ended_error(txn_id)
            if session.unknown:
                self._end(session, "aborted", TransactionAbortedError(txn_id, _UNKNOWN))
                with contextlib.suppress(Exception):  # readers drop it at the next owner anyway
                    await append(_rollback(session))
                raise self._ended_error(txn_id)
            msg = MutableMessage(
                MessageType.COMMIT_TXN,
                decimal_payload(session.committed_messages),
                session.vchannel,
                txn_id=txn_id,
            )
            return await append(msg)
        except BaseException as exc:
            if session.state is TxnState.COMMITTING:
                if outcome_of(exc) is WriteOutcome.NOT_WRITTEN:
                    session.state = TxnState.OPEN  # the caller may commit again
                else:
                    reason = "the commit has an unknown outcome"
                    self._end(session, "aborted", TransactionAbortedError(txn_id, reason))
            raise

    async def rollback(self, append: AppendFunc, txn_id: int) -> AppendResult:
        session = self._session(txn_id)
        self._end(session, "rolled_back", TransactionNotFoundError(txn_id))
        return await append(_rollback(session))

    def _session(self, txn_id: int) -> TxnSession:
        session = self._open.get(txn_id)
        if session is None or session.state is TxnState.ENDED:
            raise self._ended_error(txn_id)
        if session.state is TxnState.COMMITTING:
            raise TransactionError(txn_id, "a commit is under way: nothing more goes in")
        return session

    def _ended_error(self, txn_id: int) -> TransactionError:
        return self._ended.get(txn_id) or TransactionNotFoundError(txn_id)

    # -- the append path -------------------------------------------------------------

    async def do_append(self, msg: MutableMessage, append: AppendFunc) -> AppendResult:
        if msg.txn_id is None or msg.type.is_txn_marker:
            return await append(msg)
        session = self._session(msg.txn_id)
        if msg.vchannel != session.vchannel:
            raise InvalidInputError(
                f"transaction {msg.txn_id} is on vchannel {session.vchannel!r}, "
                f"not {msg.vchannel!r}"
            )
        session.in_flight += 1
        session.idle.clear()
        try:
            return await append(msg)
        except BaseException as exc:
            if outcome_of(exc) is WriteOutcome.UNKNOWN:
                session.unknown = True
            raise
        finally:
            session.in_flight -= 1
            if session.in_flight == 0:
                session.idle.set()

    # -- hooks, in log order ---------------------------------------------------------

    def on_persisted(self, msg: ImmutableMessage) -> None:
        self._advance(msg.time_tick)
        kind = msg.type
        if kind is MessageType.BEGIN_TXN:
            keepalive_ms = parse_decimal_payload(msg.payload) or 1
            txn_id = msg.time_tick
            self._open[txn_id] = TxnSession(
                txn_id,
                msg.vchannel,
                keepalive_ms,
                msg.message_id,
                physical_ms(msg.time_tick) + keepalive_ms,
            )
            self.params.holds.hold(txn_id, msg.message_id)
            record_txn_begin(self._channel)
            span = _tracer.start_span(
                "wal.txn",
                attributes={"wal.channel": self._channel, "wal.txn_id": txn_id},
            )
            self._spans[txn_id] = span
        elif msg.txn_id is not None:
            session = self._open.get(msg.txn_id)
            if session is None:
                return
            if kind is MessageType.COMMIT_TXN:
                self._end(session, "committed", TransactionNotFoundError(msg.txn_id))
            elif kind is not MessageType.ROLLBACK_TXN:
                session.committed_messages += 1
                session.keep_alive(msg.time_tick)

    def on_time_tick(self, time_tick: int) -> None:
        self._advance(time_tick)

    def _advance(self, time_tick: int) -> None:
        self._now = max(self._now, time_tick)
        if not self._open:
            return
        now_ms = physical_ms(self._now)
        for session in list(self._open.values()):
            if session.state is TxnState.OPEN and session.deadline_ms < now_ms:
                self._expire(session)

    def _expire(self, session: TxnSession) -> None:
        self._end(session, "expired", TransactionExpiredError(session.txn_id))
        _log.info("channel %s: transaction %d expired", self._channel, session.txn_id)
        if self._stopped is None:
            task = asyncio.get_running_loop().create_task(self._write_rollback(session))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write_rollback(self, session: TxnSession) -> None:
        try:
            wal = await self.params.wal
            await wal.write_system(_rollback(session))
        except Exception as exc:  # readers drop it at the next owner anyway
            _log.warning(
                "channel %s: writing the rollback of expired transaction %d failed: %r",
                self._channel,
                session.txn_id,
                exc,
            )

    def _end(self, session: TxnSession, outcome: str, error: TransactionError) -> None:
        if session.state is TxnState.ENDED:
            return
        session.state = TxnState.ENDED
        session.error = error
        session.idle.set()  # a commit waiting sees it ended
        self._open.pop(session.txn_id, None)
        self.params.holds.release(session.txn_id)
        self._ended[session.txn_id] = error
        while len(self._ended) > _ENDED_KEPT:
            self._ended.popitem(last=False)
        record_txn_end(self._channel, outcome)
        span = self._spans.pop(session.txn_id, None)
        if span is not None:
            span.set_attribute("wal.txn.outcome", outcome)
            span.set_attribute("wal.txn.messages", session.committed_messages)
            span.end()

    def _stop(self, reason: str) -> None:
        self._stopped = reason
        for session in list(self._open.values()):
            self._end(session, "aborted", TransactionAbortedError(session.txn_id, reason))

    def on_fenced(self, error: ChannelFencedError) -> None:
        self._stop(f"the owner was fenced ({error.reason or 'another owner took the channel'})")

    async def close(self) -> None:
        self._stop("the WAL closed")
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task


_UNKNOWN = "an append in it has an unknown outcome: rolled back, begin again"


def _rollback(session: TxnSession) -> MutableMessage:
    return MutableMessage(MessageType.ROLLBACK_TXN, b"", session.vchannel, txn_id=session.txn_id)
