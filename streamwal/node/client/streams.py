"""The client's stream calls: pipelined appends, batches and reads on one call each;
:meth:`StreamCalls.open_stream` opens an
:class:`~streamwal.node.client.append_stream.AppendStream`."""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, AsyncIterator, Sequence

import grpc

from streamwal.errors import BackendMismatchError, InvalidInputError
from streamwal.node.client.answers import (
    Acked,
    BatchProduceError,
    Consumed,
    acked_of,
    batch_acks,
    consumed_from,
    number_at,
    numbers_of,
)
from streamwal.node.client.append_stream import AppendStream, StreamCall
from streamwal.node.client.base import Numbering
from streamwal.node.client_errors import NodeCallError, node_error, read_error
from streamwal.node.outcome import in_band_error
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.wal.backend import DeliveryPolicy
from streamwal.wal.message_id import MessageId

__all__ = ["AppendStream", "StreamCalls", "WireMessageId", "policy", "wire_policy"]


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


class WireMessageId(MessageId):
    """A position as a client holds it (``Acked.message_id``, ``Consumed.message_id``):
    the node's bytes, for a :class:`~streamwal.DeliveryPolicy` sent to the node. It has
    no log order of its own: only the node's backend can compare positions."""

    __slots__ = ("_raw",)

    def __init__(self, raw: bytes) -> None:
        self._raw = bytes(raw)

    def sort_key(self) -> tuple[int, ...]:
        raise BackendMismatchError("a client-side message id has no log order")

    def to_bytes(self) -> bytes:
        return self._raw

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WireMessageId) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)

    def __str__(self) -> str:
        return self._raw.hex()


def wire_policy(policy: DeliveryPolicy | pb.DeliveryPolicy) -> pb.DeliveryPolicy:
    """``policy`` as the node takes it: the public :class:`~streamwal.DeliveryPolicy`
    (its message id a :class:`WireMessageId`, or any id whose bytes the node's
    backend reads), or the wire type itself, passed through."""
    if isinstance(policy, pb.DeliveryPolicy):
        return policy
    if policy.kind == DeliveryPolicy.ALL:
        return pb.DeliveryPolicy(all=pb.Empty())
    if policy.kind == DeliveryPolicy.LATEST:
        return pb.DeliveryPolicy(latest=pb.Empty())
    if policy.kind == DeliveryPolicy.START_FROM_TIME_TICK:
        return pb.DeliveryPolicy(start_from_time_tick=policy.time_tick or 0)
    if policy.kind == DeliveryPolicy.AFTER_CHECKPOINT:
        return pb.DeliveryPolicy(after_checkpoint=policy.consumer or "")
    if policy.message_id is None:
        raise InvalidInputError(f"delivery policy {policy} needs a message id")
    raw = policy.message_id.to_bytes()
    if policy.kind == DeliveryPolicy.START_FROM:
        return pb.DeliveryPolicy(start_from=raw)
    return pb.DeliveryPolicy(start_after=raw)


class StreamCalls(Numbering):
    """The calls of :class:`~streamwal.node.client.NodeClient` that stream: appends,
    batches and reads pipelined on one call."""

    #: (channel, message type) -> the call its coalescing append streams share
    _stream_calls: dict[tuple[str, str], StreamCall]

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
                numbered = await self._reserved(pchannel)
                numbers.append(numbered)
                if numbered is not None:
                    request.producer_id, request.sequence = numbered
                yield request

        call = self._stub.ProduceStream(requests(), timeout=self._timeout)
        acked: list[Acked] = []
        settled = 0  # numbers[:settled] are answered
        try:
            async for r in call:
                self._settle_one(pchannel, number_at(numbers, settled))
                settled += 1
                if r.HasField("error"):
                    failed = in_band_error(r.error, f"append {len(acked) + 1} of {len(payloads)}")
                    raise self._failed(pchannel, number_at(numbers, len(acked)), failed)
                acked.append(acked_of(r, number_at(numbers, len(acked))))
        except grpc.aio.AioRpcError as exc:
            if isinstance(exc, NodeCallError):
                raise
            # the call ended: the unanswered appends may have been written
            failed = node_error(exc)
            raise self._failed(pchannel, number_at(numbers, len(acked)), failed) from exc
        finally:
            call.cancel()
            for numbered in numbers[settled:]:
                self._settle_one(pchannel, numbered)
        return acked

    def open_stream(
        self, pchannel: str, *, type: str = "insert", coalesce: bool = True
    ) -> AppendStream:
        """A long-lived stream taking one append at a time, numbered as
        :meth:`produce` numbers them; see :class:`AppendStream` (``coalesce``: the
        appends waiting to be sent go in one frame, and this client's coalescing
        streams on ``pchannel`` share one call). Needs a running event loop."""
        if not coalesce:
            return AppendStream(self._new_stream_call(pchannel, type, coalesce=False))
        key = (pchannel, type)
        call = self._stream_calls.get(key)
        if call is None or call.done:
            call = self._stream_calls[key] = self._new_stream_call(pchannel, type, coalesce=True)
        call.users += 1
        return AppendStream(call, functools.partial(self._release_stream_call, key))

    def _new_stream_call(self, pchannel: str, type: str, *, coalesce: bool) -> StreamCall:
        return StreamCall(
            self._stub,
            pchannel,
            type=type,
            close_timeout=self._timeout,
            numbers=self,
            coalesce=coalesce,
        )

    async def _release_stream_call(self, key: tuple[str, str], call: StreamCall) -> None:
        """One of ``call``'s streams closed; the last one closes the call."""
        call.users -= 1
        if call.users > 0:
            return
        if self._stream_calls.get(key) is call:
            del self._stream_calls[key]
        await call.close()

    async def consume(
        self,
        pchannel: str,
        delivery: DeliveryPolicy | pb.DeliveryPolicy | None = None,
        *,
        vchannel: str = "",
        limit: int | None = None,
        timeout: float | None = None,
        read_only: bool = False,
        appended_only: bool = False,
    ) -> AsyncGenerator[Consumed, None]:
        """Read ``pchannel`` on this node from ``delivery`` (the public
        :class:`~streamwal.DeliveryPolicy`, its position a :class:`WireMessageId`; the
        wire type is taken too; default all), up to ``limit`` messages, none of the WAL's
        own records if ``appended_only``. A failure is a read's error
        (:func:`~streamwal.node.client_errors.read_error`): nothing was written.

        ``read_only``: the node need not own the channel, and the read goes on while the
        channel changes owners (the owner's ids and order); NOT_FOUND
        (:class:`~streamwal.errors.NoSuchChannelError`) only for a channel that does not
        exist. Without it, only the owner serves, and the read ends when the channel
        leaves it."""
        request = pb.ConsumeRequest(pchannel=pchannel, vchannel=vchannel, read_only=read_only)
        request.policy.CopyFrom(policy() if delivery is None else wire_policy(delivery))
        request.appended_only = appended_only
        call = self._stub.Consume(request, timeout=timeout)
        count = 0
        try:
            async for m in call:
                yield consumed_from(m)
                count += 1
                if limit is not None and count >= limit:
                    return
        except grpc.aio.AioRpcError as exc:
            raise read_error(exc) from exc
        finally:
            call.cancel()

    async def produce_batches(
        self, pchannel: str, batches: Sequence[Sequence[bytes]], *, type: str = "insert"
    ) -> list[list[Acked]]:
        """Batches pipelined on one ``ProduceBatchStream`` call; the first batch with a
        failure raises (:class:`BatchProduceError`), the ones before it are in the log."""
        requests_made: list[tuple[pb.ProduceBatchRequest, tuple[int, int] | None]] = []
        settled = 0  # requests_made[:settled] are answered

        async def requests() -> AsyncIterator[pb.ProduceBatchRequest]:
            for batch in batches:
                made = await self._batch_request(pchannel, batch, type, "")
                requests_made.append(made)
                yield made[0]

        call = self._stub.ProduceBatchStream(requests(), timeout=self._timeout)
        acked: list[list[Acked]] = []
        try:
            async for reply in call:
                request, last = requests_made[len(acked)]
                self._settle(pchannel, request, last)
                settled += 1
                try:
                    acked.append(
                        batch_acks(
                            reply, f"batch {len(acked) + 1} of {len(batches)}", numbers_of(request)
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
            for request, last in requests_made[settled:]:
                self._settle(pchannel, request, last)
        return acked

    async def consume_batches(
        self,
        pchannel: str,
        delivery: DeliveryPolicy | pb.DeliveryPolicy | None = None,
        *,
        vchannel: str = "",
        max_messages: int = 0,
        max_bytes: int = 0,
        timeout: float | None = None,
        read_only: bool = False,
        appended_only: bool = False,
    ) -> AsyncIterator[list[Consumed]]:
        """``ConsumeBatch``: what the node had ready, one list per frame (0: the node's
        bounds per frame); ``read_only`` and ``appended_only`` as for :meth:`consume`."""
        call = self._stub.ConsumeBatch(
            pb.ConsumeRequest(
                pchannel=pchannel,
                policy=policy() if delivery is None else wire_policy(delivery),
                vchannel=vchannel,
                appended_only=appended_only,
                max_batch_messages=max_messages,
                max_batch_bytes=max_bytes,
                read_only=read_only,
            ),
            timeout=timeout,
        )
        try:
            async for frame in call:
                yield [consumed_from(m) for m in frame.messages]
        except grpc.aio.AioRpcError as exc:
            raise read_error(exc) from exc
        finally:
            call.cancel()
