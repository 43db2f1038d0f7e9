"""A client's call and the node's work share one trace (context over gRPC)."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from node.client import NodeClient
from node.stack import StackInfo
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration


async def test_client_trace_context_reaches_the_node(
    stack: StackInfo, tmp_path: Path, unique: str
) -> None:
    node = NodeProcess(
        tmp_path,
        1,
        {
            "pulsar": {"service_url": stack.pulsar_url},
            "etcd": {"endpoints": [stack.etcd_endpoint]},
            "tso": {"key_prefix": f"/prop-{unique}"},
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
