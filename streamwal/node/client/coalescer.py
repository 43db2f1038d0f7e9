"""Concurrent unary appends to one channel share calls: a Kafka producer's accumulator,
on a node client.

A unary ``Produce`` costs a Python client (and the node) more CPU in the call itself
than in the append: many callers of one client spend the cores on calls, one per
append, before the node does any work (``docs/performance.md``). Here an append
that finds no call in flight on its channel goes at once, alone, as ``Produce``: a
lone caller waits for nothing. The ones that find calls in flight there join the
frame gathered in the current event-loop iteration, sent at its end as one
``ProduceBatch`` of separate appends (``independent``, each with its own numbers in
``ids``): the callers an answered frame wakes come back in one iteration and share
the next frame, so each waits about one round trip, not for another caller's call.
At most :data:`MAX_IN_FLIGHT` frames are in flight per channel; beyond that appends
wait for one to end. The node answers each append on its own, an invalid one fails
alone, a failed call fails each with that call's status. So every append still has
its own answer, its own typed error and its own numbers, and
:func:`~.retries.with_retries` retries it as before (a retry queues again).
Concurrent appends have no order between them, so their order inside a frame
promises nothing a caller could have relied on.

What goes alone: an append of a transaction (a frame carries none), one whose caller
has a sampled span (its trace keeps its own ``Produce`` call under the caller's span;
the frames are calls of their own, traced as the client's sampler decides for a new
trace), and one too large to share a frame.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from dataclasses import dataclass, field

import grpc
from opentelemetry import trace

from streamwal.errors import WriteOutcome
from streamwal.node.client.answers import Acked, acked_of, answered, frame_answers
from streamwal.node.outcome import in_band_error, rpc_error
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc

__all__ = ["FRAME_APPENDS", "FRAME_BYTES", "MAX_IN_FLIGHT", "ProduceCoalescer"]

#: frames one client keeps in flight per channel; what arrives meanwhile waits for one
#: of them to end
MAX_IN_FLIGHT = 8
#: a coalesced frame holds at most this many appends, and this many payload bytes
#: unless one append alone is larger (a node takes a frame of its largest message and
#: a MiB besides: streamwal.node.limits). Many appends waiting go as several frames:
#: the node writes each as it arrives, so their entries are in flight to the broker
#: together, where one frame of all of them would wait for one entry at a time
FRAME_APPENDS = 128
FRAME_BYTES = 512 * 1024

Numbers = tuple[int, int] | None
_CLOSED = "the client closed while its frame was in flight"
_UNSENT = "the client closed before this append was sent"


@dataclass(slots=True)
class _Queued:
    request: pb.ProduceRequest
    numbers: Numbers
    size: int
    waiter: asyncio.Future[Acked]


@dataclass(slots=True)
class _Lane:
    """One channel's calls in flight and the appends waiting for a frame."""

    in_flight: int = 0
    queued: deque[_Queued] = field(default_factory=deque)
    flushing: bool = False  # a flush is scheduled


class ProduceCoalescer:
    """A node client's unary appends, coalesced per channel (see the module).

    :meth:`produce` is one try of one append: its :class:`Acked`, or the
    ``grpc.aio.AioRpcError`` (a typed :class:`~streamwal.node.client_errors.NodeCallError`)
    a lone ``Produce`` would have raised.
    """

    def __init__(
        self,
        stub: pb_grpc.StreamingNodeStub,
        timeout: float,
        *,
        traced: bool,
    ) -> None:
        self._stub = stub
        self._timeout = timeout
        self._traced = traced
        self._lanes: dict[str, _Lane] = {}
        self._frames: set[asyncio.Task[None]] = set()
        self._closed = False
        #: frames of more than one append sent, and the appends they carried
        self.frames = 0
        self.coalesced = 0

    async def produce(self, request: pb.ProduceRequest, numbers: Numbers) -> Acked:
        lane = self._lanes.get(request.pchannel)
        if lane is None:
            lane = self._lanes[request.pchannel] = _Lane()
        size = len(request.message.payload)
        if (not lane.in_flight and not lane.queued) or self._alone(request, size):
            lane.in_flight += 1
            try:
                reply = await self._stub.Produce(request, timeout=self._timeout)
            finally:
                lane.in_flight -= 1
                self._drain(request.pchannel, lane)
            return acked_of(reply, numbers)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Acked] = loop.create_future()
        lane.queued.append(_Queued(request, numbers, size, waiter))
        if not lane.flushing:  # at the end of this loop iteration, with whoever joins
            lane.flushing = True
            loop.call_soon(self._flush, request.pchannel, lane)
        return await waiter  # a cancelled caller's waiter is skipped, never sent

    async def close(self) -> None:
        """Wait for the frames in flight (their callers get their answers); appends
        still queued fail, not written, and so does any queued later."""
        self._closed = True
        for lane in self._lanes.values():
            _fail_all(lane.queued)
        while self._frames:
            await asyncio.gather(*self._frames, return_exceptions=True)

    def _alone(self, request: pb.ProduceRequest, size: int) -> bool:
        if request.HasField("txn_id") or size > FRAME_BYTES:
            return True
        return self._traced and trace.get_current_span().get_span_context().trace_flags.sampled

    def _flush(self, pchannel: str, lane: _Lane) -> None:
        lane.flushing = False
        self._drain(pchannel, lane)

    def _drain(self, pchannel: str, lane: _Lane) -> None:
        """Send what has queued, a frame per free call; forget a channel gone idle."""
        if self._closed:
            _fail_all(lane.queued)
        while lane.in_flight < MAX_IN_FLIGHT and lane.queued:
            frame = _take(lane.queued)
            if not frame:
                break
            lane.in_flight += 1
            if len(frame) > 1:
                self.frames += 1
                self.coalesced += len(frame)
            # a context of its own: the frame's span is not a child of whichever
            # caller's call happened to end first
            task = asyncio.get_running_loop().create_task(
                self._send(pchannel, lane, frame), context=contextvars.Context()
            )
            self._frames.add(task)
            task.add_done_callback(self._frames.discard)
        if not lane.in_flight and not lane.queued and self._lanes.get(pchannel) is lane:
            del self._lanes[pchannel]

    async def _send(self, pchannel: str, lane: _Lane, frame: list[_Queued]) -> None:
        try:
            if len(frame) == 1:
                (one,) = frame
                reply = await self._stub.Produce(one.request, timeout=self._timeout)
                _settle(one, acked_of(reply, one.numbers))
            else:
                request = _batch(pchannel, frame)
                reply = await self._stub.ProduceBatch(request, timeout=self._timeout)
                _answer_frame(frame, reply)
        except grpc.aio.AioRpcError as exc:
            for queued in frame:
                _fail(queued, _copy(exc))
        except asyncio.CancelledError:  # the client closed under the frame: it may have landed
            for queued in frame:
                _fail(queued, rpc_error(grpc.StatusCode.CANCELLED, _CLOSED, WriteOutcome.UNKNOWN))
            raise
        except Exception as exc:  # a reply that cannot be read, a closed channel: each learns it
            for queued in frame:
                _fail(queued, exc)
        finally:
            lane.in_flight -= 1
            self._drain(pchannel, lane)


def _take(queued: deque[_Queued]) -> list[_Queued]:
    """The appends waiting, up to a frame's bounds, skipping callers gone meanwhile."""
    frame: list[_Queued] = []
    size = 0
    while queued and len(frame) < FRAME_APPENDS:
        head = queued[0]
        if head.waiter.done():  # its caller was cancelled before it was sent
            queued.popleft()
            continue
        if frame and size + head.size > FRAME_BYTES:
            break
        queued.popleft()
        frame.append(head)
        size += head.size
    return frame


def _batch(pchannel: str, frame: list[_Queued]) -> pb.ProduceBatchRequest:
    request = pb.ProduceBatchRequest(pchannel=pchannel, independent=True, compact=True)
    request.messages.extend([q.request.message for q in frame])
    if any(q.numbers is not None for q in frame):
        add = request.ids.add
        for q in frame:
            ids = add()
            if q.numbers is not None:
                ids.producer_id, ids.sequence = q.numbers
    return request


def _answer_frame(frame: list[_Queued], reply: pb.ProduceBatchResponse) -> None:
    answers = frame_answers(reply, [q.numbers for q in frame])
    for queued, r in zip(frame, answers, strict=True):
        a = answered(r, queued.numbers)
        if isinstance(a, Acked):
            _settle(queued, a)
        else:
            _fail(queued, in_band_error(a, None))


def _fail_all(queued: deque[_Queued]) -> None:
    """Appends never sent: not written."""
    while queued:
        unsent = rpc_error(grpc.StatusCode.CANCELLED, _UNSENT, WriteOutcome.NOT_WRITTEN)
        _fail(queued.popleft(), unsent)


def _settle(queued: _Queued, acked: Acked) -> None:
    if not queued.waiter.done():
        queued.waiter.set_result(acked)


def _fail(queued: _Queued, exc: BaseException) -> None:
    if not queued.waiter.done():
        queued.waiter.set_exception(exc)


def _copy(exc: grpc.aio.AioRpcError) -> grpc.aio.AioRpcError:
    """One error per caller: a raised exception collects its raiser's traceback."""
    return grpc.aio.AioRpcError(
        exc.code(), exc.initial_metadata(), exc.trailing_metadata(), exc.details(),
        exc.debug_error_string(),
    )  # fmt: skip
