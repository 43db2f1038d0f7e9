"""The interceptor chain, and the one place its order is written.

Appends enter at the first interceptor and each wraps the ones after it; the last,
the time-tick interceptor, persists the message. Persisted messages, in-memory time
ticks and the fence are then published to every interceptor in the same order, in log
order: MVCC first, so a reader woken by the write-ahead buffer already finds MVCC up
to date. The chain owns the WAL's one record of the fence (:attr:`InterceptorChain.fence`,
a :class:`~streamwal.wal.fence.Fence`), which its interceptors reach as ``sink.fence``.
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
from streamwal.wal.interceptors.buffer_feed import WriteAheadBufferInterceptor
from streamwal.wal.interceptors.idempotence import IdempotenceInterceptor
from streamwal.wal.interceptors.mvcc_feed import MvccInterceptor
from streamwal.wal.interceptors.timetick import TimeTickInterceptor
from streamwal.wal.interceptors.txn import TxnInterceptor
from streamwal.wal.message import ImmutableMessage, MutableMessage

__all__ = ["INTERCEPTOR_ORDER", "InterceptorChain", "InterceptorFactory"]

_log = logging.getLogger(__name__)
_I = TypeVar("_I")

InterceptorFactory = Callable[[InterceptorParams, Sink], Interceptor]

INTERCEPTOR_ORDER: Final[tuple[InterceptorFactory, ...]] = (
    IdempotenceInterceptor,  # a duplicate is answered before anything else sees it
    TxnInterceptor,
    MvccInterceptor,
    WriteAheadBufferInterceptor,
    TimeTickInterceptor,  # persists: must stay last
)


class InterceptorChain:
    """The interceptors of one WAL, built from one :class:`InterceptorParams`."""

    def __init__(
        self, params: InterceptorParams, order: Sequence[InterceptorFactory] = INTERCEPTOR_ORDER
    ) -> None:
        self._channel = params.channel.name
        self.fence: Fence = Fence(self._channel)
        """Whether this owner was fenced: the one record, set once, asked by all."""
        self._interceptors: list[Interceptor] = [factory(params, self) for factory in order]
        for interceptor in self._interceptors:  # told once, in chain order
            self.fence.listen(interceptor.on_fenced)
        append: AppendFunc = _unpersisted
        plain: AppendFunc = _unpersisted
        for interceptor in reversed(self._interceptors):
            if not _passes_through(interceptor):  # skip pass-throughs
                append = functools.partial(interceptor.do_append, append=append)
                if not getattr(interceptor, "passes_plain", False):
                    plain = functools.partial(interceptor.do_append, append=plain)
        self.append: AppendFunc = append
        """Append through the chain (a plain attribute: no extra frame per append)."""
        self.append_plain: AppendFunc = plain
        """The same, without the interceptors that pass a plain message through unseen
        (``passes_plain``: no producer id, no transaction): for :meth:`WAL.append`."""
        last = self._interceptors[-1] if self._interceptors else None
        wrapped = [
            i
            for i in self._interceptors[:-1]
            if not _passes_through(i) and not getattr(i, "passes_plain", False)
        ]
        self._back_to_back: (
            Callable[[Sequence[MutableMessage]], Awaitable[list[AppendResult | StreamwalError]]]
            | None
        ) = last.do_append_many if isinstance(last, BatchAppender) and not wrapped else None
        # Only the interceptors that listen are called, once per persisted message.
        self._persisted_hooks = [
            (i, i.on_persisted)
            for i in self._interceptors
            if not isinstance(i, InterceptorBase)
            or type(i).on_persisted is not InterceptorBase.on_persisted
        ]

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
        for interceptor, on_persisted in self._persisted_hooks:
            try:
                on_persisted(msg)
            except Exception:
                _log.exception("channel %s: %r failed on %s", self._channel, interceptor, msg)

    def publish_time_tick(self, time_tick: int) -> None:
        for interceptor in self._interceptors:
            try:
                interceptor.on_time_tick(time_tick)
            except Exception:
                _log.exception(
                    "channel %s: %r failed on tick %d", self._channel, interceptor, time_tick
                )

    async def close(self) -> None:
        """Close the interceptors, last first (the persisting one drains appends first)."""
        for interceptor in reversed(self._interceptors):
            try:
                await interceptor.close()
            except Exception:
                _log.exception("channel %s: closing %r failed", self._channel, interceptor)


def _passes_through(interceptor: Interceptor) -> bool:
    return (
        isinstance(interceptor, InterceptorBase)
        and type(interceptor).do_append is InterceptorBase.do_append
    )


async def _unpersisted(msg: MutableMessage) -> AppendResult:
    raise RuntimeError("no interceptor persisted the message; the time-tick one must be last")
