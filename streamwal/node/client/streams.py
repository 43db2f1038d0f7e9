"""The client's stream calls: pipelined appends, batches and reads on one call each,
and :class:`AppendStream`, a long-lived stream taking one append at a time."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from streamwal.errors import BackendMismatchError, InvalidInputError, WriteOutcome
from streamwal.lifecycle import Closeable
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
from streamwal.node.client.base import Numbering
from streamwal.node.client_errors import NodeCallError, node_error, read_error
from streamwal.node.outcome import in_band_error, rpc_error
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.timeouts import within
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


#: a coalesced frame holds at most this many appends, and this many payload bytes
#: unless one append alone is larger (a node takes a frame of its largest message and
#: a MiB besides: streamwal.node.limits)
_FRAME_APPENDS = 512
_FRAME_BYTES = 512 * 1024


class AppendStream(Closeable):
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
        numbers: Numbering | None = None,
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
        numbered: tuple[int, int] | None = None
        producer = None if self._numbers is None else self._numbers.producer
        if producer is not None:  # reserved as a batch of one (Numbering._reserved)
            numbered = producer.try_reserve(self.pchannel, 1)
            if numbered is None:  # the window is full: wait for answers
                numbered = await producer.reserve(self.pchannel, 1)
        if self._closing or self._ended is not None:  # while it waited for its numbers
            self._settle(numbered)
            if self._ended is not None:
                raise self._ended
            raise rpc_error(
                grpc.StatusCode.CANCELLED, "the stream is closed", WriteOutcome.NOT_WRITTEN
            )
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

    def _settle(self, numbers: tuple[int, int] | None) -> None:
        """An append's numbers no longer hold the identity's later ones back."""
        if self._numbers is not None:
            self._numbers._settle_one(self.pchannel, numbers)

    def _answer(self, pending: _Pending, r: pb.ProduceResponse) -> None:
        self._answered += 1
        self._settle(pending.numbers)
        if pending.waiter.done():  # its caller was cancelled; the append still counts
            return
        if r.HasField("error"):
            pending.waiter.set_exception(
                in_band_error(r.error, f"append {self._answered} on the stream")
            )
        else:
            pending.waiter.set_result(acked_of(r, pending.numbers))

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
                self._settle(pending.numbers)
                if not pending.waiter.done():
                    pending.waiter.set_exception(node_error(ended, outcome, ended.details()))


@dataclass(slots=True)
class _Pending:
    """An append made on a stream and not yet answered."""

    message: pb.Message
    size: int  # its payload's bytes
    numbers: tuple[int, int] | None
    waiter: asyncio.Future[Acked]
