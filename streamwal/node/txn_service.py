"""The transaction RPCs of the streaming node (BeginTxn, CommitTxn, RollbackTxn,
KeepAliveTxn), mixed into :class:`~streamwal.node.servicer.StreamingNodeServicer`.

Each is one call to the channel's WAL; errors map to status codes as every other RPC
(:func:`~streamwal.node.servicer.grpc_status_for`): a transaction that cannot go on is
``ABORTED``; a fence also drops the channel from this node.

A failed ``CommitTxn`` or ``RollbackTxn`` ends as a failed ``Produce`` does, with its
write outcome in the trailing metadata (:data:`~streamwal.node.outcome.OUTCOME_KEY`):
an ``ABORTED`` alone cannot tell a commit that wrote nothing from one that may be in
the log, and only the first may be given up on. A repeated commit or rollback of a
transaction this owner ended is answered with the first result, so both are
retriable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc

from streamwal.errors import ChannelFencedError
from streamwal.node.channels import ChannelManager
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.wal import WAL
from streamwal.wal.interceptors import AppendResult

__all__ = ["TxnRpcs", "produce_response"]

Abort = Callable[[grpc.aio.ServicerContext[Any, Any], BaseException], Awaitable[NoReturn]]


def produce_response(
    result: AppendResult, answer: pb.ProduceResponse | None = None
) -> pb.ProduceResponse:
    """The receipt of an append, filled into ``answer`` when given (a batch's frame adds
    its answers in place: copying each into it costs half as much again)."""
    if answer is None:
        answer = pb.ProduceResponse()
    message_id = result.message_id
    answer.message_id = message_id.to_bytes()
    answer.message_id_text = str(message_id)
    answer.time_tick = result.time_tick
    return answer


class TxnRpcs:
    """Needs ``_channels``, ``_abort_with`` and ``_abort_append`` from the servicer it is
    mixed into (they live there, which imports this module)."""

    _channels: ChannelManager
    _abort_with: Abort
    _abort_append: Abort

    def _tag_span(self) -> None: ...

    async def _on_wal(
        self,
        pchannel: str,
        context: grpc.aio.ServicerContext[Any, Any],
        call: Callable[[WAL], Awaitable[Any]],
        abort: Abort | None = None,
    ) -> Any:
        self._tag_span()
        try:
            wal = await self._channels.get(pchannel)
            try:
                return await call(wal)
            except ChannelFencedError:
                await self._channels.report_fenced(pchannel)
                raise
        except Exception as exc:
            await (abort or self._abort_with)(context, exc)

    async def BeginTxn(
        self, request: pb.BeginTxnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.BeginTxnResponse:
        keepalive = request.keepalive_s or None
        txn_id = await self._on_wal(
            request.pchannel, context, lambda wal: wal.begin_txn(request.vchannel, keepalive)
        )
        return pb.BeginTxnResponse(txn_id=txn_id)

    async def CommitTxn(
        self, request: pb.TxnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        return await self._end_txn(request, context, WAL.commit_txn)

    async def RollbackTxn(
        self, request: pb.TxnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        return await self._end_txn(request, context, WAL.rollback_txn)

    async def _end_txn(
        self,
        request: pb.TxnRequest,
        context: grpc.aio.ServicerContext[Any, Any],
        end: Callable[[WAL, int], Awaitable[AppendResult]],
    ) -> pb.ProduceResponse:
        result = await self._on_wal(
            request.pchannel, context, lambda wal: end(wal, request.txn_id), self._abort_append
        )
        return produce_response(result)

    async def KeepAliveTxn(
        self, request: pb.TxnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.KeepAliveTxnResponse:
        await self._on_wal(request.pchannel, context, lambda wal: wal.keepalive_txn(request.txn_id))
        return pb.KeepAliveTxnResponse()
