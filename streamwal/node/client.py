"""A small asyncio client of the streaming node, used by the demo, tests and benchmarks.

gRPC errors arrive as ``grpc.aio.AioRpcError``; :func:`status_of` gives their code so
callers can act (NOT_FOUND: ask another node; FAILED_PRECONDITION: the channel moved),
and :func:`~streamwal.node.outcome.write_outcome` says whether a failed append may be in the log.
Appends are idempotent by default (a :class:`~streamwal.node.idempotence.ProducerIdentity`
numbers each): ``retries`` then covers unknown outcomes too (UNKNOWN, UNAVAILABLE,
DEADLINE_EXCEEDED), with the same numbers, and the node answers a retry of an append
it already has with the first result. With ``idempotent=False`` only appends the
node answered "not written" are retried, since a retry could write the append twice.
A node with ``node.tls`` needs ``tls`` here, with a client certificate when the node
requires one (``node.tls.ca_file``); a refused handshake shows up as UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors
from opentelemetry.trace import TracerProvider

from streamwal.errors import WriteOutcome
from streamwal.node.idempotence import ProducerIdentity
from streamwal.node.outcome import in_band_error, rpc_error, write_outcome
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.tso.tls import ClientTLS, open_channel

__all__ = [
    "Acked",
    "AppendStream",
    "BatchProduceError",
    "Consumed",
    "NodeClient",
    "policy",
    "status_of",
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


# an idempotent append is retried on these: the node answers a copy it has with the first
_IDEMPOTENT_RETRY = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
)


def give_up(producer: ProducerIdentity, pchannel: str, sequence: int, exc: BaseException) -> None:
    """Hand the number back, or renew the identity: a refused request (INVALID_ARGUMENT,
    such as a sequence gap) says the numbering itself is off, so its number is not
    reused."""
    if status_of(exc) == grpc.StatusCode.INVALID_ARGUMENT:
        producer.renew()
    else:
        producer.give_up(pchannel, sequence, write_outcome(exc))


def _may_retry(exc: grpc.aio.AioRpcError, idempotent: bool) -> bool:
    if idempotent:
        return exc.code() in _IDEMPOTENT_RETRY
    code = exc.code()
    return code == grpc.StatusCode.UNAVAILABLE and write_outcome(exc) is WriteOutcome.NOT_WRITTEN


class BatchProduceError(Exception):
    """Part of a batch failed: ``results`` holds, message by message in batch order,
    the :class:`Acked` of each that is in the log and the error (an
    :class:`grpc.aio.AioRpcError`, with its write outcome) of each that failed."""

    def __init__(self, results: list[Acked | grpc.aio.AioRpcError]) -> None:
        self.results = results
        self.failed = {i: r for i, r in enumerate(results) if not isinstance(r, Acked)}
        first = min(self.failed)
        super().__init__(
            f"{len(results) - len(self.failed)} of {len(results)} messages landed; "
            f"message {first} failed first: {self.failed[first].details()}"
        )


def _batch_acks(response: pb.ProduceBatchResponse, which: str) -> list[Acked]:
    results: list[Acked | grpc.aio.AioRpcError] = [
        in_band_error(r.error, f"message {i} of {which}")
        if r.HasField("error")
        else Acked(r.message_id, r.message_id_text, r.time_tick)
        for i, r in enumerate(response.results)
    ]
    acked = [r for r in results if isinstance(r, Acked)]
    if len(acked) < len(results):
        raise BatchProduceError(results)
    return acked


def status_of(exc: BaseException) -> grpc.StatusCode | None:
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
            aio_client_interceptors(tracer_provider=tracer_provider)  # type: ignore[no-untyped-call]
            if tracing
            else []
        )
        options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
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

    async def assign(self, pchannel: str, timeout: float | None = None) -> pb.AssignChannelResponse:
        return await self._stub.AssignChannel(  # type: ignore[no-any-return]
            pb.AssignChannelRequest(pchannel=pchannel), timeout=timeout or self._timeout
        )

    async def remove(self, pchannel: str) -> None:
        await self._stub.RemoveChannel(
            pb.RemoveChannelRequest(pchannel=pchannel), timeout=self._timeout
        )

    async def list_channels(self) -> pb.ListChannelsResponse:
        return await self._stub.ListChannels(  # type: ignore[no-any-return]
            pb.ListChannelsRequest(), timeout=self._timeout
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
        attempt = 0
        while True:
            try:
                reply = await self._stub.Produce(request, timeout=self._timeout)
            except grpc.aio.AioRpcError as exc:
                if attempt >= self._retries or not _may_retry(exc, producer is not None):
                    if producer is not None and sequence is None:
                        give_up(producer, pchannel, request.sequence, exc)
                    raise
                attempt += 1
                await asyncio.sleep(min(1.0, 0.05 * 2 ** (attempt - 1)))
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

    async def begin_txn(self, pchannel: str, vchannel: str = "", keepalive_s: float = 0.0) -> int:
        """Open a transaction on ``vchannel``; its id. ``keepalive_s`` 0: the node's
        default. Its appends: :meth:`produce` with ``txn_id``."""
        reply = await self._stub.BeginTxn(
            pb.BeginTxnRequest(pchannel=pchannel, vchannel=vchannel, keepalive_s=keepalive_s),
            timeout=self._timeout,
        )
        return int(reply.txn_id)

    async def commit_txn(self, pchannel: str, txn_id: int) -> Acked:
        """Commit (ABORTED if it can no longer be). Not retried: a lost answer leaves
        the caller to find out from a reader whether it committed."""
        reply = await self._stub.CommitTxn(
            pb.TxnRequest(pchannel=pchannel, txn_id=txn_id), timeout=self._timeout
        )
        return Acked(reply.message_id, reply.message_id_text, reply.time_tick)

    async def rollback_txn(self, pchannel: str, txn_id: int) -> Acked:
        reply = await self._stub.RollbackTxn(
            pb.TxnRequest(pchannel=pchannel, txn_id=txn_id), timeout=self._timeout
        )
        return Acked(reply.message_id, reply.message_id_text, reply.time_tick)

    async def keepalive_txn(self, pchannel: str, txn_id: int) -> None:
        await self._stub.KeepAliveTxn(
            pb.TxnRequest(pchannel=pchannel, txn_id=txn_id), timeout=self._timeout
        )

    async def produce_stream(
        self, pchannel: str, payloads: Sequence[bytes], *, type: str = "insert"
    ) -> list[Acked]:
        async def requests() -> AsyncIterator[pb.ProduceRequest]:
            for payload in payloads:
                yield pb.ProduceRequest(
                    pchannel=pchannel, message=pb.Message(type=type, payload=payload)
                )

        """Pipelined appends on one stream. The first failed append raises an
        :class:`grpc.aio.AioRpcError` with the code a unary ``produce`` would have
        got; appends before it are in the log."""
        call = self._stub.ProduceStream(requests(), timeout=self._timeout)
        acked: list[Acked] = []
        try:
            async for r in call:
                if r.HasField("error"):
                    raise in_band_error(r.error, f"append {len(acked) + 1} of {len(payloads)}")
                acked.append(Acked(r.message_id, r.message_id_text, r.time_tick))
        finally:
            call.cancel()
        return acked

    def open_stream(self, pchannel: str, *, type: str = "insert") -> AppendStream:
        """A long-lived ``ProduceStream`` call taking one append at a time; see
        :class:`AppendStream`. Needs a running event loop."""
        return AppendStream(self._stub, pchannel, type=type, close_timeout=self._timeout)

    async def consume(
        self,
        pchannel: str,
        delivery: pb.DeliveryPolicy | None = None,
        *,
        vchannel: str = "",
        limit: int | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[Consumed]:
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
        finally:
            call.cancel()

    async def produce_batch(
        self, pchannel: str, payloads: Sequence[bytes], *, type: str = "insert", vchannel: str = ""
    ) -> list[Acked]:
        """One ``ProduceBatch`` call: the payloads land back to back, in order.

        A batch refused whole (channel not here, invalid input) raises the
        :class:`grpc.aio.AioRpcError` of that refusal; a partial failure raises
        :class:`BatchProduceError`, which says what landed.
        """
        request = _batch_request(pchannel, payloads, type, vchannel)
        reply = await self._stub.ProduceBatch(request, timeout=self._timeout)
        return _batch_acks(reply, "the batch")

    async def produce_batches(
        self, pchannel: str, batches: Sequence[Sequence[bytes]], *, type: str = "insert"
    ) -> list[list[Acked]]:
        """Batches pipelined on one ``ProduceBatchStream`` call; the first batch with a
        failure raises (:class:`BatchProduceError`), the ones before it are in the log."""

        async def requests() -> AsyncIterator[pb.ProduceBatchRequest]:
            for batch in batches:
                yield _batch_request(pchannel, batch, type, "")

        call = self._stub.ProduceBatchStream(requests(), timeout=self._timeout)
        acked: list[list[Acked]] = []
        try:
            async for reply in call:
                acked.append(_batch_acks(reply, f"batch {len(acked) + 1} of {len(batches)}"))
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
        finally:
            call.cancel()

    async def mvcc(self, pchannel: str, vchannel: str) -> pb.GetMVCCResponse:
        return await self._stub.GetMVCC(  # type: ignore[no-any-return]
            pb.GetMVCCRequest(pchannel=pchannel, vchannel=vchannel), timeout=self._timeout
        )

    async def checkpoint(
        self, pchannel: str, consumer: str, message_id: bytes, time_tick: int
    ) -> None:
        """Record ``consumer``'s checkpoint (OUT_OF_RANGE before the truncation point)."""
        await self._stub.Checkpoint(
            pb.CheckpointRequest(
                pchannel=pchannel, consumer=consumer, message_id=message_id, time_tick=time_tick
            ),
            timeout=self._timeout,
        )

    async def remove_checkpoint(self, pchannel: str, consumer: str) -> None:
        await self._stub.RemoveCheckpoint(
            pb.RemoveCheckpointRequest(pchannel=pchannel, consumer=consumer),
            timeout=self._timeout,
        )

    async def retention(self, pchannel: str) -> pb.GetRetentionResponse:
        """The truncation point, storage used, and each consumer's checkpoint and lag."""
        return await self._stub.GetRetention(  # type: ignore[no-any-return]
            pb.GetRetentionRequest(pchannel=pchannel), timeout=self._timeout
        )

    async def truncate(
        self, pchannel: str, retention_s: float | None = None
    ) -> pb.TruncateResponse:
        request = pb.TruncateRequest(pchannel=pchannel)
        if retention_s is not None:
            request.retention_s = retention_s
        return await self._stub.Truncate(request, timeout=self._timeout)  # type: ignore[no-any-return]


class AppendStream:
    """Appends over one ``ProduceStream`` call, each awaited on its own.

    ``produce_stream`` needs every payload up front; a caller that produces as it goes
    (or times each append) keeps one stream open instead of paying a call per append.
    Concurrent ``append`` calls pipeline: the node starts them in the order they were
    made, which is their order in the log (except an append the node retries after a
    transient backend error, which lands after the ones behind it), and answers in
    that order. A failed append
    raises the :class:`grpc.aio.AioRpcError` a unary ``produce`` would have and the
    stream goes on; if the call itself ends, every unanswered append raises its error
    (UNKNOWN when it ended without one: those appends may or may not be in the log).
    ``async with client.open_stream(channel) as stream``, or :meth:`close` when done.
    """

    def __init__(
        self,
        stub: pb_grpc.StreamingNodeStub,
        pchannel: str,
        *,
        type: str = "insert",
        close_timeout: float = 30.0,
    ) -> None:
        self.pchannel = pchannel
        self._type = type
        self._close_timeout = close_timeout
        self._requests: asyncio.Queue[pb.ProduceRequest | None] = asyncio.Queue()
        self._waiting: deque[asyncio.Future[Acked]] = deque()
        self._answered = 0
        self._ended: grpc.aio.AioRpcError | None = None
        self._closing = False
        # no deadline: the stream lives as long as its owner wants it
        self._call = stub.ProduceStream(self._send())
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
        waiter: asyncio.Future[Acked] = asyncio.get_running_loop().create_future()
        # queued and awaited together, so the answers (in request order) match up
        self._waiting.append(waiter)
        self._requests.put_nowait(
            pb.ProduceRequest(
                pchannel=self.pchannel, message=pb.Message(type=self._type, payload=payload)
            )
        )
        return await waiter

    async def close(self) -> None:
        """Ends the stream once the appends made so far are answered (or the timeout
        passes, when they fail with CANCELLED)."""
        if not self._closing:
            self._closing = True
            self._requests.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), self._close_timeout)
        except TimeoutError:
            pass
        finally:
            self._call.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _send(self) -> AsyncIterator[pb.ProduceRequest]:
        while (request := await self._requests.get()) is not None:
            yield request

    async def _read(self) -> None:
        ended = rpc_error(grpc.StatusCode.UNKNOWN, "the stream ended before this append's answer")
        try:
            async for r in self._call:
                waiter = self._waiting.popleft()
                self._answered += 1
                if waiter.done():  # its caller was cancelled; the append still counts
                    continue
                if r.HasField("error"):
                    waiter.set_exception(
                        in_band_error(r.error, f"append {self._answered} on the stream")
                    )
                else:
                    waiter.set_result(Acked(r.message_id, r.message_id_text, r.time_tick))
        except grpc.aio.AioRpcError as exc:
            ended = exc
        except asyncio.CancelledError:
            ended = rpc_error(grpc.StatusCode.CANCELLED, "the stream was closed")
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this task was cancelled, not only the call
        finally:
            self._ended = ended
            while self._waiting:
                waiter = self._waiting.popleft()
                if not waiter.done():
                    waiter.set_exception(ended)


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
