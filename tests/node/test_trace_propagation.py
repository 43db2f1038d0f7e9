"""A client's call and the node's work share one trace (context over gRPC).

The Jaeger test runs a node process that exports through the stack's collector;
the test's own provider exports the client's spans the same way, so Jaeger holds
the whole path from the client's span to the node's server span.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span

from streamwal.node.client import NodeClient
from streamwal.node.telemetry import NODE_ID_ATTRIBUTE, span_exporter
from streamwal.node.trace.query import (
    SpanSummary,
    get_trace,
    span_summaries,
    span_tree_summary,
)
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration

_SERVICE_PATH = "/streamwal.v1.StreamingNode"


async def test_client_trace_context_reaches_the_node(
    stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    node = NodeProcess(
        tmp_path,
        1,
        {
            "pulsar": {"service_url": stack.pulsar_url},
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            "tso": {"key_prefix": etcd_prefix("prop")},
        },
    )
    await node.start()
    tracer = TracerProvider().get_tracer(__name__)
    try:
        async with NodeClient(node.address) as client:
            with tracer.start_as_current_span("client.operation") as span:
                opened = await client.assign(f"prop-{unique}")
            other = await client.assign(f"prop-other-{unique}")  # no client span
    finally:
        assert await node.terminate() == 0
    client_trace = format(span.get_span_context().trace_id, "032x")
    assert opened.trace_id == client_trace  # the node's wal.open ran in the client's trace
    assert other.trace_id and other.trace_id != client_trace


def _ancestors(span: SpanSummary, by_id: Mapping[str, SpanSummary]) -> list[str]:
    """Span ids from ``span``'s parent up to the first parent Jaeger does not hold."""
    out: list[str] = []
    parent = span.parent_id
    while parent is not None and parent not in out:
        out.append(parent)
        above = by_id.get(parent)
        parent = above.parent_id if above is not None else None
    return out


async def _server_span_under(
    jaeger_url: str, client_span: Span, method: str, service: str, timeout: float = 30.0
) -> tuple[SpanSummary, dict[str, Any]]:
    """The node's server span for ``method`` in ``client_span``'s trace, once Jaeger
    holds it and every span between it and ``client_span`` (they travel in batches)."""
    context = client_span.get_span_context()
    trace_id = format(context.trace_id, "032x")
    client_id = format(context.span_id, "016x")
    operation = f"{_SERVICE_PATH}/{method}"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = await get_trace(jaeger_url, trace_id, operation=operation, timeout=timeout)
        assert found is not None, f"Jaeger holds no trace {trace_id} with {operation}"
        spans = span_summaries(found)
        by_id = {s.span_id: s for s in spans}
        servers = [s for s in spans if s.operation == operation and s.service == service]
        if len(servers) == 1 and client_id in _ancestors(servers[0], by_id):
            return servers[0], found
        if loop.time() > deadline:
            raise AssertionError(
                f"no {operation} span of {service} below the client span {client_id}:\n"
                + span_tree_summary(found)
            )
        await asyncio.sleep(0.5)


async def test_produce_runs_in_the_client_trace_in_jaeger(
    telemetry_stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    """Produce and ProduceStream: the node's server span (an append makes no span of
    its own below it) is in the client's trace, below the client's span, and the
    node's id is on its span and on its process (the resource)."""
    info = telemetry_stack
    assert info.otlp_endpoint and info.jaeger_url
    node_service = f"streamwal-prop-node-{unique}"
    node_id = 7
    node = NodeProcess(
        tmp_path,
        node_id,
        {
            "pulsar": {"service_url": info.pulsar_url},
            "etcd": {"endpoints": [info.etcd_endpoint]},
            "tso": {"key_prefix": etcd_prefix("prop-produce")},
            "telemetry": {"service_name": node_service, "otlp_endpoint": info.otlp_endpoint},
        },
    )
    provider = TracerProvider(
        resource=Resource.create({"service.name": f"streamwal-prop-client-{unique}"})
    )
    provider.add_span_processor(BatchSpanProcessor(span_exporter(info.otlp_endpoint)))
    tracer = provider.get_tracer(__name__)
    channel = f"prop-produce-{unique}"
    await node.start()
    try:
        async with NodeClient(node.address, tracer_provider=provider) as client:
            await client.assign(channel)
            with tracer.start_as_current_span("client.produce") as unary:
                await client.produce(channel, b"one")
            with tracer.start_as_current_span("client.produce_stream") as streamed:
                acked = await client.produce_stream(channel, [b"two", b"three"])
            assert len(acked) == 2
    finally:
        assert await node.terminate() == 0  # flushes the node's exporter
        provider.shutdown()  # and the client's
    assert unary.get_span_context().trace_id != streamed.get_span_context().trace_id
    for client_span, method in ((unary, "Produce"), (streamed, "ProduceStream")):
        server, found = await _server_span_under(info.jaeger_url, client_span, method, node_service)
        assert server.tags.get("span.kind") == "server"
        assert int(server.tags[NODE_ID_ATTRIBUTE]) == node_id
        node_spans = [s for s in span_summaries(found) if s.service == node_service]
        assert node_spans, span_tree_summary(found)
        for span in node_spans:
            assert int(span.process_tags[NODE_ID_ATTRIBUTE]) == node_id, span
