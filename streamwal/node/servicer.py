"""The ``StreamingNode`` gRPC service: requests in, WAL calls, typed status codes out.

:class:`NodeServicer` is the whole service, one class, so the module stays whole past
500 lines: every RPC parses its request, runs its WAL call through one helper
(:meth:`NodeServicer._call`), which maps an error to its status, and builds its answer.
Parsing and answers with no call in them live in :mod:`streamwal.node.responses`.

Errors map to codes a client can act on, each error class naming its own
(:attr:`~streamwal.errors.StreamwalError.grpc_status`): channel not here → NOT_FOUND;
fenced by another node → FAILED_PRECONDITION, on every later call too, until
``RemoveChannel`` drops the channel from this node; an open under a stale term →
FAILED_PRECONDITION (details "stale term: ..."); bad input → INVALID_ARGUMENT; broker or
TSO unavailable, or the node shutting down → UNAVAILABLE; an append that may be in the
log → UNKNOWN; a transaction that cannot go on → ABORTED. A failed append also carries
its write outcome (not written, or unknown: ``streaming.proto``), in band on a stream
and as trailing metadata (:data:`~streamwal.node.outcome.OUTCOME_KEY`) of ``Produce``,
``ProduceBatch``, ``CommitTxn`` and ``RollbackTxn``: an ``ABORTED`` commit alone cannot
tell one that wrote nothing from one that may be in the log, and only the first may be
given up on. A repeated commit or rollback of a transaction this owner ended is answered
with the first result, so both are retriable. Anything unexpected is logged and returned
as INTERNAL, and the node keeps serving. Request bytes that are not the expected
protobuf message get INVALID_ARGUMENT (:mod:`streamwal.node.server_tracing`; gRPC alone
answers UNKNOWN).

The batched RPCs carry many messages per request on produce and per frame on consume:
one message per awaited call leaves most of a broker's rate unused (a gRPC message, a
task and a WAL call per log entry); a batch maps to :meth:`~streamwal.wal.WAL.append_many`
and a consumed frame to a read-ahead of the scanner (:mod:`streamwal.node.read_ahead`).

Every handler tags its server span with the node id (``streamwal.node.id``): the
span's resource cannot say which node served when one process hosts several.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NoReturn, Protocol, TypeAlias, TypeVar

import grpc
from opentelemetry import trace

from streamwal.errors import (
    BatchAppendError,
    ChannelFencedError,
    ChannelInUseError,
    ClosedError,
    InvalidInputError,
    StreamwalError,
    UnavailableError,
    WriteOutcome,
    outcome_of,
)
from streamwal.node.channels import ChannelManager
from streamwal.node.frames import batch_of, consumed_of
from streamwal.node.outcome import OUTCOME_KEY
from streamwal.node.pipeline import answer_in_order
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.read_ahead import ReadAhead
from streamwal.node.responses import (
    compact_batch_response,
    delivery_policy,
    frame_bounds,
    independent_messages,
    message_id_of,
    message_of,
    messages_of,
    produce_response,
    retention_response,
    truncate_response,
)
from streamwal.node.telemetry import NODE_ID_ATTRIBUTE
from streamwal.wal import WAL
from streamwal.wal.backend import BackendOpener, validate_channel_name
from streamwal.wal.deletion import ChannelRecords, delete_channel
from streamwal.wal.interceptors import AppendResult
from streamwal.wal.message import MutableMessage
from streamwal.wal.message_id import MessageId
from streamwal.wal.mvcc import VChannelMVCC
from streamwal.wal.retention_contract import RetentionState
from streamwal.wal.scanner import Scanner

__all__ = ["NodeServicer", "grpc_status_for"]

_log = logging.getLogger(__name__)

_Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
_T = TypeVar("_T")


class _ChannelRequest(Protocol):
    @property
    def pchannel(self) -> str: ...


_Req = TypeVar("_Req", bound=_ChannelRequest)

# appends one produce stream holds at most (started, not yet answered)
_STREAM_WINDOW = 256
# batches one produce stream holds at most (started, not yet answered)
_BATCH_WINDOW = 16
# the longest a streamed append waits for the WAL; longer than any bounded WAL path
# (send timeout, append retries), so it only ends a wait that would not end
_ANSWER_TIMEOUT_S = 120.0

# ---- errors to statuses -----------------------------------------------------------------

_OUTCOMES = {
    WriteOutcome.NOT_WRITTEN: pb.NOT_WRITTEN,
    WriteOutcome.UNKNOWN: pb.OUTCOME_UNKNOWN,
}
# status details travel as metadata, which gRPC limits (8 KiB by default)
_MAX_DETAILS = 1000


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


async def _abort(context: _Context, exc: BaseException, *, outcome: bool = False) -> NoReturn:
    """End the call with ``exc``'s status; ``outcome``: a failed append, whose write
    outcome goes with it (trailing metadata ``streamwal-write-outcome``)."""
    code, details = grpc_status_for(exc)
    if outcome:
        written = outcome_of(exc).value
        await context.abort(code, details, trailing_metadata=((OUTCOME_KEY, written),))
    else:
        await context.abort(code, details)
    raise AssertionError("context.abort returned")  # it always raises


def _append_error(exc: BaseException) -> pb.ProduceResponse:
    """A failed append answered in band (a stream's frame, a batch's message)."""
    code, details = grpc_status_for(exc)
    return pb.ProduceResponse(
        error=pb.AppendError(
            code=code.value[0], message=details, outcome=_OUTCOMES[outcome_of(exc)]
        )
    )


def _batch_response(
    results: list[AppendResult | StreamwalError], compact: bool = False
) -> pb.ProduceBatchResponse:
    """One answer per message, each filled where the frame adds it; in runs instead
    (``compact``, asked by the request) when every message landed."""
    if compact:
        landed = [r for r in results if type(r) is AppendResult]
        if len(landed) == len(results):
            return compact_batch_response(landed)
    frame = pb.ProduceBatchResponse()
    add = frame.results.add
    for r in results:
        if isinstance(r, AppendResult):
            produce_response(r, add())
        else:
            add().CopyFrom(_append_error(r))
    return frame


def _refused(request: pb.ProduceBatchRequest, exc: BaseException) -> pb.ProduceBatchResponse:
    """A streamed batch refused whole: each of its messages answered with ``exc``."""
    answer = _append_error(exc)
    return pb.ProduceBatchResponse(results=[answer] * max(1, len(request.messages)))


class NodeServicer(pb_grpc.StreamingNodeServicer):  # type: ignore[misc]
    """The node's service: the single-message RPCs, their batched forms, channels,
    checkpoints and transactions."""

    def __init__(
        self,
        channels: ChannelManager,
        opener: BackendOpener,
        *,
        answer_timeout: float = _ANSWER_TIMEOUT_S,
        records: Sequence[ChannelRecords] = (),
    ) -> None:
        self._channels = channels
        self._opener = opener
        self._answer_timeout = answer_timeout
        #: who else keeps keys about a channel (its cluster), for ``DeleteChannel``; the
        #: layer that builds the node adds to it (the sequence is read at each call)
        self._records = records

    def _tag_span(self) -> None:
        """Name this node on the current (server) span; see the module docstring."""
        trace.get_current_span().set_attribute(NODE_ID_ATTRIBUTE, self._channels.node_id)

    async def _call(
        self,
        request: _Req,
        context: _Context | None,
        call: Callable[[WAL, _Req], Awaitable[_T]],
        *,
        writes: bool = False,
        outcome: bool = False,
    ) -> _T:
        """``call(wal, request)`` on the WAL of ``request.pchannel``, once the channel is
        found (so NOT_FOUND comes before bad input); its answer, or the call ended with
        the status its error names (:func:`grpc_status_for`).

        ``writes``: a fence that refuses ``call`` also closes the channel's WAL here,
        keeping it as fenced (a read leaves that to ``ListChannels``). ``outcome``: the
        status carries the write outcome (an append). Without a ``context`` (a produce stream, which
        answers in band) the error is raised.
        """
        try:
            wal = await self._channels.get(request.pchannel)
            try:
                return await call(wal, request)
            except ChannelFencedError:
                if writes:
                    await self._channels.report_fenced(request.pchannel)
                raise
        except Exception as exc:
            if context is None:
                raise
            await _abort(context, exc, outcome=outcome)

    # ---- produce --------------------------------------------------------------------
    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        return await self._written(request, context, self._append)

    async def ProduceBatch(
        self, request: pb.ProduceBatchRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceBatchResponse:
        """A batch refused whole ends the call with its status and outcome (trailing
        metadata, as for ``Produce``); a partial failure answers each message."""
        return await self._written(request, context, self._append_batch)

    async def ProduceStream(
        self,
        requests: AsyncIterator[pb.ProduceRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.ProduceResponse]:
        """Appends are pipelined: each is started in arrival order, which is its place
        in the log (the WAL's writer lets waiting appends through first come, first
        served), and answered in that order (:mod:`streamwal.node.pipeline`). A failed
        append is answered in band (``ProduceResponse.error``) and the stream goes on:
        ending the call while the client still writes can surface in grpcio's asyncio
        client as INTERNAL instead of the real code (grpc/grpc#36066).

        Every frame read is answered before the call ends, and the call ends once the
        input does: at most ``_STREAM_WINDOW`` appends are held per stream (no frame is
        read while they are), and an append the WAL has not answered within
        ``answer_timeout`` is answered UNKNOWN (it may still land). A malformed frame
        ends the input (the server interceptor's ``_parsed``,
        :mod:`streamwal.node.server_tracing`): the frames before it are answered, then
        the call ends with INVALID_ARGUMENT.
        """
        async for answer in self._pipelined(
            requests, self._append, lambda _, exc: _append_error(exc), _STREAM_WINDOW
        ):
            yield answer

    async def ProduceBatchStream(
        self,
        requests: AsyncIterator[pb.ProduceBatchRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.ProduceBatchResponse]:
        """Batches pipelined in arrival order, answered in that order (as
        ``ProduceStream``, at most ``_BATCH_WINDOW`` held); a batch refused whole answers
        each of its messages with that error."""
        async for answer in self._pipelined(requests, self._append_batch, _refused, _BATCH_WINDOW):
            yield answer

    async def _written(
        self, request: _Req, context: _Context, append: Callable[[WAL, _Req], Awaitable[_T]]
    ) -> _T:
        """The one path of a unary append (a message, a batch, a transaction's end): a
        fence refusing it closes the channel's WAL, and its status carries the write
        outcome, without which a client cannot tell what it may give up on."""
        self._tag_span()
        return await self._call(request, context, append, writes=True, outcome=True)

    def _pipelined(
        self,
        requests: AsyncIterator[_Req],
        append: Callable[[WAL, _Req], Awaitable[_T]],
        refused: Callable[[_Req, BaseException], _T],
        window: int,
    ) -> AsyncIterator[_T]:
        """The one path of both produce streams (``ProduceStream``): appends started in
        arrival order and answered in band, ``refused`` answering a failed one."""
        self._tag_span()
        return answer_in_order(
            requests,
            functools.partial(self._call, context=None, call=append, writes=True),
            refused,
            window=window,
            answer_timeout=self._answer_timeout,
        )

    async def _append(self, wal: WAL, request: pb.ProduceRequest) -> pb.ProduceResponse:
        if not request.HasField("message"):
            raise InvalidInputError("a ProduceRequest needs a message")
        message = message_of(
            request.message,
            producer_id=request.producer_id if request.HasField("producer_id") else None,
            sequence=request.sequence if request.HasField("sequence") else None,
            txn_id=request.txn_id if request.HasField("txn_id") else None,
        )
        return produce_response(await wal.append(message))

    async def _append_batch(
        self, wal: WAL, request: pb.ProduceBatchRequest
    ) -> pb.ProduceBatchResponse:
        if request.independent:
            return await self._append_separately(wal, request)
        msgs = messages_of(request)
        results = await self._append_many(wal, request.pchannel, msgs)
        return _batch_response(results, request.compact)

    async def _append_many(
        self, wal: WAL, pchannel: str, msgs: list[MutableMessage]
    ) -> list[AppendResult | StreamwalError]:
        try:
            return list(await wal.append_many(msgs))
        except BatchAppendError as exc:  # a fence refusing part of it drops the channel too
            if any(isinstance(e, ChannelFencedError) for e in exc.failed.values()):
                await self._channels.report_fenced(pchannel)
            return exc.results  # type: ignore[return-value]

    async def _append_separately(
        self, wal: WAL, request: pb.ProduceBatchRequest
    ) -> pb.ProduceBatchResponse:
        """A frame of separate appends (``independent``): an invalid message is answered
        with its own error, as a ``ProduceStream`` frame would be, and the valid ones go
        to the WAL as one batch. Every check is made before the batch is handed over, so
        the frame keeps its place in the log among the stream's other frames."""
        results: list[AppendResult | StreamwalError | None] = []
        valid: list[MutableMessage] = []
        for msg in independent_messages(request):
            if isinstance(msg, InvalidInputError):
                results.append(msg)
                continue
            try:
                wal.check_message(msg)
            except InvalidInputError as exc:
                results.append(exc)
                continue
            results.append(None)
            valid.append(msg)
        landed = iter(await self._append_many(wal, request.pchannel, valid) if valid else ())
        answers = [r if r is not None else next(landed) for r in results]
        return _batch_response(answers, request.compact)

    # ---- consume --------------------------------------------------------------------
    async def Consume(
        self, request: pb.ConsumeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ConsumedMessage]:
        self._tag_span()
        async with self._scanner(request, context) as scanner:
            try:
                async for msg in scanner:
                    yield consumed_of(msg)
            except ClosedError:
                return  # the channel or the node closed: end the stream cleanly
            except Exception as exc:
                await _abort(context, exc)

    async def ConsumeBatch(
        self, request: pb.ConsumeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ConsumedBatch]:
        """``Consume`` with what is ready per frame: a read-ahead task keeps the scanner
        going while a frame is sent, and a frame never waits to fill up."""
        self._tag_span()
        max_messages, max_bytes = frame_bounds(request)
        async with self._scanner(request, context) as scanner:
            ahead = ReadAhead(scanner, 2 * max_messages)
            ahead.start()
            try:
                while True:
                    try:
                        msgs = await ahead.take(max_messages, max_bytes)
                    except ClosedError:
                        return  # the channel or the node closed: end the stream cleanly
                    except Exception as exc:
                        await _abort(context, exc)
                    yield batch_of(msgs)
            finally:
                await ahead.close()

    @contextlib.asynccontextmanager
    async def _scanner(
        self, request: pb.ConsumeRequest, context: _Context
    ) -> AsyncIterator[Scanner]:
        """The read's started scanner for the block, closed after it; a read that cannot
        start ends the call with its status. ``read_only``: on the channel's read-only
        handle (:mod:`streamwal.node.read_only`), whoever owns it; else on the WAL this
        node owns."""
        if not request.read_only:
            scanner = await self._call(request, context, self._read)
            try:
                yield scanner
            finally:
                await scanner.close()
            return
        async with contextlib.AsyncExitStack() as stack:
            try:
                validate_channel_name(request.pchannel)
                scanner = await stack.enter_async_context(
                    self._channels.read_only.read(
                        request.pchannel,
                        delivery_policy(request, self._opener),
                        request.vchannel or None,
                    )
                )
            except Exception as exc:
                await _abort(context, exc)
            yield scanner

    async def _read(self, wal: WAL, request: pb.ConsumeRequest) -> Scanner:
        return await wal.read(
            delivery_policy(request, self._opener),
            request.vchannel or None,
            appended_only=request.appended_only,
        )

    # ---- channels ----------------------------------------------------------------------
    async def AssignChannel(
        self, request: pb.AssignChannelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AssignChannelResponse:
        """Opens the channel (no WAL yet to call): errors map as in :meth:`_call`, but
        an open that gave up says so. Refused where another layer places channels
        (:meth:`ChannelManager.place_by`)."""
        self._tag_span()
        span_context = trace.get_current_span().get_span_context()
        try:
            self._channels.check_direct_placement("AssignChannel")
            term = request.term if request.HasField("term") else None
            opened = await self._channels.assign(request.pchannel, term)
        except UnavailableError as exc:
            # the open gave up (``wal.first_time_tick_backoff.max_attempts``): say which channel
            # and that trying later may work, not only what the broker last said
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"opening channel {request.pchannel!r} gave up, retry later: {exc}",
            )
        except Exception as exc:
            await _abort(context, exc)
        wal = opened.wal
        return pb.AssignChannelResponse(
            pchannel=request.pchannel,
            first_time_tick=wal.first_time_tick,
            first_message_id=wal.first_message_id.to_bytes(),
            first_message_id_text=str(wal.first_message_id),
            attempts=wal.open_attempts,
            trace_id=(format(span_context.trace_id, "032x") if span_context.is_valid else ""),
            term=wal.term,
        )

    async def RemoveChannel(
        self, request: pb.RemoveChannelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RemoveChannelResponse:
        """Closes the channel's WAL, if it is here, or forgets a channel fenced here
        (no WAL call)."""
        self._tag_span()
        try:
            self._channels.check_direct_placement("RemoveChannel")
            await self._channels.remove(request.pchannel)
        except Exception as exc:
            await _abort(context, exc)
        return pb.RemoveChannelResponse()

    async def DeleteChannel(
        self, request: pb.DeleteChannelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DeleteChannelResponse:
        """Deletes the channel's log, subscriptions and keys (:mod:`streamwal.wal.deletion`):
        FAILED_PRECONDITION while this node or any other serves it, NOT_FOUND when
        nothing of it is left (no WAL call: the channel must not be open anywhere)."""
        self._tag_span()
        try:
            validate_channel_name(request.pchannel)
            if any(w.channel == request.pchannel for w in self._channels.channels()):
                raise ChannelInUseError(
                    request.pchannel,
                    f"node {self._channels.node_id} serves it: remove it from the node first",
                )
            done = await delete_channel(self._opener, request.pchannel, self._records)
        except Exception as exc:
            await _abort(context, exc)
        return pb.DeleteChannelResponse(
            subscriptions_deleted=done.subscriptions_deleted, keys_deleted=done.keys_deleted
        )

    async def ListChannels(
        self, request: pb.ListChannelsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListChannelsResponse:
        """The channels owned here, then those fenced here (``fenced``, until removed)."""
        self._tag_span()
        for wal in self._channels.channels():
            if wal.is_fenced:
                await self._channels.report_fenced(wal.channel)
        owned = [
            pb.ChannelInfo(
                pchannel=w.channel,
                first_time_tick=w.first_time_tick,
                fenced=w.is_fenced,
                term=w.term,
            )
            for w in self._channels.channels()
        ]
        fenced = [
            pb.ChannelInfo(
                pchannel=f.channel, first_time_tick=f.first_time_tick, fenced=True, term=f.term
            )
            for f in self._channels.fenced_channels()
        ]
        return pb.ListChannelsResponse(channels=owned + fenced, fenced=self._channels.take_fenced())

    async def GetMVCC(
        self, request: pb.GetMVCCRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetMVCCResponse:
        self._tag_span()
        state = await self._call(request, context, self._mvcc_of)
        return pb.GetMVCCResponse(time_tick=state.time_tick, confirmed=state.confirmed)

    @staticmethod
    async def _mvcc_of(wal: WAL, request: pb.GetMVCCRequest) -> VChannelMVCC:
        return wal.mvcc.get(request.vchannel) if request.vchannel else wal.mvcc.pchannel

    # ---- checkpoints and truncation ---------------------------------------------------
    async def Checkpoint(
        self, request: pb.CheckpointRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CheckpointResponse:
        self._tag_span()
        await self._call(
            request,
            context,
            lambda wal, r: wal.checkpoint(
                r.consumer, message_id_of(self._opener, r.message_id), r.time_tick
            ),
        )
        return pb.CheckpointResponse()

    async def RemoveCheckpoint(
        self, request: pb.RemoveCheckpointRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CheckpointResponse:
        self._tag_span()
        await self._call(request, context, lambda wal, r: wal.remove_checkpoint(r.consumer))
        return pb.CheckpointResponse()

    async def GetRetention(
        self, request: pb.GetRetentionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetRetentionResponse:
        self._tag_span()
        state, latest = await self._call(request, context, self._retention_of)
        return retention_response(state, latest)

    @staticmethod
    async def _retention_of(
        wal: WAL, request: pb.GetRetentionRequest
    ) -> tuple[RetentionState, int]:
        """The retention state, and the channel's time tick just after it was read."""
        state = await wal.retention()
        return state, wal.mvcc.pchannel.time_tick

    async def Truncate(
        self, request: pb.TruncateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.TruncateResponse:
        """By the retention window, or, given ``up_to``, through that id (inclusive,
        clamped by the slowest checkpoint: ``truncated_through`` says the point used)."""
        self._tag_span()
        moved, point, through = await self._call(request, context, self._truncate)
        return truncate_response(moved, point, through)

    async def _truncate(
        self, wal: WAL, request: pb.TruncateRequest
    ) -> tuple[MessageId | None, MessageId | None, MessageId | None]:
        """Where the truncation moved to (``None``: it did not move), where the retention
        bound is now, and the last message an ``up_to`` call truncated."""
        if request.up_to:
            if request.HasField("retention_s"):
                raise InvalidInputError("give retention_s or up_to, not both")
            through = await wal.truncate_to(message_id_of(self._opener, request.up_to))
            return through, (await wal.retention()).truncated_before, through
        window = request.retention_s if request.HasField("retention_s") else None
        moved = await wal.truncate(window)
        point = moved if moved is not None else (await wal.retention()).truncated_before
        return moved, point, None

    # ---- transactions -----------------------------------------------------------------
    async def BeginTxn(
        self, request: pb.BeginTxnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.BeginTxnResponse:
        self._tag_span()
        txn_id = await self._call(
            request,
            context,
            lambda wal, r: wal.begin_txn(r.vchannel, r.keepalive_s or None),
            writes=True,
        )
        return pb.BeginTxnResponse(txn_id=txn_id)

    async def KeepAliveTxn(
        self, request: pb.TxnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.KeepAliveTxnResponse:
        self._tag_span()
        await self._call(request, context, lambda wal, r: wal.keepalive_txn(r.txn_id), writes=True)
        return pb.KeepAliveTxnResponse()

    async def CommitTxn(
        self, request: pb.TxnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        result = await self._written(request, context, lambda wal, r: wal.commit_txn(r.txn_id))
        return produce_response(result)

    async def RollbackTxn(
        self, request: pb.TxnRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        result = await self._written(request, context, lambda wal, r: wal.rollback_txn(r.txn_id))
        return produce_response(result)
