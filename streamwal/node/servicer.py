"""The ``StreamingNode`` gRPC service: requests in, WAL calls, typed status codes out.

Errors map to codes a client can act on, each error class naming its own
(:attr:`~streamwal.errors.StreamwalError.grpc_status`): channel not here → NOT_FOUND;
fenced by another node → FAILED_PRECONDITION (and the channel is dropped from this
node); bad input → INVALID_ARGUMENT; broker or TSO unavailable, or the node shutting
down → UNAVAILABLE; an append that may be in the log → UNKNOWN. A failed append also
carries its write outcome (not written, or unknown: ``streaming.proto``), in band on
a stream and as trailing metadata of ``Produce``. Anything unexpected is logged and
returned as INTERNAL, and the node keeps serving. Request bytes that are not the
expected protobuf message get INVALID_ARGUMENT (:mod:`streamwal.node.server_tracing`;
gRPC alone answers UNKNOWN).

Every handler tags its server span with the node id (``streamwal.node.id``): the
span's resource cannot say which node served when one process hosts several.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import grpc
from opentelemetry import trace

from streamwal.errors import (
    ChannelFencedError,
    ClosedError,
    InvalidInputError,
    StreamwalError,
    UnavailableError,
    WriteOutcome,
    outcome_of,
    short_repr,
)
from streamwal.node.channels import ChannelManager
from streamwal.node.frames import consumed_of
from streamwal.node.outcome import OUTCOME_KEY
from streamwal.node.pipeline import answer_in_order
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.telemetry import NODE_ID_ATTRIBUTE
from streamwal.node.txn_service import TxnRpcs, produce_response
from streamwal.wal.backend import BackendOpener, DeliveryPolicy
from streamwal.wal.message import MessageType, MutableMessage
from streamwal.wal.message.message import built_mutable
from streamwal.wal.message_id import MessageId
from streamwal.wal.retention_contract import time_tick_lag_ms

__all__ = [
    "StreamingNodeServicer",
    "abort_append",
    "consumed_of",
    "grpc_status_for",
    "message_of",
    "parse_message_type",
]

_log = logging.getLogger(__name__)

# the names streaming.proto documents, and only those: a client that sends anything
# else learns it now, not from a reader that finds another type than it meant
_TYPES = {t.name.lower(): t for t in MessageType if not t.is_system and not t.is_txn_marker}


def parse_message_type(name: str) -> MessageType:
    found = _TYPES.get(name)
    if found is None:
        known = ", ".join(sorted(_TYPES))
        raise InvalidInputError(f"unknown message type {short_repr(name)} (one of: {known})")
    return found


_OUTCOMES = {
    WriteOutcome.NOT_WRITTEN: pb.NOT_WRITTEN,
    WriteOutcome.UNKNOWN: pb.OUTCOME_UNKNOWN,
}
# status details travel as metadata, which gRPC limits (8 KiB by default)
_MAX_DETAILS = 1000


# a message's own empty default, which it takes without checking; copying an empty
# protobuf map instead costs an ABC walk per message
_NO_PROPERTIES = MutableMessage(MessageType.INSERT).properties


def message_of(
    m: pb.Message,
    *,
    producer_id: int | None = None,
    sequence: int | None = None,
    txn_id: int | None = None,
) -> MutableMessage:
    """The message a client sent; :class:`InvalidInputError` for an unknown type (or
    for a producer id without a sequence, or the other way round)."""
    return built_mutable(
        parse_message_type(m.type),
        bytes(m.payload),
        m.vchannel,
        dict(m.properties) if m.properties else _NO_PROPERTIES,
        producer_id,
        sequence,
        txn_id,
    )


def grpc_status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and details a client gets for ``exc``: the ones its class
    names (:attr:`~streamwal.errors.StreamwalError.grpc_status`,
    :meth:`~streamwal.errors.StreamwalError.status_details`), details cut to
    ``_MAX_DETAILS``. Anything but a streamwal error is a bug: logged here, INTERNAL."""
    if isinstance(exc, StreamwalError):
        code, details = grpc.StatusCode[exc.grpc_status], exc.status_details()
    else:
        _log.error("unexpected error in a request", exc_info=exc)
        code, details = grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}"
    if len(details) > _MAX_DETAILS:
        details = details[:_MAX_DETAILS] + "..."
    return code, details


async def _abort(context: grpc.aio.ServicerContext[Any, Any], exc: BaseException) -> NoReturn:
    code, details = grpc_status_for(exc)
    await context.abort(code, details)
    raise AssertionError("context.abort returned")  # it always raises


async def abort_append(context: grpc.aio.ServicerContext[Any, Any], exc: BaseException) -> NoReturn:
    """End a failed unary append with its status and its write outcome (trailing
    metadata ``streamwal-write-outcome``)."""
    code, details = grpc_status_for(exc)
    outcome = outcome_of(exc).value
    await context.abort(code, details, trailing_metadata=((OUTCOME_KEY, outcome),))
    raise AssertionError("context.abort returned")  # it always raises


def _append_error(exc: BaseException) -> pb.ProduceResponse:
    code, details = grpc_status_for(exc)
    return pb.ProduceResponse(
        error=pb.AppendError(
            code=code.value[0], message=details, outcome=_OUTCOMES[outcome_of(exc)]
        )
    )


# appends one produce stream holds at most (started, not yet answered)
_STREAM_WINDOW = 256
# the longest a streamed append waits for the WAL; longer than any bounded WAL path
# (send timeout, append retries), so it only ends a wait that would not end
_ANSWER_TIMEOUT_S = 120.0


class StreamingNodeServicer(TxnRpcs, pb_grpc.StreamingNodeServicer):  # type: ignore[misc]
    def __init__(
        self,
        channels: ChannelManager,
        opener: BackendOpener,
        *,
        answer_timeout: float = _ANSWER_TIMEOUT_S,
    ) -> None:
        self._channels = channels
        self._opener = opener
        self._answer_timeout = answer_timeout
        self._abort_with = _abort
        self._abort_append = abort_append

    def _tag_span(self) -> None:
        """Name this node on the current (server) span; see the module docstring."""
        trace.get_current_span().set_attribute(NODE_ID_ATTRIBUTE, self._channels.node_id)

    # ---- produce --------------------------------------------------------------------
    def _message(self, request: pb.ProduceRequest) -> MutableMessage:
        if not request.HasField("message"):
            raise InvalidInputError("a ProduceRequest needs a message")
        return message_of(
            request.message,
            producer_id=request.producer_id if request.HasField("producer_id") else None,
            sequence=request.sequence if request.HasField("sequence") else None,
            txn_id=request.txn_id if request.HasField("txn_id") else None,
        )

    async def _append(self, request: pb.ProduceRequest) -> pb.ProduceResponse:
        wal = await self._channels.get(request.pchannel)
        try:
            result = await wal.append(self._message(request))
        except ChannelFencedError:
            await self._channels.report_fenced(request.pchannel)
            raise
        return produce_response(result)

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        self._tag_span()
        try:
            return await self._append(request)
        except (StreamwalError, Exception) as exc:
            await abort_append(context, exc)

    async def ProduceStream(
        self,
        requests: AsyncIterator[pb.ProduceRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.ProduceResponse]:
        """Appends are pipelined: each is started in arrival order, which is its place
        in the log (the WAL's writer lets waiting appends through first come, first
        served), and answered in that order. A failed append is answered in band
        (``ProduceResponse.error``) and the stream goes on: ending the call while the
        client still writes can surface in grpcio's asyncio client as INTERNAL instead
        of the real code (grpc/grpc#36066).

        Every frame read is answered before the call ends, and the call ends once the
        input does: at most ``_STREAM_WINDOW`` appends are held per stream (no frame is
        read while they are), and an append the WAL has not answered within
        ``answer_timeout`` is answered UNKNOWN (it may still land). A malformed frame
        ends the input (:func:`_checked_stream`): the frames before it are answered,
        then the call ends with INVALID_ARGUMENT.
        """
        self._tag_span()
        async for answer in answer_in_order(
            requests,
            self._append,
            lambda _, exc: _append_error(exc),
            window=_STREAM_WINDOW,
            answer_timeout=self._answer_timeout,
        ):
            yield answer

    # ---- consume --------------------------------------------------------------------
    def _policy(self, request: pb.ConsumeRequest) -> DeliveryPolicy:
        which = request.policy.WhichOneof("policy") if request.HasField("policy") else "all"
        if which in (None, "all"):
            return DeliveryPolicy.all()
        if which == "latest":
            return DeliveryPolicy.latest()
        if which == "start_from_time_tick":
            return DeliveryPolicy.start_from_time_tick(request.policy.start_from_time_tick)
        if which == "after_checkpoint":
            return DeliveryPolicy.after_checkpoint(request.policy.after_checkpoint)
        raw = getattr(request.policy, which)
        try:
            message_id = self._opener.message_id_from_bytes(bytes(raw))
        except StreamwalError as exc:
            raise InvalidInputError(f"invalid message id in {which}: {exc}") from exc
        if which == "start_from":
            return DeliveryPolicy.start_from(message_id)
        return DeliveryPolicy.start_after(message_id)

    async def Consume(
        self, request: pb.ConsumeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ConsumedMessage]:
        self._tag_span()
        try:
            wal = await self._channels.get(request.pchannel)
            scanner = await wal.read(self._policy(request), request.vchannel or None)
        except (StreamwalError, Exception) as exc:
            await _abort(context, exc)
        try:
            async for msg in scanner:
                yield consumed_of(msg)
        except ClosedError:
            return  # the channel or the node closed: end the stream cleanly
        except (StreamwalError, Exception) as exc:
            await _abort(context, exc)
        finally:
            await scanner.close()

    # ---- channels ----------------------------------------------------------------------
    async def AssignChannel(
        self, request: pb.AssignChannelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AssignChannelResponse:
        self._tag_span()
        span_context = trace.get_current_span().get_span_context()
        try:
            opened = await self._channels.assign(request.pchannel)
        except UnavailableError as exc:
            # the open gave up (``wal.first_time_tick_backoff.max_attempts``): say which channel
            # and that trying later may work, not only what the broker last said
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"opening channel {request.pchannel!r} gave up, retry later: {exc}",
            )
        except (StreamwalError, Exception) as exc:
            await _abort(context, exc)
        wal = opened.wal
        return pb.AssignChannelResponse(
            pchannel=request.pchannel,
            first_time_tick=wal.first_time_tick,
            first_message_id=wal.first_message_id.to_bytes(),
            first_message_id_text=str(wal.first_message_id),
            attempts=wal.open_attempts,
            trace_id=(format(span_context.trace_id, "032x") if span_context.is_valid else ""),
        )

    async def RemoveChannel(
        self, request: pb.RemoveChannelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RemoveChannelResponse:
        self._tag_span()
        try:
            await self._channels.remove(request.pchannel)
        except (StreamwalError, Exception) as exc:
            await _abort(context, exc)
        return pb.RemoveChannelResponse()

    async def ListChannels(
        self, request: pb.ListChannelsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListChannelsResponse:
        self._tag_span()
        for wal in self._channels.channels():
            if wal.is_fenced:
                await self._channels.report_fenced(wal.channel)
        return pb.ListChannelsResponse(
            channels=[
                pb.ChannelInfo(
                    pchannel=w.channel, first_time_tick=w.first_time_tick, fenced=w.is_fenced
                )
                for w in self._channels.channels()
            ],
            fenced=self._channels.take_fenced(),
        )

    async def GetMVCC(
        self, request: pb.GetMVCCRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetMVCCResponse:
        self._tag_span()
        try:
            wal = await self._channels.get(request.pchannel)
            state = wal.mvcc.get(request.vchannel) if request.vchannel else wal.mvcc.pchannel
        except (StreamwalError, Exception) as exc:
            await _abort(context, exc)
        return pb.GetMVCCResponse(time_tick=state.time_tick, confirmed=state.confirmed)

    # ---- checkpoints and truncation ---------------------------------------------------
    def _message_id(self, raw: bytes) -> MessageId:
        try:
            return self._opener.message_id_from_bytes(bytes(raw))
        except StreamwalError as exc:
            raise InvalidInputError(f"invalid message id: {exc}") from exc

    async def Checkpoint(
        self, request: pb.CheckpointRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CheckpointResponse:
        self._tag_span()
        try:
            wal = await self._channels.get(request.pchannel)
            message_id = self._message_id(request.message_id)
            await wal.checkpoint(request.consumer, message_id, request.time_tick)
        except (StreamwalError, Exception) as exc:
            await _abort(context, exc)
        return pb.CheckpointResponse()

    async def RemoveCheckpoint(
        self, request: pb.RemoveCheckpointRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CheckpointResponse:
        self._tag_span()
        try:
            wal = await self._channels.get(request.pchannel)
            await wal.remove_checkpoint(request.consumer)
        except (StreamwalError, Exception) as exc:
            await _abort(context, exc)
        return pb.CheckpointResponse()

    async def GetRetention(
        self, request: pb.GetRetentionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetRetentionResponse:
        self._tag_span()
        try:
            wal = await self._channels.get(request.pchannel)
            state = await wal.retention()
        except (StreamwalError, Exception) as exc:
            await _abort(context, exc)
        latest = wal.mvcc.pchannel.time_tick
        point = state.truncated_before
        return pb.GetRetentionResponse(
            truncated_before=point.to_bytes() if point is not None else b"",
            truncated_before_text=str(point) if point is not None else "",
            storage_bytes=-1 if state.storage_bytes is None else state.storage_bytes,
            consumers=[
                pb.ConsumerRetention(
                    consumer=c.checkpoint.consumer,
                    message_id=c.checkpoint.message_id.to_bytes(),
                    message_id_text=str(c.checkpoint.message_id),
                    time_tick=c.checkpoint.time_tick,
                    backlog_messages=-1 if c.backlog_messages is None else c.backlog_messages,
                    backlog_bytes=-1 if c.backlog_bytes is None else c.backlog_bytes,
                    time_tick_lag_ms=time_tick_lag_ms(latest, c.checkpoint.time_tick),
                )
                for c in state.consumers
            ],
            latest_time_tick=latest,
        )

    async def Truncate(
        self, request: pb.TruncateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.TruncateResponse:
        self._tag_span()
        try:
            wal = await self._channels.get(request.pchannel)
            window = request.retention_s if request.HasField("retention_s") else None
            moved = await wal.truncate(window)
            point = moved if moved is not None else (await wal.retention()).truncated_before
        except (StreamwalError, Exception) as exc:
            await _abort(context, exc)
        return pb.TruncateResponse(
            moved=moved is not None,
            truncated_before=point.to_bytes() if point is not None else b"",
            truncated_before_text=str(point) if point is not None else "",
        )
