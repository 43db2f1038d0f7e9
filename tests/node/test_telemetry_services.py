"""The telemetry half of the local stack: a real collector in front of a real Jaeger.

Spans exported by the OpenTelemetry SDK to the collector must come out of Jaeger's
query API with their names, attributes, events and parent links intact.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from streamwal.node.trace.query import find_traces, span_tree_summary, spans_by_operation
from streamwal_lab.stack import Stack, StackInfo
from streamwal_lab.stack.collector import CollectorService, collector_config_path
from streamwal_lab.stack.jaeger import JaegerService
from streamwal_lab.stack.paths import StackPaths

pytestmark = pytest.mark.integration


def _paths() -> StackPaths:
    return StackPaths.default()


def _progress(message: str) -> None:
    print(f"  {message}", flush=True)


@pytest.fixture
def telemetry(
    telemetry_stack: StackInfo, local_stack: Stack
) -> tuple[JaegerService, CollectorService]:
    """The stack's own Jaeger and collector, started once for the session."""
    jaeger = local_stack.services["jaeger"]
    collector = local_stack.services["otel-collector"]
    assert isinstance(jaeger, JaegerService) and isinstance(collector, CollectorService)
    return jaeger, collector


def test_built_collector_validates_the_repository_config() -> None:
    collector = CollectorService(_paths())
    collector.install(_progress)
    result = subprocess.run(
        [str(collector.binary), "validate", "--config", str(collector_config_path())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_built_collector_rejects_an_unknown_component(tmp_path: Path) -> None:
    collector = CollectorService(_paths())
    collector.install(_progress)
    broken = tmp_path / "broken.yaml"
    config = collector_config_path().read_text()
    traces_exporters = "exporters: [otlp_grpc/jaeger, debug]"
    assert traces_exporters in config
    broken.write_text(config.replace(traces_exporters, "exporters: [no_such_exporter, debug]"))
    result = subprocess.run(
        [str(collector.binary), "validate", "--config", str(broken)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "no_such_exporter" in result.stdout + result.stderr


async def test_span_exported_to_collector_arrives_in_jaeger(
    telemetry: tuple[JaegerService, CollectorService],
) -> None:
    jaeger, collector = telemetry
    service_name = f"streamwal-test-{uuid.uuid4().hex[:10]}"
    marker = uuid.uuid4().hex
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=collector.otlp_endpoint, insecure=True))
    )
    tracer = provider.get_tracer(__name__)
    try:
        with tracer.start_as_current_span("e2e.parent") as parent:
            parent.set_attribute("streamwal.test.marker", marker)
            with tracer.start_as_current_span("e2e.child") as child:
                child.set_attribute("streamwal.test.count", 3)
                child.add_event("appended", {"offset": 7})
        assert provider.force_flush(timeout_millis=10_000)
    finally:
        provider.shutdown()

    traces = await find_traces(jaeger.url, service_name, min_spans=2, timeout=30.0)

    assert len(traces) == 1, traces
    spans = spans_by_operation(traces[0])
    assert set(spans) == {"e2e.parent", "e2e.child"}, span_tree_summary(traces[0])
    (parent_span,) = spans["e2e.parent"]
    (child_span,) = spans["e2e.child"]
    assert parent_span.service == service_name
    assert parent_span.tags["streamwal.test.marker"] == marker
    assert child_span.tags["streamwal.test.count"] == 3
    assert child_span.parent_id == parent_span.span_id
    assert [(log.event, log.fields.get("offset")) for log in child_span.logs] == [("appended", 7)]
    tree = span_tree_summary(traces[0]).splitlines()
    assert tree[0].startswith(f"{service_name}: e2e.parent")
    assert tree[1].startswith(f"  {service_name}: e2e.child")


async def test_find_traces_returns_nothing_for_an_unseen_service(
    telemetry: tuple[JaegerService, CollectorService],
) -> None:
    jaeger, _ = telemetry
    unseen = f"streamwal-unseen-{uuid.uuid4().hex[:10]}"
    assert await find_traces(jaeger.url, unseen, timeout=1.0) == []
