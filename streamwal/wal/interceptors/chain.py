"""The interceptor chain, and the one place the WAL's two orders are written.

Appends enter at the first interceptor and each wraps the ones after it; the last,
the time-tick interceptor, persists the message (:data:`INTERCEPTOR_ORDER`). Its
sequencer then publishes persisted messages and in-memory time ticks, in log order,
to the WAL's log listeners (:func:`log_listeners`): MVCC, the write-ahead buffer, then
the interceptors. The chain owns the WAL's one record of the fence
(:attr:`InterceptorChain.fence`, a :class:`~streamwal.wal.fence.Fence`), which its
interceptors reach as ``sink.fence`` and which tells the log listeners, in the same
order, once.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeVar

from streamwal.errors import StreamwalError
from streamwal.wal.fence import Fence
from streamwal.wal.interceptors.base import (
    AppendFunc,
    AppendResult,
    BatchAppender,
    Interceptor,
    InterceptorBase,
    InterceptorParams,
    Sink,
)
from streamwal.wal.interceptors.idempotence import IdempotenceInterceptor
from streamwal.wal.interceptors.timetick import TimeTickInterceptor
from streamwal.wal.interceptors.txn import TxnInterceptor
from streamwal.wal.listener import LogListener
from streamwal.wal.message import ImmutableMessage, MutableMessage

__all__ = ["INTERCEPTOR_ORDER", "InterceptorChain", "InterceptorFactory", "log_listeners"]

_log = logging.getLogger(__name__)
_I = TypeVar("_I")

InterceptorFactory = Callable[[InterceptorParams, Sink], Interceptor]

INTERCEPTOR_ORDER: Final[tuple[InterceptorFactory, ...]] = (
    IdempotenceInterceptor,  # a duplicate is answered before anything else sees it
    TxnInterceptor,
    TimeTickInterceptor,  # persists: must stay last
)


def log_listeners(
    params: InterceptorParams, interceptors: Sequence[Interceptor]
) -> tuple[LogListener, ...]:
    """Who is told of the log (persisted messages, in-memory time ticks, the fence),
    in the order they are told."""
    return (
        # First: a reader the buffer wakes reads MVCC next, and must find it up to date.
        params.mvcc,
        # Wakes the tailing readers; sealed by the fence, so they move to the backend.
        params.buffer,
        # Then the interceptors that listen, in chain order; no reader depends on them.
        *interceptors,
    )


class InterceptorChain:
    """The interceptors of one WAL, built from one :class:`InterceptorParams`."""

    def __init__(
        self, params: InterceptorParams, order: Sequence[InterceptorFactory] = INTERCEPTOR_ORDER
    ) -> None:
        self._channel = params.channel.name
        self.fence: Fence = Fence(self._channel)
        """Whether this owner was fenced: the one record, set once, asked by all."""
        self._buffer = params.buffer
        self._interceptors: list[Interceptor] = [factory(params, self) for factory in order]
        listeners = log_listeners(params, self._interceptors)
        # Only the hooks a listener has are called: one call per listener that cares.
        self._on_persisted = [
            (listener, listener.on_persisted)
            for listener in listeners
            if _has_hook(listener, "on_persisted")
        ]
        self._on_persisted_many = [
            (listener, getattr(listener, "on_persisted_many", None) or _each(on_persisted))
            for listener, on_persisted in self._on_persisted
        ]
        self._on_time_tick = [
            (listener, listener.on_time_tick)
            for listener in listeners
            if _has_hook(listener, "on_time_tick")
        ]
        for listener in listeners:  # told once, in listener order
            if _has_hook(listener, "on_fenced"):
                self.fence.listen(listener.on_fenced)
        append: AppendFunc = _unpersisted
        plain: AppendFunc = _unpersisted
        for interceptor in reversed(self._interceptors):
            append = functools.partial(interceptor.do_append, append=append)
            if not getattr(interceptor, "passes_plain", False):
                plain = functools.partial(interceptor.do_append, append=plain)
        self.append: AppendFunc = append
        """Append through the chain (a plain attribute: no extra frame per append)."""
        self.append_plain: AppendFunc = plain
        """The same, without the interceptors that pass a plain message through unseen
        (``passes_plain``: no producer id, no transaction): for :meth:`WAL.append`."""
        last = self._interceptors[-1] if self._interceptors else None
        wrapped = [i for i in self._interceptors[:-1] if not getattr(i, "passes_plain", False)]
        self._back_to_back: (
            Callable[[Sequence[MutableMessage]], Awaitable[list[AppendResult | StreamwalError]]]
            | None
        ) = last.do_append_many if isinstance(last, BatchAppender) and not wrapped else None

    def find(self, kind: type[_I]) -> _I | None:
        """The chain's interceptor of type ``kind``, if it has one."""
        for interceptor in self._interceptors:
            if isinstance(interceptor, kind):
                return interceptor
        return None

    async def append_many(
        self, msgs: Sequence[MutableMessage]
    ) -> list[AppendResult | StreamwalError]:
        """Append a batch in order, one outcome per message: back to back when only the
        persisting interceptor takes part in plain appends and every message is plain
        (no producer id, no transaction), or numbered and new to the idempotence
        interceptor; else one after the other through the chain."""
        back_to_back = self._back_to_back
        if back_to_back is not None and all(m.txn_id is None for m in msgs):
            if all(m.producer_id is None for m in msgs):
                return await back_to_back(msgs)
            idempotence = self.find(IdempotenceInterceptor)
            if idempotence is not None:
                outcomes = await idempotence.append_new_batch(msgs, back_to_back)
                if outcomes is not None:
                    return outcomes
        return await self._append_one_by_one(msgs)

    async def _append_one_by_one(
        self, msgs: Sequence[MutableMessage]
    ) -> list[AppendResult | StreamwalError]:
        outcomes: list[AppendResult | StreamwalError] = []
        for msg in msgs:
            try:
                outcomes.append(await self.append(msg))
            except StreamwalError as exc:
                outcomes.append(exc)
        return outcomes

    async def start(self) -> None:
        for interceptor in self._interceptors:
            await interceptor.start()

    def publish(self, msg: ImmutableMessage) -> None:
        """Tell every log listener that ``msg`` is persisted, in listener order."""
        for listener, on_persisted in self._on_persisted:
            try:
                on_persisted(msg)
            except Exception:
                _log.exception("channel %s: %r failed on %s", self._channel, listener, msg)

    def publish_many(self, msgs: Sequence[ImmutableMessage]) -> None:
        """Tell every log listener that the messages of one pack are persisted, in
        listener order, each listener all of them at once (in log order)."""
        for listener, on_persisted_many in self._on_persisted_many:
            try:
                on_persisted_many(msgs)
            except Exception:
                _log.exception(
                    "channel %s: %r failed on a pack from %s", self._channel, listener, msgs[0]
                )

    def publish_time_tick(self, time_tick: int) -> None:
        """Tell every log listener of an in-memory time tick, in listener order."""
        for listener, on_time_tick in self._on_time_tick:
            try:
                on_time_tick(time_tick)
            except Exception:
                _log.exception(
                    "channel %s: %r failed on tick %d", self._channel, listener, time_tick
                )

    async def close(self) -> None:
        """Close the interceptors, last first (the persisting one drains appends first),
        then seal the write-ahead buffer: nothing more is published to it, and its
        readers move on to the backend once they drain it."""
        for interceptor in reversed(self._interceptors):
            try:
                await interceptor.close()
            except Exception:
                _log.exception("channel %s: closing %r failed", self._channel, interceptor)
        self._buffer.seal()


def _each(
    on_persisted: Callable[[ImmutableMessage], None],
) -> Callable[[Sequence[ImmutableMessage]], None]:
    """A listener without a hook for a pack: told of its messages one by one (one that
    fails on a message is logged, and told of the next)."""

    def each(msgs: Sequence[ImmutableMessage]) -> None:
        for msg in msgs:
            try:
                on_persisted(msg)
            except Exception:
                _log.exception("%r failed on %s", on_persisted, msg)

    return each


def _has_hook(listener: LogListener, hook: str) -> bool:
    """False for an interceptor that keeps :class:`InterceptorBase`'s do-nothing ``hook``."""
    return not (
        isinstance(listener, InterceptorBase)
        and getattr(type(listener), hook) is getattr(InterceptorBase, hook)
    )


async def _unpersisted(msg: MutableMessage) -> AppendResult:
    raise RuntimeError("no interceptor persisted the message; the time-tick one must be last")
