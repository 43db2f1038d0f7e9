"""The batched RPCs: many messages per request on produce, per frame on consume.

One message per awaited call leaves most of a broker's rate unused (a gRPC message,
a task and a WAL call per log entry); these carry a batch per frame and map it to
:meth:`~streamwal.wal.WAL.append_many` and to a read-ahead of the scanner. Errors map
to status codes as for the single-message RPCs (:func:`grpc_status_for`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final, NoReturn

import grpc

from streamwal.errors import (
    BatchAppendError,
    ChannelFencedError,
    ClosedError,
    InvalidInputError,
    StreamwalError,
)
from streamwal.node.frames import batch_of
from streamwal.node.pipeline import answer_in_order
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.read_ahead import ReadAhead
from streamwal.node.servicer import (
    StreamingNodeServicer,
    _append_error,
    abort_append,
    grpc_status_for,
    message_of,
)
from streamwal.node.txn_service import produce_response
from streamwal.wal.interceptors import AppendResult
from streamwal.wal.message import MutableMessage

__all__ = ["MAX_BATCH_MESSAGES", "NodeServicer"]

#: the most messages one ProduceBatchRequest may carry
MAX_BATCH_MESSAGES: Final = 10_000
# batches one produce stream holds at most (started, not yet answered)
_BATCH_WINDOW = 16
_FRAME_MESSAGES = (256, 4096)  # ConsumeBatch: default and cap
_FRAME_BYTES = (1 << 20, 4 << 20)


class NodeServicer(StreamingNodeServicer):
    """The node's service: the single-message RPCs and their batched forms."""

    # ---- produce --------------------------------------------------------------------
    def _messages(self, request: pb.ProduceBatchRequest) -> list[MutableMessage]:
        if len(request.messages) > MAX_BATCH_MESSAGES:
            raise InvalidInputError(
                f"a batch of {len(request.messages)} messages; at most {MAX_BATCH_MESSAGES}"
            )
        numbered = request.HasField("producer_id")
        if numbered != request.HasField("first_sequence"):
            raise InvalidInputError("a batch's producer_id and first_sequence go together")
        producer_id = request.producer_id if numbered else None
        first = request.first_sequence
        msgs = []
        for index, m in enumerate(request.messages):
            try:
                msgs.append(
                    message_of(
                        m,
                        producer_id=producer_id,
                        sequence=first + index if numbered else None,
                    )
                )
            except InvalidInputError as exc:
                raise InvalidInputError(f"message {index} of the batch: {exc}") from exc
        return msgs

    async def _append_batch(self, request: pb.ProduceBatchRequest) -> pb.ProduceBatchResponse:
        wal = await self._channels.get(request.pchannel)
        msgs = self._messages(request)
        try:
            results: list[AppendResult | StreamwalError] = list(await wal.append_many(msgs))
        except ChannelFencedError:
            await self._channels.report_fenced(request.pchannel)
            raise
        except BatchAppendError as exc:
            if any(isinstance(e, ChannelFencedError) for e in exc.failed.values()):
                await self._channels.report_fenced(request.pchannel)
            results = exc.results  # type: ignore[assignment]
        return _batch_response(results)

    async def ProduceBatch(
        self, request: pb.ProduceBatchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceBatchResponse:
        """A batch refused whole ends the call with its status and outcome (trailing
        metadata, as for ``Produce``); a partial failure answers each message."""
        self._tag_span()
        try:
            return await self._append_batch(request)
        except (StreamwalError, Exception) as exc:
            await abort_append(context, exc)

    async def ProduceBatchStream(
        self,
        requests: AsyncIterator[pb.ProduceBatchRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.ProduceBatchResponse]:
        """Batches pipelined in arrival order, answered in that order (see
        :mod:`streamwal.node.pipeline`); a batch refused whole answers each of its
        messages with that error."""
        self._tag_span()
        async for answer in answer_in_order(
            requests,
            self._append_batch,
            _refused,
            window=_BATCH_WINDOW,
            answer_timeout=self._answer_timeout,
        ):
            yield answer

    # ---- consume --------------------------------------------------------------------
    async def ConsumeBatch(
        self, request: pb.ConsumeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ConsumedBatch]:
        """``Consume`` with what is ready per frame: a read-ahead task keeps the scanner
        going while a frame is sent, and a frame never waits to fill up."""
        self._tag_span()
        max_messages = _bound(request.max_batch_messages, _FRAME_MESSAGES)
        max_bytes = _bound(request.max_batch_bytes, _FRAME_BYTES)
        try:
            wal = await self._channels.get(request.pchannel)
            scanner = await wal.read(self._policy(request), request.vchannel or None)
        except (StreamwalError, Exception) as exc:
            await _abort(context, exc)
        ahead = ReadAhead(scanner, 2 * max_messages)
        ahead.start()
        try:
            while True:
                try:
                    msgs = await ahead.take(max_messages, max_bytes)
                except ClosedError:
                    return  # the channel or the node closed: end the stream cleanly
                except (StreamwalError, Exception) as exc:
                    await _abort(context, exc)
                yield batch_of(msgs)
        finally:
            await ahead.close()


def _batch_response(results: list[AppendResult | StreamwalError]) -> pb.ProduceBatchResponse:
    """One answer per message, each filled where the frame adds it."""
    frame = pb.ProduceBatchResponse()
    add = frame.results.add
    for r in results:
        if isinstance(r, AppendResult):
            produce_response(r, add())
        else:
            add().CopyFrom(_append_error(r))
    return frame


def _bound(asked: int, default_and_cap: tuple[int, int]) -> int:
    default, cap = default_and_cap
    return min(asked, cap) if asked > 0 else default


def _refused(request: pb.ProduceBatchRequest, exc: BaseException) -> pb.ProduceBatchResponse:
    answer = _append_error(exc)
    return pb.ProduceBatchResponse(results=[answer] * max(1, len(request.messages)))


async def _abort(context: grpc.aio.ServicerContext[Any, Any], exc: BaseException) -> NoReturn:
    code, details = grpc_status_for(exc)
    await context.abort(code, details)
    raise AssertionError("context.abort returned")  # it always raises
