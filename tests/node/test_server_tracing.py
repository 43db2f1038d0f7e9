"""The node's server interceptor on a real gRPC server (no broker): a SERVER span per
call under the client's span, the status it ended with, no span for health checks,
and typed refusals of malformed requests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from streamwal.node.config import TracingSettings
from streamwal.node.health import HealthService
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.node.server_tracing import ServerInterceptor
from streamwal.node.telemetry import sampler_of

_SERVICE = "streamwal.v1.StreamingNode"


class _Servicer(pb_grpc.StreamingNodeServicer):  # type: ignore[misc]
    """``Produce`` answers, refuses (``down``: UNAVAILABLE, ``gone``: NOT_FOUND) or
    raises (``boom``); ``ProduceStream`` answers each frame."""

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        if request.pchannel == "down":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "broker down")
        if request.pchannel == "gone":
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such channel")
        if request.pchannel == "boom":
            raise RuntimeError("a bug")
        return pb.ProduceResponse(time_tick=7)

    async def ProduceStream(
        self,
        requests: AsyncIterator[pb.ProduceRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.ProduceResponse]:
        async for request in requests:
            yield pb.ProduceResponse(message_id_text=request.pchannel)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture(params=["sdk", "node"])
def provider(request: pytest.FixtureRequest, exporter: InMemorySpanExporter) -> TracerProvider:
    """The SDK's default sampler (the interceptor lets the SDK decide), and the node's,
    keeping every call (the interceptor decides first): the same spans either way."""
    if request.param == "sdk":
        provider = TracerProvider()
    else:
        provider = TracerProvider(sampler=sampler_of(TracingSettings("parentbased_always_on")))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
async def server(provider: TracerProvider) -> AsyncIterator[str]:
    server = grpc.aio.server(interceptors=[ServerInterceptor(tracer_provider=provider)])
    pb_grpc.add_StreamingNodeServicer_to_server(_Servicer(), server)
    health = HealthService()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.fixture
async def stub(server: str, provider: TracerProvider) -> AsyncIterator[pb_grpc.StreamingNodeStub]:
    interceptors = aio_client_interceptors(tracer_provider=provider)  # type: ignore[no-untyped-call]
    async with grpc.aio.insecure_channel(server, interceptors=interceptors) as channel:
        yield pb_grpc.StreamingNodeStub(channel)


def _servers(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]


async def _ended_servers(exporter: InMemorySpanExporter, count: int) -> list[ReadableSpan]:
    """The server spans once ``count`` have ended: after ``context.abort`` the client may
    have its answer before the handler's span ends."""
    for _ in range(500):
        if len(_servers(exporter)) >= count:
            break
        await asyncio.sleep(0.01)
    servers = _servers(exporter)
    assert len(servers) == count, [s.name for s in exporter.get_finished_spans()]
    return servers


async def _only_server(exporter: InMemorySpanExporter) -> ReadableSpan:
    return (await _ended_servers(exporter, 1))[0]


def _code(span: ReadableSpan) -> object:
    return dict(span.attributes or {})["rpc.grpc.status_code"]


def _client_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    (client,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]
    return client


def _message(pchannel: str) -> pb.ProduceRequest:
    return pb.ProduceRequest(pchannel=pchannel, message=pb.Message(type="insert", payload=b"x"))


async def test_a_call_makes_a_server_span_below_the_client_span(
    stub: pb_grpc.StreamingNodeStub, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    with provider.get_tracer(__name__).start_as_current_span("client.operation") as outer:
        assert (await stub.Produce(_message("a"))).time_tick == 7
    server = await _only_server(exporter)
    client = _client_span(exporter)
    assert server.name == f"/{_SERVICE}/Produce"
    assert server.context is not None and client.context is not None
    assert server.context.trace_id == outer.get_span_context().trace_id
    assert server.parent is not None and server.parent.span_id == client.context.span_id
    assert server.parent.is_remote
    attributes = dict(server.attributes or {})
    assert attributes["rpc.system"] == "grpc"
    assert attributes["rpc.service"] == _SERVICE
    assert attributes["rpc.method"] == "Produce"
    assert attributes["rpc.grpc.status_code"] == 0
    assert attributes["net.peer.ip"] == "127.0.0.1"
    assert attributes["net.peer.name"] == "localhost"
    assert int(str(attributes["net.peer.port"])) > 0
    assert "grpc-python" in str(attributes["rpc.user_agent"])
    assert server.status.status_code is StatusCode.UNSET


async def test_a_call_without_a_client_span_starts_its_own_trace(
    server: str, exporter: InMemorySpanExporter
) -> None:
    async with grpc.aio.insecure_channel(server) as channel:  # no client tracing
        await pb_grpc.StreamingNodeStub(channel).Produce(_message("a"))
    span = await _only_server(exporter)
    assert span.parent is None


@pytest.mark.parametrize(
    ("pchannel", "code", "status"),
    [
        # a server fault is an error, with the code and details
        (
            "down",
            grpc.StatusCode.UNAVAILABLE,
            (StatusCode.ERROR, "StatusCode.UNAVAILABLE:broker down"),
        ),
        # a refusal (the client's mistake) keeps its code, and no error status
        ("gone", grpc.StatusCode.NOT_FOUND, (StatusCode.UNSET, None)),
    ],
)
async def test_an_aborted_call_keeps_its_code(
    stub: pb_grpc.StreamingNodeStub,
    exporter: InMemorySpanExporter,
    pchannel: str,
    code: grpc.StatusCode,
    status: tuple[StatusCode, str | None],
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Produce(_message(pchannel))
    assert err.value.code() == code
    span = await _only_server(exporter)
    assert _code(span) == code.value[0]
    assert (span.status.status_code, span.status.description) == status


async def test_an_escaped_exception_is_recorded_as_unknown(
    stub: pb_grpc.StreamingNodeStub, exporter: InMemorySpanExporter
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.Produce(_message("boom"))
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    span = await _only_server(exporter)
    assert _code(span) == grpc.StatusCode.UNKNOWN.value[0]
    assert span.status.status_code is StatusCode.ERROR
    events = [e for e in span.events if e.name == "exception"]
    assert [dict(e.attributes or {})["exception.type"] for e in events] == ["RuntimeError"]


async def test_a_stream_makes_one_span_for_all_its_frames(
    stub: pb_grpc.StreamingNodeStub, exporter: InMemorySpanExporter
) -> None:
    def frames() -> Iterator[pb.ProduceRequest]:
        for name in ("a", "b", "c"):
            yield _message(name)

    answers = [a.message_id_text async for a in stub.ProduceStream(frames())]
    assert answers == ["a", "b", "c"]
    span = await _only_server(exporter)
    assert span.name == f"/{_SERVICE}/ProduceStream"
    assert _code(span) == 0


async def test_health_checks_make_no_span(server: str, exporter: InMemorySpanExporter) -> None:
    async with grpc.aio.insecure_channel(server) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
        first = await anext(aiter(watch))  # Watch writes with context.write
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
    assert _servers(exporter) == []


async def test_malformed_requests_are_refused_in_a_span(
    server: str, exporter: InMemorySpanExporter
) -> None:
    async with grpc.aio.insecure_channel(server) as channel:
        raw = channel.unary_unary(f"/{_SERVICE}/Produce")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await raw(b"\xff\xff\xff")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        stream = channel.stream_stream(f"/{_SERVICE}/ProduceStream")
        call = stream(iter([_message("a").SerializeToString(), b"\xff\xff\xff"]))
        answers = [pb.ProduceResponse.FromString(a) async for a in _read_until_end(call)]
        assert [a.message_id_text for a in answers] == ["a"]
        assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
    servers = await _ended_servers(exporter, 2)
    codes = [_code(s) for s in servers]
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT.value[0]] * 2


async def _read_until_end(call: Any) -> AsyncIterator[bytes]:
    try:
        async for answer in call:
            yield answer
    except grpc.aio.AioRpcError:
        return


def test_the_services_named_for_tracing_are_the_served_ones() -> None:
    # a name that matches no service would trace every TSO call as a root of its own
    from streamwal.node.server_tracing import HEALTH_SERVICE, TSO_SERVICE
    from streamwal.tso.proto import tso_pb2

    assert tso_pb2.DESCRIPTOR.services_by_name["TSO"].full_name == TSO_SERVICE
    assert HEALTH_SERVICE == "grpc.health.v1.Health"
