"""``NodeClient``'s CLIENT spans and token without grpc.aio interceptors
(:mod:`streamwal.node.client.traced`), on a real gRPC server (no broker): the spans the
OpenTelemetry instrumentation made, the context and the token each call carries, and
a stream's span ending with the stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from streamwal.errors import ChannelNotFoundError
from streamwal.node.client import NodeClient
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc

_PRODUCE = "/streamwal.v1.StreamingNode/Produce"


class _Servicer(pb_grpc.StreamingNodeServicer):  # type: ignore[misc]
    """Keeps each call's metadata; ``Produce`` on ``gone`` is NOT_FOUND."""

    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []

    def _seen(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self.metadata.append({k: str(v) for k, v in context.invocation_metadata() or ()})

    async def Produce(
        self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ProduceResponse:
        self._seen(context)
        if request.pchannel == "gone":
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such channel")
        return pb.ProduceResponse(time_tick=7, message_id=b"\x01")

    async def ProduceStream(
        self,
        requests: AsyncIterator[pb.ProduceRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.ProduceResponse]:
        self._seen(context)
        async for _ in requests:
            yield pb.ProduceResponse(time_tick=8, message_id=b"\x02")


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, _Servicer]]:
    servicer = _Servicer()
    server = grpc.aio.server()
    pb_grpc.add_StreamingNodeServicer_to_server(servicer, server)
    address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    yield address, servicer  # pytest stops it after a failed test too
    await server.stop(None)


def _provider(exporter: InMemorySpanExporter, **kwargs: Any) -> TracerProvider:
    provider = TracerProvider(**kwargs)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _clients(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]


async def test_a_unary_call_is_a_client_span_whose_context_and_token_reach_the_node(
    served: tuple[str, _Servicer], exporter: InMemorySpanExporter
) -> None:
    address, servicer = served
    provider = _provider(exporter)
    async with NodeClient(address, tracer_provider=provider, token="s3cret") as client:
        acked = await client.produce("a", b"x")
    assert acked.time_tick == 7
    (span,) = _clients(exporter)
    assert span.name == f"client {_PRODUCE}"
    assert dict(span.attributes or {}) == {
        "rpc.system": "grpc",
        "rpc.service": "streamwal.v1.StreamingNode",
        "rpc.method": "Produce",
        "rpc.grpc.status_code": 0,
    }
    assert span.status.status_code is StatusCode.UNSET
    (seen,) = servicer.metadata
    assert seen["authorization"] == "Bearer s3cret"
    context = span.get_span_context()
    assert context is not None
    _, trace_id, parent, flags = seen["traceparent"].split("-")
    assert (trace_id, parent) == (f"{context.trace_id:032x}", f"{context.span_id:016x}")
    assert int(flags, 16) & 1  # sampled


async def test_a_refused_call_ends_its_span_in_error_with_the_code_and_details(
    served: tuple[str, _Servicer], exporter: InMemorySpanExporter
) -> None:
    address, _ = served
    async with NodeClient(address, tracer_provider=_provider(exporter)) as client:
        with pytest.raises(ChannelNotFoundError):
            await client.produce("gone", b"x")
        await client.produce("a", b"x")  # the method's next span starts afresh
    span, after = _clients(exporter)
    assert dict(after.attributes or {})["rpc.grpc.status_code"] == 0
    assert after.status.status_code is StatusCode.UNSET
    assert dict(span.attributes or {})["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "no such channel"


async def test_an_unsampled_call_still_carries_its_context_so_the_node_follows_it(
    served: tuple[str, _Servicer], exporter: InMemorySpanExporter
) -> None:
    address, servicer = served
    provider = _provider(exporter, sampler=ALWAYS_OFF)
    async with NodeClient(address, tracer_provider=provider) as client:
        await client.produce("a", b"x")
    assert _clients(exporter) == []
    (seen,) = servicer.metadata
    assert not int(seen["traceparent"].split("-")[3], 16) & 1  # the node drops it too
    assert "authorization" not in seen


async def test_without_tracing_a_call_sends_no_context(
    served: tuple[str, _Servicer], exporter: InMemorySpanExporter
) -> None:
    address, servicer = served
    async with NodeClient(address, tracing=False, tracer_provider=_provider(exporter)) as client:
        await client.produce("a", b"x")
    assert _clients(exporter) == []
    assert "traceparent" not in servicer.metadata[0]


async def test_a_stream_is_one_span_that_ends_with_the_stream(
    served: tuple[str, _Servicer], exporter: InMemorySpanExporter
) -> None:
    address, servicer = served
    async with NodeClient(address, tracer_provider=_provider(exporter), token="t") as client:
        stream = client.open_stream("a", coalesce=False)
        answers = [await stream.append(b"x") for _ in range(3)]
        assert [a.time_tick for a in answers] == [8, 8, 8]
        assert _clients(exporter) == []  # still open
        await stream.close()
        for _ in range(200):  # the span ends once the call has
            if _clients(exporter):
                break
            await asyncio.sleep(0.01)
    (span,) = _clients(exporter)
    assert span.name == "client /streamwal.v1.StreamingNode/ProduceStream"
    assert span.status.status_code is StatusCode.UNSET  # the client ended it: no error
    (seen,) = servicer.metadata
    assert seen["authorization"] == "Bearer t"
    context = span.get_span_context()
    assert context is not None
    assert seen["traceparent"].split("-")[1] == f"{context.trace_id:032x}"
