"""A call the node's sampler drops makes no span object, and what it does inside is
dropped with it; the calls it keeps are kept at the configured ratio, not its square.
On a real gRPC server (no broker), with the node's sampler."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import Tracer, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from streamwal.node.config import TracingSettings
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.server_tracing import ServerInterceptor
from streamwal.node.telemetry import sampler_of

_PRODUCE = "/streamwal.v1.StreamingNode/Produce"


@dataclass
class _Seen:
    """What a handler saw as its current span, and whether its own child span recorded."""

    trace_id: int
    valid: bool
    sampled: bool
    child_recorded: bool


class _Servicer(pb_grpc.StreamingNodeServicer):  # type: ignore[misc]
    """Notes the current span of each call and starts a child span in it, as library
    code under a handler does."""

    def __init__(self, provider: TracerProvider) -> None:
        self.seen: list[_Seen] = []
        self._tracer = provider.get_tracer("library")

    def _note(self) -> None:
        current = trace.get_current_span().get_span_context()
        with self._tracer.start_as_current_span("wal.child") as child:
            recorded = child.is_recording()
        self.seen.append(
            _Seen(current.trace_id, current.is_valid, current.trace_flags.sampled, recorded)
        )

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        self._note()
        return pb.ProduceResponse(time_tick=7)

    async def AssignChannel(
        self, request: pb.AssignChannelRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AssignChannelResponse:
        self._note()
        return pb.AssignChannelResponse(pchannel=request.pchannel)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the spans the SDK was asked to start (sampled or not)."""
    names: list[str] = []
    start = Tracer.start_span

    def counted(self: Tracer, name: str, *args: Any, **kwargs: Any) -> trace.Span:
        names.append(name)
        return start(self, name, *args, **kwargs)

    monkeypatch.setattr(Tracer, "start_span", counted)
    yield names


@dataclass
class _Node:
    stub: pb_grpc.StreamingNodeStub
    servicer: _Servicer
    exporter: InMemorySpanExporter


async def _serve(ratio: float) -> AsyncIterator[_Node]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        sampler=sampler_of(TracingSettings("parentbased_traceidratio", ratio))
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    servicer = _Servicer(provider)
    server = grpc.aio.server(interceptors=[ServerInterceptor(tracer_provider=provider)])
    pb_grpc.add_StreamingNodeServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield _Node(pb_grpc.StreamingNodeStub(channel), servicer, exporter)
    finally:
        await server.stop(None)


@pytest.fixture
async def dropping() -> AsyncIterator[_Node]:
    """A node keeping no new trace (ratio 0): only lifecycle spans and sampled callers'."""
    async for node in _serve(0.0):
        yield node


@pytest.fixture
async def halving() -> AsyncIterator[_Node]:
    async for node in _serve(0.5):
        yield node


def _message() -> pb.ProduceRequest:
    return pb.ProduceRequest(pchannel="c", message=pb.Message(type="insert", payload=b"x"))


def _traceparent(trace_id: int, span_id: int, sampled: bool) -> tuple[tuple[str, str], ...]:
    return (("traceparent", f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"),)


def _server_spans(exporter: InMemorySpanExporter) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]


async def test_a_dropped_call_makes_no_span_and_its_children_are_dropped(
    dropping: _Node, started: list[str]
) -> None:
    for _ in range(20):
        assert (await dropping.stub.Produce(_message())).time_tick == 7
    assert started == ["wal.child"] * 20  # the children ask; the calls made no span
    assert dropping.exporter.get_finished_spans() == ()
    # each ran in an unsampled parent: the child is no new root, sampled anew
    assert all(s.valid and not s.sampled and not s.child_recorded for s in dropping.servicer.seen)


async def test_a_callers_unsampled_trace_goes_on_below_a_dropped_call(
    dropping: _Node, started: list[str]
) -> None:
    caller = random.getrandbits(128)
    await dropping.stub.Produce(_message(), metadata=_traceparent(caller, 7, sampled=False))
    assert started == ["wal.child"]
    (seen,) = dropping.servicer.seen
    assert (seen.trace_id, seen.sampled, seen.child_recorded) == (caller, False, False)
    assert dropping.exporter.get_finished_spans() == ()


async def test_a_callers_sampled_trace_is_kept_whatever_the_ratio(
    dropping: _Node, started: list[str]
) -> None:
    caller = random.getrandbits(128)
    await dropping.stub.Produce(_message(), metadata=_traceparent(caller, 7, sampled=True))
    assert started == [_PRODUCE, "wal.child"]
    (server,) = _server_spans(dropping.exporter)
    assert server.name == _PRODUCE
    assert server.context.trace_id == caller
    assert server.parent is not None and server.parent.span_id == 7 and server.parent.is_remote
    assert dict(server.attributes)["rpc.method"] == "Produce"
    (seen,) = dropping.servicer.seen
    assert seen.sampled and seen.child_recorded and seen.trace_id == caller


async def test_a_lifecycle_call_is_kept_whatever_the_ratio(
    dropping: _Node, started: list[str]
) -> None:
    await dropping.stub.AssignChannel(pb.AssignChannelRequest(pchannel="c"))
    (server,) = _server_spans(dropping.exporter)
    assert server.name == "/streamwal.v1.StreamingNode/AssignChannel"
    assert server.parent is None
    assert dropping.servicer.seen[0].child_recorded


async def test_new_traces_are_kept_at_the_ratio_and_only_those_make_a_span(
    halving: _Node, started: list[str]
) -> None:
    calls = 400
    for _ in range(calls):
        await halving.stub.Produce(_message())
    kept = _server_spans(halving.exporter)
    # 200 expected, 10 the standard deviation; deciding twice would keep about 100
    assert 150 < len(kept) < 250, len(kept)
    assert started.count(_PRODUCE) == len(kept)
    assert all(s.parent is None for s in kept)
    children = [s for s in halving.exporter.get_finished_spans() if s.name == "wal.child"]
    assert sorted(c.context.trace_id for c in children) == sorted(s.context.trace_id for s in kept)
