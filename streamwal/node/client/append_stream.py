"""A long-lived stream taking one append at a time (``NodeClient.open_stream``): each
append awaited on its own, the ones in flight coalesced into frames, the coalescing
streams of one client on one channel sharing one call."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from streamwal.errors import DecodeError, WriteOutcome
from streamwal.lifecycle import Closeable
from streamwal.node.client.answers import Acked, answered, frame_answers
from streamwal.node.client.base import Numbering
from streamwal.node.client.coalescer import FRAME_APPENDS, FRAME_BYTES
from streamwal.node.client_errors import NodeCallError, node_error
from streamwal.node.outcome import in_band_error, rpc_error
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.timeouts import within

__all__ = ["AppendStream", "StreamCall"]


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
    The coalescing streams one client opens on one channel (for the same message
    type) share one call: their appends meet in its frames, in the order they were
    made, so each stream's order holds and many streams with few appends in flight
    each cost the node and the client a frame for many appends, not one each. They
    share its end too: a call that ends fails the unanswered appends of all of them
    (each with its own error), and the next stream opened there gets a new call. A
    stream made with ``coalesce=False`` has a call of its own.
    ``async with client.open_stream(channel) as stream``, or :meth:`close` when done.
    """

    def __init__(
        self, call: StreamCall, release: Callable[[StreamCall], Awaitable[None]] | None = None
    ) -> None:
        self.pchannel = call.pchannel
        self._call = call
        self._release = release  # None: the call is this stream's alone
        self._closed = False
        self._in_flight = 0
        self._drained = asyncio.Event()
        self._drained.set()

    @property
    def frames(self) -> int:
        """Frames handed to the call so far (shared: all its streams' frames)."""
        return self._call.frames

    async def append(self, payload: bytes) -> Acked:
        if self._closed:
            raise rpc_error(
                grpc.StatusCode.CANCELLED, "the stream is closed", WriteOutcome.NOT_WRITTEN
            )
        self._in_flight += 1
        self._drained.clear()
        try:
            return await self._call.append(payload)
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._drained.set()

    async def close(self) -> None:
        """Ends the stream once the appends made so far are answered (or the timeout
        passes: on a call of its own they then fail with CANCELLED; on a shared call
        they are answered as the call answers them)."""
        if self._closed:
            return
        self._closed = True
        if self._release is None:
            await self._call.close()
            return
        try:
            await within(self._drained.wait(), self._call.close_timeout)
        except TimeoutError:
            pass
        finally:  # even when cancelled: the last stream out closes the call
            await self._release(self._call)


class StreamCall:
    """The call under one or more :class:`AppendStream`: its outbox, its frames and
    their answers (see :class:`AppendStream`). ``users``: the streams sharing it."""

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
        self.close_timeout = close_timeout
        self.users = 0
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
        # checked here, so a payload that is not bytes fails this call alone, unnumbered;
        # its message is built once, in its frame (pb refuses the same types)
        if not isinstance(payload, bytes):
            raise TypeError(f"expected bytes, {type(payload).__name__} found")
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
        self._outbox.append(_Pending(payload, numbered, waiter))
        self._queued.set()
        try:
            return await waiter
        except NodeCallError as exc:
            if self._numbers is not None:
                self._numbers._failed(self.pchannel, numbered, exc)
            raise

    @property
    def done(self) -> bool:
        """Closing or ended: a stream opened now needs a new call."""
        return self._closing or self._ended is not None

    async def close(self) -> None:
        """Ends the call once the appends made so far are answered (or the timeout
        passes, when they fail with CANCELLED)."""
        if not self._closing:
            self._closing = True
            self._outbox.append(None)
            self._queued.set()
        try:
            await within(asyncio.shield(self._reader), self.close_timeout)
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
        limit = FRAME_APPENDS if self._coalesce else 1
        first = outbox.popleft()
        assert first is not None
        frame = [first]
        size = len(first.payload)
        numbers = first.numbers
        while outbox and len(frame) < limit:
            after = outbox[0]
            if after is None or size + len(after.payload) > FRAME_BYTES:
                break
            if numbers is not None and after.numbers != (numbers[0], numbers[1] + 1):
                break
            outbox.popleft()
            frame.append(after)
            size += len(after.payload)
            numbers = after.numbers
        return frame

    def _single(self, frame: list[_Pending]) -> pb.ProduceRequest:
        (pending,) = frame
        request = pb.ProduceRequest(pchannel=self.pchannel)
        request.message.type = self._type
        request.message.payload = pending.payload
        if pending.numbers is not None:
            request.producer_id, request.sequence = pending.numbers
        return request

    def _batch(self, frame: list[_Pending]) -> pb.ProduceBatchRequest:
        # compact: a frame whose appends all landed is answered in runs, not a result each
        request = pb.ProduceBatchRequest(pchannel=self.pchannel, independent=True, compact=True)
        add, kind = request.messages.add, self._type
        for pending in frame:
            add(type=kind, payload=pending.payload)
        if frame[0].numbers is not None:
            request.producer_id, request.first_sequence = frame[0].numbers
        return request

    def _settle(self, numbers: tuple[int, int] | None) -> None:
        """An append's numbers no longer hold the identity's later ones back."""
        if self._numbers is not None:
            self._numbers._settle_one(self.pchannel, numbers)

    def _answer(self, pending: _Pending, r: pb.ProduceResponse | Acked) -> None:
        self._answered += 1
        self._settle(pending.numbers)
        if pending.waiter.done():  # its caller was cancelled; the append still counts
            return
        a = answered(r, pending.numbers)
        if isinstance(a, Acked):
            pending.waiter.set_result(a)
        else:
            pending.waiter.set_exception(in_band_error(a, f"append {self._answered} on the stream"))

    async def _read(self) -> None:
        ended = rpc_error(grpc.StatusCode.UNKNOWN, "the stream ended before this append's answer")
        try:
            async for reply in self._call:
                frame = self._waiting.popleft()
                try:
                    answers = (
                        frame_answers(reply, [p.numbers for p in frame])
                        if self._coalesce
                        else (reply,)
                    )
                except DecodeError as exc:
                    self._waiting.appendleft(frame)  # answered below as the call's end
                    ended = rpc_error(grpc.StatusCode.INTERNAL, str(exc))
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

    payload: bytes
    numbers: tuple[int, int] | None
    waiter: asyncio.Future[Acked]
