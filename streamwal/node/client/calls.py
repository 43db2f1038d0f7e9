"""The client of one node: its connection and its unary calls, each tried again per
:mod:`streamwal.node.client.retries`; the streams are :mod:`streamwal.node.client.streams`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from opentelemetry import trace
from opentelemetry.trace import TracerProvider

from streamwal.lifecycle import Closeable
from streamwal.node.client.answers import (
    Acked,
    BatchProduceError,
    acked_of,
    batch_acks,
    numbers_of,
)
from streamwal.node.client.base import batch_request
from streamwal.node.client.coalescer import ProduceCoalescer
from streamwal.node.client.retries import give_up, may_retry, with_retries
from streamwal.node.client.streams import StreamCalls
from streamwal.node.client.traced import TracedChannel
from streamwal.node.client_errors import NodeCallError, node_error
from streamwal.node.idempotence import ProducerIdentity
from streamwal.node.limits import DEFAULT_GRPC_MESSAGE_LIMIT
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.terms import check_term
from streamwal.tso.tls import ClientTLS, default_token, open_channel

__all__ = ["NodeClient"]


class NodeClient(StreamCalls, Closeable):
    """One channel to one node; ``async with NodeClient(address) as client``.

    With ``tracing`` each call is a client span whose context travels to the node;
    ``tracer_provider`` (default: the global one) records those spans, so a caller
    with its own provider sees the whole path from its span to the node's.
    ``retries``: how many times :meth:`produce` tries again an append that failed
    (backing off from 50 ms to 1 s): any unknown outcome when idempotent, else only
    UNAVAILABLE and not written. ``producer``: the identity that numbers appends (a
    fresh one by default; ``idempotent=False``: none). ``token``: a bearer token sent
    with every call, for a node with ``auth.enabled`` (unset: the one in the file
    ``STREAMWAL_TOKEN_FILE`` names, if any; a client certificate in ``tls``
    identifies the caller instead); a refusal raises
    :class:`~streamwal.node.client_errors.NodeUnauthenticatedError` or
    :class:`~streamwal.node.client_errors.NodePermissionDeniedError`.
    ``coalesce`` (the default): concurrent :meth:`produce` calls to one channel share
    calls; one that finds a call in flight there joins the frame gathered in the
    current event-loop iteration (:mod:`~streamwal.node.client.coalescer`), each
    still answered, numbered and retried on its own; ``False``: one ``Produce`` call
    per append.
    """

    def __init__(
        self,
        address: str,
        *,
        tls: ClientTLS | None = None,
        timeout: float = 30.0,
        tracing: bool = True,
        tracer_provider: TracerProvider | None = None,
        retries: int = 0,
        idempotent: bool = True,
        producer: ProducerIdentity | None = None,
        token: str | None = None,
        coalesce: bool = True,
    ) -> None:
        self.address = address
        self.producer: ProducerIdentity | None = (
            (producer or ProducerIdentity()) if idempotent else None
        )
        self._timeout = timeout
        self._retries = retries
        options = [("grpc.max_receive_message_length", DEFAULT_GRPC_MESSAGE_LIMIT)]
        self._channel = open_channel(address, tls, options=options)
        tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider) if tracing else None
        self._stub = pb_grpc.StreamingNodeStub(
            TracedChannel(self._channel, tracer, default_token(token))
        )
        self._coalescer = (
            ProduceCoalescer(self._stub, timeout, traced=tracer is not None) if coalesce else None
        )
        self._stream_calls = {}

    @property
    def coalesced(self) -> tuple[int, int]:
        """Frames of more than one :meth:`produce` sent so far, and the appends in them."""
        c = self._coalescer
        return (0, 0) if c is None else (c.frames, c.coalesced)

    async def close(self) -> None:
        if self._coalescer is not None:
            await self._coalescer.close()
        await self._channel.close()

    async def wait_ready(self, timeout: float = 30.0) -> None:
        await self._channel.channel_ready()

    async def _unary(
        self,
        method: Any,
        request: Any,
        *,
        retry: bool = False,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> Any:
        """One unary call, its failure as a typed error. ``retry``: the call is safe to
        repeat (the node answers a repeat as the first), so it is tried ``retries``
        more times on a failure that another try may fix; its outcome is the strongest
        of all tries, as for :meth:`produce`."""
        return await with_retries(
            lambda: method(request, timeout=timeout or self._timeout),
            self._retries if retries is None else retries,
            lambda exc: retry and may_retry(exc, idempotent=True),
        )

    async def assign(
        self, pchannel: str, timeout: float | None = None, *, term: int | None = None
    ) -> pb.AssignChannelResponse:
        """Open ``pchannel`` on this node under ``term`` (``None``: the channel's current
        term plus one); :class:`~streamwal.node.client_errors.NodeStaleTermError` when a
        newer owner holds a higher (or the same) term. The answer's ``term`` is the one
        the node owns the channel under."""
        request = pb.AssignChannelRequest(pchannel=pchannel)
        if term is not None:
            request.term = check_term(term)
        return await self._unary(  # type: ignore[no-any-return]
            self._stub.AssignChannel, request, timeout=timeout
        )

    async def remove(self, pchannel: str) -> None:
        await self._unary(self._stub.RemoveChannel, pb.RemoveChannelRequest(pchannel=pchannel))

    async def list_channels(self) -> pb.ListChannelsResponse:
        return await self._unary(  # type: ignore[no-any-return]
            self._stub.ListChannels, pb.ListChannelsRequest()
        )

    async def produce(
        self,
        pchannel: str,
        payload: bytes,
        *,
        type: str = "insert",
        vchannel: str = "",
        properties: Mapping[str, str] | None = None,
        txn_id: int | None = None,
        sequence: int | None = None,
        producer_id: int | None = None,
    ) -> Acked:
        """Append one message (into transaction ``txn_id`` if given).

        Numbering: by default the next number of this client's producer, given back or
        left behind with the producer id when the append fails
        (:meth:`ProducerIdentity.give_up`). A caller that wants to retry an append
        itself, maybe through another node, numbers it: ``producer_id`` (default: this
        client's) and ``sequence``, the same on every try.
        """
        request = pb.ProduceRequest(
            pchannel=pchannel,
            message=pb.Message(
                type=type, payload=payload, vchannel=vchannel, properties=properties or {}
            ),
        )
        if txn_id is not None:
            request.txn_id = txn_id
        producer = self.producer
        reserved = False  # numbered by reserve: settled once answered
        if producer is not None:
            if sequence is None and producer_id is None:
                request.producer_id, request.sequence = await producer.reserve(pchannel, 1)
                reserved = True
            else:
                request.producer_id = (
                    producer_id if producer_id is not None else producer.producer_id
                )
                request.sequence = (
                    sequence if sequence is not None else producer.next_sequence(pchannel)
                )
        numbers = None if producer is None else (request.producer_id, request.sequence)
        coalescer = self._coalescer
        try:
            return await with_retries(
                (lambda: coalescer.produce(request, numbers))
                if coalescer is not None
                else (lambda: self._produce_alone(request, numbers)),
                self._retries,
                lambda exc: may_retry(exc, producer is not None),
            )
        except NodeCallError as error:
            if producer is not None:
                error.producer_id, error.sequence = request.producer_id, request.sequence
                if sequence is None:
                    give_up(producer, pchannel, (request.producer_id, request.sequence), error)
            raise
        finally:
            if reserved and producer is not None:
                producer.settle(request.producer_id, pchannel, request.sequence)

    async def _produce_alone(
        self, request: pb.ProduceRequest, numbers: tuple[int, int] | None
    ) -> Acked:
        return acked_of(await self._stub.Produce(request, timeout=self._timeout), numbers)

    async def begin_txn(
        self,
        pchannel: str,
        vchannel: str = "",
        keepalive_s: float = 0.0,
        *,
        retries: int | None = None,
    ) -> int:
        """Open a transaction on ``vchannel``; its id. ``keepalive_s`` 0: the node's
        default. Its appends: :meth:`produce` with ``txn_id``. Retried like an append: a
        transaction begun by a try whose answer was lost is never used, and expires
        after its keepalive with nothing delivered."""
        reply = await self._unary(
            self._stub.BeginTxn,
            pb.BeginTxnRequest(pchannel=pchannel, vchannel=vchannel, keepalive_s=keepalive_s),
            retry=True,
            retries=retries,
        )
        return int(reply.txn_id)

    async def commit_txn(self, pchannel: str, txn_id: int, *, retries: int | None = None) -> Acked:
        """Commit; where the commit landed. Retried: the owner answers a repeated commit
        with the first one's result. A typed error says what is known: not written
        (the transaction was not committed and never will be: :class:`TransactionError`
        subclasses, and ``outcome`` not written), or unknown (it may have committed)."""
        reply = await self._txn_call(self._stub.CommitTxn, pchannel, txn_id, retries)
        return Acked(reply.message_id, reply.message_id_text, reply.time_tick)

    async def rollback_txn(
        self, pchannel: str, txn_id: int, *, retries: int | None = None
    ) -> Acked:
        reply = await self._txn_call(self._stub.RollbackTxn, pchannel, txn_id, retries)
        return Acked(reply.message_id, reply.message_id_text, reply.time_tick)

    async def keepalive_txn(
        self, pchannel: str, txn_id: int, *, retries: int | None = None
    ) -> None:
        await self._txn_call(self._stub.KeepAliveTxn, pchannel, txn_id, retries)

    async def _txn_call(self, method: Any, pchannel: str, txn_id: int, retries: int | None) -> Any:
        """A call on an open transaction, retried: its owner answers a repeated commit,
        rollback or keep-alive as the first."""
        return await self._unary(
            method, pb.TxnRequest(pchannel=pchannel, txn_id=txn_id), retry=True, retries=retries
        )

    async def produce_batch(
        self,
        pchannel: str,
        payloads: Sequence[bytes],
        *,
        type: str = "insert",
        vchannel: str = "",
        numbers: tuple[int, int] | None = None,
    ) -> list[Acked]:
        """One ``ProduceBatch`` call: the payloads land back to back, in order.

        A batch refused whole (channel not here, invalid input) raises the typed error
        of that refusal; a partial failure raises :class:`BatchProduceError`, which
        says what landed. Idempotent batches are numbered message by message (the
        numbers are on each :class:`Acked`); a caller that retries a batch itself,
        maybe on another node, gives ``numbers`` (producer id, first sequence), the
        same on every try, and each message lands once.
        """
        if numbers is not None and self.producer is not None:
            request = batch_request(pchannel, payloads, type, vchannel)
            request.producer_id, request.first_sequence = numbers
            last = None  # the caller owns these numbers
        else:
            request, last = await self._batch_request(pchannel, payloads, type, vchannel)
        try:
            reply = await self._stub.ProduceBatch(request, timeout=self._timeout)
            return batch_acks(reply, "the batch", numbers_of(request))
        except grpc.aio.AioRpcError as exc:
            error = node_error(exc)
            self._batch_failed(pchannel, last, error)
            raise error from exc
        except BatchProduceError as exc:
            self._batch_failed(pchannel, last, exc)
            raise
        finally:
            self._settle(pchannel, request, last)

    async def mvcc(self, pchannel: str, vchannel: str) -> pb.GetMVCCResponse:
        return await self._unary(  # type: ignore[no-any-return]
            self._stub.GetMVCC, pb.GetMVCCRequest(pchannel=pchannel, vchannel=vchannel)
        )

    async def checkpoint(
        self, pchannel: str, consumer: str, message_id: bytes, time_tick: int
    ) -> None:
        """Record ``consumer``'s checkpoint (OUT_OF_RANGE before the truncation point)."""
        await self._unary(
            self._stub.Checkpoint,
            pb.CheckpointRequest(
                pchannel=pchannel, consumer=consumer, message_id=message_id, time_tick=time_tick
            ),
        )

    async def remove_checkpoint(self, pchannel: str, consumer: str) -> None:
        await self._unary(
            self._stub.RemoveCheckpoint,
            pb.RemoveCheckpointRequest(pchannel=pchannel, consumer=consumer),
        )

    async def retention(self, pchannel: str) -> pb.GetRetentionResponse:
        """The truncation point, storage used, and each consumer's checkpoint and lag."""
        return await self._unary(  # type: ignore[no-any-return]
            self._stub.GetRetention, pb.GetRetentionRequest(pchannel=pchannel)
        )

    async def truncate(
        self, pchannel: str, retention_s: float | None = None, *, up_to: bytes | None = None
    ) -> pb.TruncateResponse:
        """By the retention window (``retention_s``, default the node's), or through the
        message id ``up_to`` (inclusive); the answer's ``truncated_through`` is the point
        the slowest checkpoint let it use (empty: nothing new was truncated)."""
        request = pb.TruncateRequest(pchannel=pchannel)
        if retention_s is not None:
            request.retention_s = retention_s
        if up_to is not None:
            request.up_to = up_to
        return await self._unary(self._stub.Truncate, request)  # type: ignore[no-any-return]

    async def delete_channel(self, pchannel: str) -> pb.DeleteChannelResponse:
        """Delete the channel: its log, its subscriptions, its keys. Raises the typed
        errors of the refusal: :class:`~streamwal.errors.ChannelInUseError` (FAILED_PRECONDITION)
        while a node serves it, :class:`~streamwal.errors.ChannelNotFoundError` (NOT_FOUND)
        when there is nothing of it (a second delete)."""
        return await self._unary(  # type: ignore[no-any-return]
            self._stub.DeleteChannel, pb.DeleteChannelRequest(pchannel=pchannel)
        )
