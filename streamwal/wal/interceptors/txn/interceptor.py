"""The transaction interceptor: begin, append into, commit or roll back, expire.

The owner keeps each open transaction (:class:`TxnSession`) and holds LastConfirmed at
its begin (:mod:`streamwal.wal.interceptors.holds`) until it ends. A commit waits for
the transaction's appends in flight, then writes one ``CommitTxn``; an append with an
unknown outcome forbids the commit (it could deliver the transaction incomplete).

Keepalive is measured on the owner's monotonic clock (``InterceptorParams.clock``), not
in TSO time: timestamps come out of cached blocks, so TSO time stands still and then
jumps, which expired live transactions early and kept dead ones open. Its begin, each
append into it and each keepalive push a transaction's deadline to now + its
keepalive. Past the deadline, whichever comes first of its next call (append,
keepalive, commit, rollback) and the channel's next message or time tick expires it: a
``RollbackTxn`` is written and its calls get
:class:`~streamwal.errors.TransactionExpiredError`. Readers never look at the clock:
they deliver at the commit and drop at the rollback, so what the log says does not
depend on whose clock decided.

A fence or a close ends every open transaction
(:class:`~streamwal.errors.TransactionAbortedError`); the next owner knows nothing of
them, and readers never deliver a transaction without its commit.

The owner remembers the result of its last commits and rollbacks (bounded): repeating
one is answered with the first result and writes nothing, so a client may retry a
commit whose answer it lost. A repeat after a commit of unknown outcome gets a
``TransactionAbortedError`` whose outcome is unknown: the commit may be in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence

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
)
from streamwal.wal.message import ImmutableMessage, MessageType, MutableMessage

__all__ = ["TxnInterceptor"]

_log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)
_ENDED_KEPT = 4096  # ended transaction ids remembered, to answer why they ended
_RESULTS_KEPT = 4096  # commit and rollback results remembered, to answer their repeats


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
        self._committed: OrderedDict[int, AppendResult] = OrderedDict()
        self._rolled_back: OrderedDict[int, AppendResult] = OrderedDict()
        self._rolling_back: dict[int, asyncio.Event] = {}
        # rolled back at the caller's request, the marker not written: a repeat writes it
        self._unwritten_rollbacks: OrderedDict[int, TxnSession] = OrderedDict()
        self._clock: Callable[[], float] = params.clock
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
        self._session(txn_id).keep_alive(self._clock())

    async def commit(self, append: AppendFunc, txn_id: int) -> AppendResult:
        done = await _first_answer(self._committed, txn_id, self._committing)
        if done is not None:
            return done
        session = self._session(txn_id)
        session.state = TxnState.COMMITTING
        session.committed = asyncio.Event()
        sent = False
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
            sent = True
            return await append(msg)
        except BaseException as exc:
            if not sent or outcome_of(exc) is WriteOutcome.NOT_WRITTEN:
                if session.state is TxnState.COMMITTING:
                    session.state = TxnState.OPEN  # the caller may commit again
                    session.keep_alive(self._clock())
            elif txn_id not in self._committed:
                # also when a fence ended it meanwhile: a repeat must not hear "not written"
                error = _commit_unknown(txn_id)
                self._end(session, "aborted", error)
                self._ended[txn_id] = error
            raise
        finally:
            session.committed.set()

    def _committing(self, txn_id: int) -> asyncio.Event | None:
        session = self._open.get(txn_id)
        if session is None or session.state is not TxnState.COMMITTING:
            return None
        return session.committed

    async def rollback(self, append: AppendFunc, txn_id: int) -> AppendResult:
        done = await _first_answer(self._rolled_back, txn_id, self._rolling_back.get)
        if done is not None:
            return done
        session = self._unwritten_rollbacks.pop(txn_id, None) or self._session(txn_id)
        self._end(session, "rolled_back", TransactionNotFoundError(txn_id))
        decided = self._rolling_back[txn_id] = asyncio.Event()
        try:
            result = await append(_rollback(session))
        except BaseException as exc:
            if outcome_of(exc) is WriteOutcome.NOT_WRITTEN:  # a repeat writes it
                self._unwritten_rollbacks[txn_id] = session
                while len(self._unwritten_rollbacks) > _RESULTS_KEPT:
                    self._unwritten_rollbacks.popitem(last=False)
            raise
        finally:
            del self._rolling_back[txn_id]
            decided.set()
        _remember(self._rolled_back, txn_id, result)
        return result

    def _session(self, txn_id: int) -> TxnSession:
        """The open transaction, or the typed error its next call gets (expiry included:
        a dead transaction is not kept open until the next time tick notices it)."""
        session = self._open.get(txn_id)
        if session is None or session.state is TxnState.ENDED:
            raise self._ended_error(txn_id)
        if session.state is TxnState.COMMITTING:
            raise TransactionError(txn_id, "a commit is under way: nothing more goes in")
        if session.expired(self._clock()):
            self._expire(session)
            raise self._ended_error(txn_id)
        return session

    def _ended_error(self, txn_id: int) -> TransactionError:
        return self._ended.get(txn_id) or TransactionNotFoundError(txn_id)

    # -- the append path -------------------------------------------------------------

    async def do_append(self, msg: MutableMessage, append: AppendFunc) -> AppendResult:
        if msg.txn_id is None or type(msg.type) is MessageType:
            return await append(msg)
        session = self._session(msg.txn_id)
        if msg.vchannel != session.vchannel:
            raise InvalidInputError(
                f"transaction {msg.txn_id} is on vchannel {session.vchannel!r}, "
                f"not {msg.vchannel!r}"
            )
        session.keep_alive(self._clock())
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
        self._note(msg)
        self._sweep()

    def on_persisted_many(self, msgs: Sequence[ImmutableMessage]) -> None:
        """A pack: each message noted, then one expiry round (a pack is released at one
        instant: a round per message would find the same)."""
        note = self._note
        for msg in msgs:
            if msg.txn_id is not None or type(msg.type) is not str:  # plain ones: nothing
                note(msg)
        self._sweep()

    def _note(self, msg: ImmutableMessage) -> None:
        kind = msg.type
        if kind is MessageType.BEGIN_TXN:
            keepalive = (parse_decimal_payload(msg.payload) or 1) / 1000
            txn_id = msg.time_tick
            self._open[txn_id] = TxnSession(
                txn_id, msg.vchannel, keepalive, msg.message_id, self._clock() + keepalive
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
            if session is not None:
                if kind is MessageType.COMMIT_TXN:
                    result = AppendResult(msg.message_id, msg.time_tick)
                    _remember(self._committed, msg.txn_id, result)
                    self._end(session, "committed", TransactionNotFoundError(msg.txn_id))
                elif kind is not MessageType.ROLLBACK_TXN:
                    session.committed_messages += 1
                    session.keep_alive(self._clock())

    def on_time_tick(self, time_tick: int) -> None:
        self._sweep()

    def _sweep(self) -> None:
        """Expire what is past its deadline, so its hold on LastConfirmed goes and its
        rollback is written without waiting for a call on it (the periodic time tick
        brings this round on an idle channel)."""
        if not self._open:
            return
        now = self._clock()
        for session in list(self._open.values()):
            if session.expired(now):
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


def _commit_unknown(txn_id: int) -> TransactionAbortedError:
    """Its outcome is the commit's: whoever repeats it learns the commit may be in the
    log (a reader tells), not that nothing was written."""
    error = TransactionAbortedError(txn_id, "the commit has an unknown outcome")
    error.outcome = WriteOutcome.UNKNOWN
    return error


async def _first_answer(
    results: OrderedDict[int, AppendResult],
    txn_id: int,
    under_way: Callable[[int], asyncio.Event | None],
) -> AppendResult | None:
    """A repeated commit or rollback is answered as the first one is: with its result,
    once the first call under way (``under_way`` gives its event, set when it ends)
    has ended; ``None`` when this call is the one to do it."""
    while True:
        done = results.get(txn_id)
        if done is not None:
            return done
        event = under_way(txn_id)
        if event is None:
            return None
        await event.wait()


def _remember(results: OrderedDict[int, AppendResult], txn_id: int, result: AppendResult) -> None:
    results[txn_id] = result
    while len(results) > _RESULTS_KEPT:
        results.popitem(last=False)


def _rollback(session: TxnSession) -> MutableMessage:
    return MutableMessage(MessageType.ROLLBACK_TXN, b"", session.vchannel, txn_id=session.txn_id)
