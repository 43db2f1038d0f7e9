"""Traces really reach Jaeger, through the collector, attempt by attempt.

A node process reaches the broker through a fault proxy that refuses connections
at first, so opening a channel needs several first-time-tick attempts. The node
exports OTLP to the stack's collector, which forwards to Jaeger; the test reads
the trace back from Jaeger's HTTP API.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from streamwal.node.client import NodeClient
from streamwal.node.trace.query import find_traces, span_summaries
from streamwal_lab.faultproxy import FaultProxy
from streamwal_lab.stack import StackInfo
from tests.node.processes import NodeProcess

pytestmark = pytest.mark.integration


async def test_open_trace_shows_every_attempt(
    telemetry_stack: StackInfo, tmp_path: Path, unique: str, etcd_prefix: Callable[[str], str]
) -> None:
    info = telemetry_stack
    assert info.otlp_endpoint and info.jaeger_url
    service = f"streamwal-trace-test-{unique}"
    broker_port = int(info.pulsar_url.rsplit(":", 1)[1])
    async with FaultProxy(broker_port) as proxy:
        node = NodeProcess(
            tmp_path,
            1,
            {
                "pulsar": {
                    "service_url": f"pulsar://{proxy.url_host}",
                    "operation_timeout_s": 1,
                },
                "etcd": {"endpoints": [info.etcd_endpoint]},
                "tso": {"key_prefix": etcd_prefix("trace")},
                "telemetry": {"service_name": service, "otlp_endpoint": info.otlp_endpoint},
            },
        )
        await node.start()
        try:
            proxy.set_mode("refuse")
            async with NodeClient(node.address) as client:
                assign = asyncio.create_task(client.assign(f"traced-{unique}"))
                # longer than the client's operation timeout: attempts fail, then succeed
                await asyncio.sleep(4.0)
                assert not assign.done()
                proxy.set_mode("pass")
                opened = await asyncio.wait_for(assign, 60)
        finally:
            assert await node.terminate() == 0  # flushes the exporter
    assert opened.attempts >= 2
    traces = await find_traces(
        info.jaeger_url,
        service,
        operation="wal.first_time_tick.attempt",
        min_spans=opened.attempts,
        timeout=60,
    )
    trace = next(t for t in traces if t["traceID"] == opened.trace_id)
    spans = span_summaries(trace)
    opens = [s for s in spans if s.operation == "wal.open"]
    assert len(opens) == 1
    wal_open = opens[0]
    assert wal_open.tags["wal.channel"] == f"traced-{unique}"
    assert wal_open.tags["wal.attempts"] == opened.attempts
    attempts = sorted(
        (s for s in spans if s.operation == "wal.first_time_tick.attempt"),
        key=lambda s: s.tags["wal.attempt"],
    )
    assert len(attempts) == opened.attempts
    assert all(s.parent_id == wal_open.span_id for s in attempts)
    *failed, succeeded = attempts
    for span in failed:
        assert span.tags.get("error") is True or span.tags.get("otel.status_code") == "ERROR"
        assert any(log.event == "exception" for log in span.logs), span
    assert succeeded.tags.get("error") is not True
    assert int(succeeded.tags["wal.time_tick"]) == opened.first_time_tick  # JSON: as text
    assert succeeded.tags["wal.message_id"] == opened.first_message_id_text
    backoffs = [s.tags["wal.backoff_ms"] for s in attempts]
    assert backoffs[0] == 0 and backoffs == sorted(backoffs)
