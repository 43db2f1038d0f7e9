"""The asyncio client of one streaming node.

Every failure it raises is a typed :class:`~streamwal.errors.StreamwalError`
(:mod:`streamwal.node.client_errors`): the library's type for the condition, with the
append's write outcome (``outcome``) and the gRPC status (``code()``, ``details()``).
Appends are idempotent by default (a :class:`~streamwal.node.idempotence.ProducerIdentity`
numbers each, on unary calls, streams and batches alike): ``retries`` then covers
unknown outcomes too (UNKNOWN, UNAVAILABLE, DEADLINE_EXCEEDED), with the same numbers,
and the node answers a retry of an append it already has with the first result. An
append's outcome is the strongest of all its tries: once any try may have reached the
node, the append is never reported "not written" and its number is never handed back,
whatever the last try said. With ``idempotent=False`` only appends the node answered
"not written" are retried, since a retry could write the append twice.
A node with ``node.tls`` needs ``tls`` here, with a client certificate when the node
requires one (``node.tls.ca_file``); a refused handshake shows up as UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors
from opentelemetry.trace import TracerProvider

from streamwal.backoff import Backoff
from streamwal.errors import StreamwalError, WriteOutcome
from streamwal.node.client_errors import NodeCallError, NodeOutcomeUnknownError, node_error
from streamwal.node.idempotence import ProducerIdentity
from streamwal.node.limits import DEFAULT_GRPC_MESSAGE_LIMIT
from streamwal.node.outcome import in_band_error, rpc_error, write_outcome
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.tracing import name_client_span
from streamwal.retry import Retry
from streamwal.timeouts import within
from streamwal.tso.tls import ClientTLS, open_channel

__all__ = [
    "Acked",
    "AppendStream",
    "BatchProduceError",
    "Consumed",
    "NodeClient",
    "final_error",
    "grpc_code_of",
    "policy",
    "write_outcome",
]


@dataclass(frozen=True)
class Acked:
    """An acknowledged append: what a client records to check the log later."""

    message_id: bytes
    message_id_text: str
    time_tick: int
    producer_id: int | None = None
    sequence: int | None = None


@dataclass(frozen=True, slots=True)
class Consumed:
    """A message a reader got; built by :func:`_consumed`, one per message read."""

    message_id: bytes
    message_id_text: str
    time_tick: int
    type: str
    payload: bytes
    vchannel: str
    properties: dict[str, str]
    source_node_id: int
    producer_id: int | None = None
    sequence: int | None = None
    txn_id: int | None = None


#: the waits between a call's tries (``retries`` bounds them): 50 ms, doubled up to 1 s
_RETRY_BACKOFF = Backoff(initial=0.05, maximum=1.0)

# an idempotent append is retried on these: the node answers a copy it has with the first
_IDEMPOTENT_RETRY = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
)


def give_up(producer: ProducerIdentity, pchannel: str, sequence: int, exc: BaseException) -> None:
    """Hand the number back, or renew the identity: a refused request (INVALID_ARGUMENT,
    such as a sequence gap) says the numbering itself is off, so its number is not
    reused."""
    if grpc_code_of(exc) == grpc.StatusCode.INVALID_ARGUMENT:
        producer.renew()
    else:
        producer.give_up(pchannel, sequence, write_outcome(exc))


def final_error(last: grpc.aio.AioRpcError, unknown: grpc.aio.AioRpcError | None) -> NodeCallError:
    """The error an append ends with: its last try's, unless an earlier try's outcome
    was unknown; then the append may be in the log whatever the last try said, and the
    answer is :class:`~streamwal.node.client_errors.NodeOutcomeUnknownError`."""
    if unknown is None or unknown is last or write_outcome(last) is WriteOutcome.UNKNOWN:
        return node_error(last)
    return NodeOutcomeUnknownError(
        last.code(),
        f"{last.details()} (an earlier try reached the node and its answer was lost "
        f"({unknown.code().name}: {unknown.details()}): it may be in the log)",
        WriteOutcome.UNKNOWN,
    )


def _retries(budget: int, may_retry: Callable[[grpc.aio.AioRpcError], bool]) -> Retry:
    """The tries of one call: the first and ``budget`` more, on :data:`_RETRY_BACKOFF`,
    for the failures ``may_retry`` accepts."""
    return Retry(
        _RETRY_BACKOFF,
        max_attempts=max(budget, 0) + 1,
        retry_if=lambda exc: isinstance(exc, grpc.aio.AioRpcError) and may_retry(exc),
    )


def _may_retry(exc: grpc.aio.AioRpcError, idempotent: bool) -> bool:
    if idempotent:
        return exc.code() in _IDEMPOTENT_RETRY
    code = exc.code()
    return code == grpc.StatusCode.UNAVAILABLE and write_outcome(exc) is WriteOutcome.NOT_WRITTEN


class BatchProduceError(StreamwalError):
    """Part of a batch failed: ``results`` holds, message by message in batch order,
    the :class:`Acked` of each that is in the log and the typed error (with its write
    outcome) of each that failed. ``outcome`` is unknown if any failed one's is."""

    def __init__(self, results: list[Acked | grpc.aio.AioRpcError]) -> None:
        self.results = results
        self.failed = {i: r for i, r in enumerate(results) if not isinstance(r, Acked)}
        self.outcome = (
            WriteOutcome.UNKNOWN
            if any(write_outcome(e) is WriteOutcome.UNKNOWN for e in self.failed.values())
            else WriteOutcome.NOT_WRITTEN
        )
        first = min(self.failed)
        super().__init__(
            f"{len(results) - len(self.failed)} of {len(results)} messages landed; "
            f"message {first} failed first: {self.failed[first].details()}"
        )


def _acked(r: pb.ProduceResponse, numbers: tuple[int, int] | None) -> Acked:
    if numbers is None:
        return Acked(r.message_id, r.message_id_text, r.time_tick)
    return Acked(r.message_id, r.message_id_text, r.time_tick, numbers[0], numbers[1])


def _at(numbers: list[tuple[int, int] | None], index: int) -> tuple[int, int] | None:
    return numbers[index] if index < len(numbers) else None


def _numbers_of(request: pb.ProduceBatchRequest) -> list[tuple[int, int] | None]:
    if not request.HasField("producer_id"):
        return [None] * len(request.messages)
    first = request.first_sequence
    return [(request.producer_id, first + i) for i in range(len(request.messages))]


def _batch_acks(
    response: pb.ProduceBatchResponse, which: str, numbers: list[tuple[int, int] | None]
) -> list[Acked]:
    results: list[Acked | grpc.aio.AioRpcError] = []
    for i, r in enumerate(response.results):
        if r.HasField("error"):
            error = in_band_error(r.error, f"message {i} of {which}")
            if i < len(numbers) and numbers[i] is not None:
                error.producer_id, error.sequence = numbers[i]  # type: ignore[misc]
            results.append(error)
        else:
            results.append(_acked(r, _at(numbers, i)))
    acked = [r for r in results if isinstance(r, Acked)]
    if len(acked) < len(results):
        raise BatchProduceError(results)
    return acked


def grpc_code_of(exc: BaseException) -> grpc.StatusCode | None:
    """The gRPC status code a failed call raised, ``None`` for any other exception."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code()
    return None


def policy(
    kind: str = "all",
    *,
    message_id: bytes | None = None,
    time_tick: int | None = None,
    consumer: str | None = None,
) -> pb.DeliveryPolicy:
    """One of all, latest, start_from, start_after (message_id), start_from_time_tick,
    after_checkpoint (consumer)."""
    if kind == "all":
        return pb.DeliveryPolicy(all=pb.Empty())
    if kind == "latest":
        return pb.DeliveryPolicy(latest=pb.Empty())
    if kind == "start_from":
        return pb.DeliveryPolicy(start_from=message_id or b"")
    if kind == "start_after":
        return pb.DeliveryPolicy(start_after=message_id or b"")
    if kind == "start_from_time_tick":
        return pb.DeliveryPolicy(start_from_time_tick=time_tick or 0)
    if kind == "after_checkpoint":
        return pb.DeliveryPolicy(after_checkpoint=consumer or "")
    raise ValueError(f"unknown delivery policy {kind!r}")


class NodeClient:
    """One channel to one node; ``async with NodeClient(address) as client``.

    With ``tracing`` each call is a client span whose context travels to the node;
    ``tracer_provider`` (default: the global one) records those spans, so a caller
    with its own provider sees the whole path from its span to the node's.
    ``retries``: how many times :meth:`produce` tries again an append that failed
    (backing off from 50 ms to 1 s): any unknown outcome when idempotent, else only
    UNAVAILABLE and not written. ``producer``: the identity that numbers appends (a
    fresh one by default; ``idempotent=False``: none).
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
    ) -> None:
        self.address = address
        self.producer: ProducerIdentity | None = (
            (producer or ProducerIdentity()) if idempotent else None
        )
        self._timeout = timeout
        self._retries = retries
        interceptors = (
            aio_client_interceptors(  # type: ignore[no-untyped-call]
                tracer_provider=tracer_provider, request_hook=name_client_span
            )
            if tracing
            else []
        )
        options = [("grpc.max_receive_message_length", DEFAULT_GRPC_MESSAGE_LIMIT)]
        self._channel = open_channel(address, tls, options=options, interceptors=interceptors)
        self._stub = pb_grpc.StreamingNodeStub(self._channel)

    async def __aenter__(self) -> NodeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
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
        budget = (self._retries if retries is None else retries) if retry else 0
        tries = _retries(budget, lambda exc: _may_retry(exc, idempotent=True))
        unknown: grpc.aio.AioRpcError | None = None
        while True:
            try:
                return await method(request, timeout=timeout or self._timeout)
            except grpc.aio.AioRpcError as exc:
                if write_outcome(exc) is WriteOutcome.UNKNOWN:
                    unknown = exc
                delay = tries.next(exc)
                if delay is None:
                    raise final_error(exc, unknown) from exc
                await tries.wait(delay)

    async def assign(self, pchannel: str, timeout: float | None = None) -> pb.AssignChannelResponse:
        return await self._unary(  # type: ignore[no-any-return]
            self._stub.AssignChannel, pb.AssignChannelRequest(pchannel=pchannel), timeout=timeout
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
        if producer is not None:
            request.producer_id = producer_id if producer_id is not None else producer.producer_id
            request.sequence = (
                sequence if sequence is not None else producer.next_sequence(pchannel)
            )
        tries = _retries(self._retries, lambda exc: _may_retry(exc, producer is not None))
        unknown: grpc.aio.AioRpcError | None = None  # a try that may have been written
        while True:
            try:
                reply = await self._stub.Produce(request, timeout=self._timeout)
            except grpc.aio.AioRpcError as exc:
                if write_outcome(exc) is WriteOutcome.UNKNOWN:
                    unknown = exc
                delay = tries.next(exc)
                if delay is None:
                    error = final_error(exc, unknown)
                    if producer is not None:
                        error.producer_id, error.sequence = request.producer_id, request.sequence
                        if sequence is None:
                            give_up(producer, pchannel, request.sequence, error)
                    raise error from exc
                await tries.wait(delay)
                continue
            if producer is None:
                return Acked(reply.message_id, reply.message_id_text, reply.time_tick)
            return Acked(
                reply.message_id,
                reply.message_id_text,
                reply.time_tick,
                request.producer_id,
                request.sequence,
            )

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

    async def commit_txn(
        self, pchannel: str, txn_id: int, *, retries: int | None = None
    ) -> Acked:
        """Commit; where the commit landed. Retried: the owner answers a repeated commit
        with the first one's result. A typed error says what is known: not written
        (the transaction was not committed and never will be: :class:`TransactionError`
        subclasses, and ``outcome`` not written), or unknown (it may have committed)."""
        reply = await self._unary(
            self._stub.CommitTxn,
            pb.TxnRequest(pchannel=pchannel, txn_id=txn_id),
            retry=True,
            retries=retries,
        )
        return Acked(reply.message_id, reply.message_id_text, reply.time_tick)

    async def rollback_txn(
        self, pchannel: str, txn_id: int, *, retries: int | None = None
    ) -> Acked:
        reply = await self._unary(
            self._stub.RollbackTxn,
            pb.TxnRequest(pchannel=pchannel, txn_id=txn_id),
            retry=True,
            retries=retries,
        )
        return Acked(reply.message_id, reply.message_id_text, reply.time_tick)

    async def keepalive_txn(
        self, pchannel: str, txn_id: int, *, retries: int | None = None
    ) -> None:
        await self._unary(
            self._stub.KeepAliveTxn,
            pb.TxnRequest(pchannel=pchannel, txn_id=txn_id),
            retry=True,
            retries=retries,
        )

    def _numbered(self, pchannel: str) -> tuple[int, int] | None:
        producer = self.producer
        if producer is None:
            return None
        return producer.producer_id, producer.next_sequence(pchannel)

    def _failed(
        self, pchannel: str, numbers: tuple[int, int] | None, error: NodeCallError
    ) -> NodeCallError:
        """Give a failed numbered append's number back (or renew the identity), and name
        the numbers on its error so the caller can retry it."""
        if numbers is not None and self.producer is not None:
            error.producer_id, error.sequence = numbers
            if numbers[0] == self.producer.producer_id:
                give_up(self.producer, pchannel, numbers[1], error)
        return error

    async def produce_stream(
        self, pchannel: str, payloads: Sequence[bytes], *, type: str = "insert"
    ) -> list[Acked]:
        """Pipelined appends on one stream, numbered as :meth:`produce` numbers them.
        The first failed append raises its typed error; appends before it are in the
        log, and the ones after it were not all answered (the identity is renewed
        unless it was the last one numbered and not written)."""
        numbers: list[tuple[int, int] | None] = []

        async def requests() -> AsyncIterator[pb.ProduceRequest]:
            for payload in payloads:
                request = pb.ProduceRequest(
                    pchannel=pchannel, message=pb.Message(type=type, payload=payload)
                )
                numbered = self._numbered(pchannel)
                numbers.append(numbered)
                if numbered is not None:
                    request.producer_id, request.sequence = numbered
                yield request

        call = self._stub.ProduceStream(requests(), timeout=self._timeout)
        acked: list[Acked] = []
        try:
            async for r in call:
                if r.HasField("error"):
                    failed = in_band_error(r.error, f"append {len(acked) + 1} of {len(payloads)}")
                    raise self._failed(pchannel, _at(numbers, len(acked)), failed)
                acked.append(_acked(r, _at(numbers, len(acked))))
        except grpc.aio.AioRpcError as exc:
            if isinstance(exc, NodeCallError):
                raise
            # the call ended: the unanswered appends may have been written
            failed = node_error(exc)
            raise self._failed(pchannel, _at(numbers, len(acked)), failed) from exc
        finally:
            call.cancel()
        return acked

    def open_stream(
        self, pchannel: str, *, type: str = "insert", coalesce: bool = True
    ) -> AppendStream:
        """A long-lived stream call taking one append at a time, numbered as
        :meth:`produce` numbers them; see :class:`AppendStream` (``coalesce``: the
        appends waiting to be sent go in one frame). Needs a running event loop."""
        return AppendStream(
            self._stub,
            pchannel,
            type=type,
            close_timeout=self._timeout,
            numbers=self,
            coalesce=coalesce,
        )

    async def consume(
        self,
        pchannel: str,
        delivery: pb.DeliveryPolicy | None = None,
        *,
        vchannel: str = "",
        limit: int | None = None,
        timeout: float | None = None,
    ) -> AsyncGenerator[Consumed, None]:
        call = self._stub.Consume(
            pb.ConsumeRequest(pchannel=pchannel, policy=delivery or policy(), vchannel=vchannel),
            timeout=timeout,
        )
        count = 0
        try:
            async for m in call:
                yield _consumed(m)
                count += 1
                if limit is not None and count >= limit:
                    return
        except grpc.aio.AioRpcError as exc:
            raise node_error(exc) from exc
        finally:
            call.cancel()

    def _batch_request(
        self, pchannel: str, payloads: Sequence[bytes], type: str, vchannel: str
    ) -> tuple[pb.ProduceBatchRequest, tuple[int, int] | None]:
        """A batch is numbered as one run of sequences, the first message's number
        first: the node deduplicates each message as it would a unary append."""
        request = _batch_request(pchannel, payloads, type, vchannel)
        producer = self.producer
        if producer is None or not payloads:
            return request, None
        first = producer.next_sequence(pchannel)
        for _ in range(len(payloads) - 1):
            producer.next_sequence(pchannel)
        request.producer_id = producer.producer_id
        request.first_sequence = first
        return request, (producer.producer_id, first + len(payloads) - 1)

    def _batch_failed(
        self, pchannel: str, last: tuple[int, int] | None, error: StreamwalError
    ) -> None:
        """A batch that did not land whole: its numbers are handed back only if the
        whole batch is known not written and was the last numbered."""
        if last is None or self.producer is None or last[0] != self.producer.producer_id:
            return
        if isinstance(error, BatchProduceError):
            self.producer.renew()  # part of it is in the log
        else:
            self.producer.give_up(pchannel, last[1], error.outcome)

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
            request = _batch_request(pchannel, payloads, type, vchannel)
            request.producer_id, request.first_sequence = numbers
            last = None  # the caller owns these numbers
        else:
            request, last = self._batch_request(pchannel, payloads, type, vchannel)
        try:
            reply = await self._stub.ProduceBatch(request, timeout=self._timeout)
            return _batch_acks(reply, "the batch", _numbers_of(request))
        except grpc.aio.AioRpcError as exc:
            error = node_error(exc)
            self._batch_failed(pchannel, last, error)
            raise error from exc
        except BatchProduceError as exc:
            self._batch_failed(pchannel, last, exc)
            raise

    async def produce_batches(
        self, pchannel: str, batches: Sequence[Sequence[bytes]], *, type: str = "insert"
    ) -> list[list[Acked]]:
        """Batches pipelined on one ``ProduceBatchStream`` call; the first batch with a
        failure raises (:class:`BatchProduceError`), the ones before it are in the log."""
        requests_made: list[tuple[pb.ProduceBatchRequest, tuple[int, int] | None]] = []

        async def requests() -> AsyncIterator[pb.ProduceBatchRequest]:
            for batch in batches:
                made = self._batch_request(pchannel, batch, type, "")
                requests_made.append(made)
                yield made[0]

        call = self._stub.ProduceBatchStream(requests(), timeout=self._timeout)
        acked: list[list[Acked]] = []
        try:
            async for reply in call:
                request, last = requests_made[len(acked)]
                try:
                    acked.append(
                        _batch_acks(
                            reply, f"batch {len(acked) + 1} of {len(batches)}", _numbers_of(request)
                        )
                    )
                except BatchProduceError as exc:
                    self._batch_failed(pchannel, last, exc)
                    if self.producer is not None:
                        self.producer.renew()  # later batches may be in flight
                    raise
        except grpc.aio.AioRpcError as exc:
            if self.producer is not None and len(requests_made) > len(acked):
                self.producer.renew()
            raise node_error(exc) from exc
        finally:
            call.cancel()
        return acked

    async def consume_batches(
        self,
        pchannel: str,
        delivery: pb.DeliveryPolicy | None = None,
        *,
        vchannel: str = "",
        max_messages: int = 0,
        max_bytes: int = 0,
        timeout: float | None = None,
    ) -> AsyncIterator[list[Consumed]]:
        """``ConsumeBatch``: what the node had ready, one list per frame (0: the node's
        bounds per frame)."""
        call = self._stub.ConsumeBatch(
            pb.ConsumeRequest(
                pchannel=pchannel,
                policy=delivery or policy(),
                vchannel=vchannel,
                max_batch_messages=max_messages,
                max_batch_bytes=max_bytes,
            ),
            timeout=timeout,
        )
        try:
            async for frame in call:
                yield [_consumed(m) for m in frame.messages]
        except grpc.aio.AioRpcError as exc:
            raise node_error(exc) from exc
        finally:
            call.cancel()

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
        self, pchannel: str, retention_s: float | None = None
    ) -> pb.TruncateResponse:
        request = pb.TruncateRequest(pchannel=pchannel)
        if retention_s is not None:
            request.retention_s = retention_s
        return await self._unary(self._stub.Truncate, request)  # type: ignore[no-any-return]


#: a coalesced frame holds at most this many appends, and this many payload bytes
#: unless one append alone is larger (a node takes a frame of its largest message and
#: a MiB besides: streamwal.node.limits)
_FRAME_APPENDS = 512
_FRAME_BYTES = 512 * 1024


class AppendStream:
    """Appends over one long-lived stream call, each awaited on its own.

    ``produce_stream`` needs every payload up front; a caller that produces as it goes
    (or times each append) keeps one stream open instead of paying a call per append.
    Concurrent ``append`` calls pipeline: the node starts them in the order they were
    made, which is their order in the log, and answers in that order. Appends are
    numbered by ``numbers`` (the :class:`NodeClient` that opened the stream) as unary
    ones are, so each is deduplicated by the node and a failed one can be retried with
    the numbers its error names. A failed append raises the typed error a unary
    ``produce`` would have and the stream goes on; if the call itself ends, every
    unanswered append raises its error: with an unknown outcome once it was handed to
    the call (it may be in the log, whatever status ended the call), not written if it
    never was.

    With ``coalesce`` (the default) the appends waiting to be sent when the call can
    take a frame go as one ``ProduceBatchStream`` frame of separate appends
    (``independent``): one frame and one WAL batch for many appends, each still
    answered on its own (an invalid one fails alone) and in order. An append that finds
    the call idle goes at once, alone, so coalescing adds no wait; it pays off when
    many are in flight, where a frame per append is most of what a node spends. A node
    older than ``independent`` refuses such a frame whole when one of its appends is
    invalid (each then fails not written). Without
    it each append is a ``ProduceStream`` frame (where the node retries an append after
    a transient backend error, that one lands after the ones behind it).
    ``async with client.open_stream(channel) as stream``, or :meth:`close` when done.
    """

    def __init__(
        self,
        stub: pb_grpc.StreamingNodeStub,
        pchannel: str,
        *,
        type: str = "insert",
        close_timeout: float = 30.0,
        numbers: NodeClient | None = None,
        coalesce: bool = True,
    ) -> None:
        self.pchannel = pchannel
        self._type = type
        self._close_timeout = close_timeout
        self._numbers = numbers
        self._coalesce = coalesce
        # appends not yet handed to the call, then a None once the stream closes
        self._outbox: deque[_Pending | None] = deque()
        self._queued = asyncio.Event()
        # the frames sent (or being sent) and not yet answered, oldest first
        self._waiting: deque[list[_Pending]] = deque()
        self._answered = 0
        #: frames handed to the call so far (with ``coalesce``, fewer than appends)
        self.frames = 0
        self._ended: NodeCallError | None = None
        self._closing = False
        # no deadline: the stream lives as long as its owner wants it
        call: Any = (
            stub.ProduceBatchStream(self._send(self._batch))
            if coalesce
            else stub.ProduceStream(self._send(self._single))
        )
        self._call = call
        self._reader = asyncio.create_task(self._read())

    async def __aenter__(self) -> AppendStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def append(self, payload: bytes) -> Acked:
        if self._closing:
            raise rpc_error(
                grpc.StatusCode.CANCELLED, "the stream is closed", WriteOutcome.NOT_WRITTEN
            )
        if self._ended is not None:
            raise self._ended
        # built here, so a payload that is not bytes fails this call alone, unnumbered
        message = pb.Message(type=self._type, payload=payload)
        waiter: asyncio.Future[Acked] = asyncio.get_running_loop().create_future()
        numbered = None if self._numbers is None else self._numbers._numbered(self.pchannel)
        self._outbox.append(_Pending(message, len(payload), numbered, waiter))
        self._queued.set()
        try:
            return await waiter
        except NodeCallError as exc:
            if self._numbers is not None:
                self._numbers._failed(self.pchannel, numbered, exc)
            raise

    async def close(self) -> None:
        """Ends the stream once the appends made so far are answered (or the timeout
        passes, when they fail with CANCELLED)."""
        if not self._closing:
            self._closing = True
            self._outbox.append(None)
            self._queued.set()
        try:
            await within(asyncio.shield(self._reader), self._close_timeout)
        except TimeoutError:
            pass
        finally:
            self._call.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _next(self) -> _Pending | None:
        while not self._outbox:
            self._queued.clear()
            await self._queued.wait()
        return self._outbox[0]

    async def _send(self, build: Callable[[list[_Pending]], Any]) -> AsyncIterator[Any]:
        """Each frame taken from the outbox, as ``build`` makes its request; registered
        as waiting for its answer before it is handed to the call."""
        while await self._next() is not None:
            frame = self._take()
            self._waiting.append(frame)
            self.frames += 1
            yield build(frame)

    def _take(self) -> list[_Pending]:
        """Everything waiting, up to a frame's bounds (one append without ``coalesce``):
        a run of numbers (a batch is numbered from its first) and never past the close."""
        outbox = self._outbox
        limit = _FRAME_APPENDS if self._coalesce else 1
        first = outbox.popleft()
        assert first is not None
        frame = [first]
        size = first.size
        numbers = first.numbers
        while outbox and len(frame) < limit:
            after = outbox[0]
            if after is None or size + after.size > _FRAME_BYTES:
                break
            if numbers is not None and after.numbers != (numbers[0], numbers[1] + 1):
                break
            outbox.popleft()
            frame.append(after)
            size += after.size
            numbers = after.numbers
        return frame

    def _single(self, frame: list[_Pending]) -> pb.ProduceRequest:
        (pending,) = frame
        request = pb.ProduceRequest(pchannel=self.pchannel, message=pending.message)
        if pending.numbers is not None:
            request.producer_id, request.sequence = pending.numbers
        return request

    def _batch(self, frame: list[_Pending]) -> pb.ProduceBatchRequest:
        request = pb.ProduceBatchRequest(pchannel=self.pchannel, independent=True)
        request.messages.extend([pending.message for pending in frame])
        if frame[0].numbers is not None:
            request.producer_id, request.first_sequence = frame[0].numbers
        return request

    def _answer(self, pending: _Pending, r: pb.ProduceResponse) -> None:
        self._answered += 1
        if pending.waiter.done():  # its caller was cancelled; the append still counts
            return
        if r.HasField("error"):
            pending.waiter.set_exception(
                in_band_error(r.error, f"append {self._answered} on the stream")
            )
        else:
            pending.waiter.set_result(_acked(r, pending.numbers))

    async def _read(self) -> None:
        ended = rpc_error(grpc.StatusCode.UNKNOWN, "the stream ended before this append's answer")
        try:
            async for reply in self._call:
                frame = self._waiting.popleft()
                answers = reply.results if self._coalesce else (reply,)
                if len(answers) != len(frame):
                    self._waiting.appendleft(frame)  # answered below as the call's end
                    ended = rpc_error(
                        grpc.StatusCode.INTERNAL,
                        f"a frame of {len(frame)} appends answered with {len(answers)} results",
                    )
                    self._call.cancel()
                    return
                for pending, r in zip(frame, answers, strict=True):
                    self._answer(pending, r)
        except grpc.aio.AioRpcError as exc:
            ended = node_error(exc)
        except asyncio.CancelledError:
            ended = rpc_error(grpc.StatusCode.CANCELLED, "the stream was closed")
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this task was cancelled, not only the call
        finally:
            self._ended = ended
            # one error each, so a retry names its own numbers. What was handed to the
            # call may have reached the node, whatever status ended it; what never left
            # the outbox was not written
            sent = [p for frame in self._waiting for p in frame]
            self._waiting.clear()
            unsent = [p for p in self._outbox if p is not None]
            self._outbox.clear()
            for pending, outcome in [(p, WriteOutcome.UNKNOWN) for p in sent] + [
                (p, WriteOutcome.NOT_WRITTEN) for p in unsent
            ]:
                if not pending.waiter.done():
                    pending.waiter.set_exception(node_error(ended, outcome, ended.details()))


@dataclass(slots=True)
class _Pending:
    """An append made on a stream and not yet answered."""

    message: pb.Message
    size: int  # its payload's bytes
    numbers: tuple[int, int] | None
    waiter: asyncio.Future[Acked]


def _slot_setter(name: str) -> Callable[[Consumed, Any], None]:
    setter: Callable[[Consumed, Any], None] = Consumed.__dict__[name].__set__
    return setter


_new_consumed = object.__new__
_set_message_id = _slot_setter("message_id")
_set_message_id_text = _slot_setter("message_id_text")
_set_time_tick = _slot_setter("time_tick")
_set_type = _slot_setter("type")
_set_payload = _slot_setter("payload")
_set_vchannel = _slot_setter("vchannel")
_set_properties = _slot_setter("properties")
_set_source_node_id = _slot_setter("source_node_id")
_set_producer_id = _slot_setter("producer_id")
_set_sequence = _slot_setter("sequence")
_set_txn_id = _slot_setter("txn_id")


def _consumed(m: pb.ConsumedMessage) -> Consumed:
    """Built through the slots: the frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``, which cost a reader more than the rest of the
    conversion (a message read is never validated here: the node built it)."""
    consumed = _new_consumed(Consumed)
    _set_message_id(consumed, m.message_id)
    _set_message_id_text(consumed, m.message_id_text)
    _set_time_tick(consumed, m.time_tick)
    _set_type(consumed, m.type)
    _set_payload(consumed, m.payload)
    _set_vchannel(consumed, m.vchannel)
    properties = m.properties
    _set_properties(consumed, dict(properties) if properties else {})
    _set_source_node_id(consumed, m.source_node_id)
    has = m.HasField
    _set_producer_id(consumed, m.producer_id if has("producer_id") else None)
    _set_sequence(consumed, m.sequence if has("sequence") else None)
    _set_txn_id(consumed, m.txn_id if has("txn_id") else None)
    return consumed


def _batch_request(
    pchannel: str, payloads: Sequence[bytes], type: str, vchannel: str
) -> pb.ProduceBatchRequest:
    request = pb.ProduceBatchRequest(pchannel=pchannel)
    add = request.messages.add
    for payload in payloads:
        add(type=type, payload=payload, vchannel=vchannel)
    return request
