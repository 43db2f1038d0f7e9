"""The node's OTLP span encoder gives the message the SDK's encoder gives, field for field.

Both encodings are parsed with the OTLP protobuf classes and compared whole: the same
spans, grouped the same way, with the same attributes, events, links, flags and status.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import (
    encode_spans as sdk_encode_spans,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from streamwal.node.otlp_encoding import FastOTLPSpanExporter, encode_spans
from streamwal.tools.stack import StackInfo
from streamwal.tools.stack.telemetry_query import find_traces, span_summaries


def _same(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    ours: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(encode_spans(spans))
    theirs = sdk_encode_spans(spans)
    assert ours == theirs, f"ours:\n{ours}\ntheirs:\n{theirs}"
    return ours


def _provider(
    resource: Resource, limits: SpanLimits | None = None
) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=resource, span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
def recorded() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider, exporter = _provider(
        Resource.create({"service.name": "streamwal-test", "streamwal.node.id": 3}),
        SpanLimits(max_span_attributes=12, max_events=3, max_links=2),
    )
    yield provider, exporter
    provider.shutdown()


def test_a_node_shaped_trace_encodes_as_the_sdk_does(
    recorded: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = recorded
    tracer = provider.get_tracer("streamwal.node", "1.2.3", schema_url="https://schema/1")
    plain = provider.get_tracer("plain")
    remote = propagate.extract(
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
         "tracestate": "vendor=a1,other=b2"}
    )  # fmt: skip
    with tracer.start_as_current_span(
        "/streamwal.node.v1.StreamingNode/Produce",
        context=remote,
        kind=SpanKind.SERVER,
        attributes={
            "rpc.system": "grpc", "rpc.method": "Produce", "rpc.grpc.status_code": 0,
            "net.peer.port": "57284", "streamwal.node.id": 3, "negative": -7,
            "ratio": 0.25, "minus_zero": -0.0, "flag": True, "names": ("a", "b"),
            "counts": (1, -2, 3), "empty": (), "floats": (1.5, float("inf")),
        },
    ) as server:  # fmt: skip
        for i in range(4):  # more events than the limit: the oldest are dropped, and counted
            server.add_event(f"extra-{i}")
        server.add_event("appended", {"time_tick": 465_000_000_000_000_000, "ok": False})
        server.add_event("bare")
        with plain.start_as_current_span("wal.append", kind=SpanKind.INTERNAL) as child:
            child.set_status(Status(StatusCode.ERROR, "fenced: another owner"))
            child.record_exception(ValueError("boom"))
        link = SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(1))
        local = SpanContext(3, 4, is_remote=False, trace_state=TraceState([("k", "v")]))
        with tracer.start_as_current_span(
            "linked",
            links=[Link(local), Link(link, {"why": "moved"}), Link(local)],  # first dropped
            kind=SpanKind.CLIENT,
        ) as linked:
            linked.set_status(Status(StatusCode.OK))
        for kind in (SpanKind.PRODUCER, SpanKind.CONSUMER):
            with tracer.start_as_current_span(f"kind-{kind.name}", kind=kind):
                pass
        for i in range(14):  # more attributes than the limit
            server.set_attribute(f"extra.{i}", i)
    spans = list(exporter.get_finished_spans())
    assert len(spans) == 5
    encoded = _same(spans)
    (resource_spans,) = encoded.resource_spans
    assert len(resource_spans.scope_spans) == 2  # the two tracers' scopes
    server_pb = next(
        s for ss in resource_spans.scope_spans for s in ss.spans if s.name.endswith("Produce")
    )
    assert server_pb.flags == 0x300  # the parent came from another process
    assert server_pb.trace_state == "vendor=a1,other=b2"
    assert server_pb.dropped_attributes_count > 0 and server_pb.dropped_events_count > 0
    linked_pb = next(s for ss in resource_spans.scope_spans for s in ss.spans if s.name == "linked")
    assert linked_pb.dropped_links_count == 1
    assert [link.flags for link in linked_pb.links] == [0x300, 0x100]


def test_spans_of_several_resources_and_equal_resources_group_as_the_sdk_does() -> None:
    made: list[ReadableSpan] = []
    a1 = Resource.create({"service.name": "a"})
    a2 = Resource.create({"service.name": "a"})  # equal to a1, another object
    b = Resource({"service.name": "b"}, schema_url="https://schema/r")
    providers = [_provider(r) for r in (a1, b, a2, b)]
    for round_ in range(2):
        for i, (provider, exporter) in enumerate(providers):
            tracer = provider.get_tracer(f"scope-{i % 2}", schema_url="https://schema/s")
            with tracer.start_as_current_span(f"span-{round_}-{i}"):
                pass
            made.extend(exporter.get_finished_spans())
            exporter.clear()
    for provider, _ in providers:
        provider.shutdown()
    encoded = _same(made)
    assert [len(rs.scope_spans) for rs in encoded.resource_spans] == [1, 1]
    assert _same([]) == ExportTraceServiceRequest()


def test_resources_and_scopes_equal_but_not_alike_stay_apart_as_in_the_sdk() -> None:
    """``1 == True == 1.0``, but a resource's hash (a JSON dump) tells them apart, and a
    scope's first-seen stand-in is per resource, as the SDK's nested dicts have it."""
    scope_int = InstrumentationScope("s", attributes={"k": 1})
    scope_bool = InstrumentationScope("s", attributes={"k": True})
    spans = [
        _bare_span({}, resource=Resource({"k": 1})),
        _bare_span({}, resource=Resource({"k": True})),
        _bare_span({}, resource=Resource({"k": 1.0})),
        _bare_span({}, resource=Resource({"r": "a"}), instrumentation_scope=scope_int),
        _bare_span({}, resource=Resource({"r": "b"}), instrumentation_scope=scope_bool),
        _bare_span({}, resource=Resource({"r": "b"}), instrumentation_scope=scope_int),
    ]
    encoded = _same(spans)
    assert len(encoded.resource_spans) == 5


def _bare_span(attributes: dict[str, Any], **fields: Any) -> ReadableSpan:
    context = SpanContext(0x1234, 0x5678, is_remote=False)
    return ReadableSpan(
        name=fields.pop("name", "bare"),
        context=context,
        attributes=attributes,
        start_time=fields.pop("start_time", 1),
        end_time=fields.pop("end_time", 2),
        resource=fields.pop("resource", Resource.get_empty()),
        **fields,
    )


def test_an_attribute_shared_by_the_resource_a_span_an_event_and_a_link() -> None:
    """The same key and value in each place is each place's field (the cache keeps them
    apart)."""
    shared: dict[str, str | int] = {"streamwal.node.id": 3, "channel": "c1"}
    provider, exporter = _provider(Resource.create(shared))
    tracer = provider.get_tracer("t", attributes=shared)
    link = Link(SpanContext(1, 2, is_remote=True), shared)
    with tracer.start_as_current_span("s", attributes=shared, links=[link]) as span:
        span.add_event("e", shared)
    provider.shutdown()
    encoded = _same(list(exporter.get_finished_spans()))
    resource_spans = encoded.resource_spans[0]
    assert {kv.key for kv in resource_spans.resource.attributes} >= set(shared)
    (span_pb,) = resource_spans.scope_spans[0].spans
    for kvs in (span_pb.attributes, span_pb.events[0].attributes, span_pb.links[0].attributes):
        assert [kv.key for kv in kvs] == list(shared)


def test_values_the_sdk_cannot_encode_are_left_out_as_it_leaves_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    attributes = {"big": 1 << 70, "odd": object(), "fine": "yes", "nested": {"k": [1, None]}}
    with caplog.at_level(logging.ERROR):
        encoded = _same([_bare_span(attributes)])
    (span,) = encoded.resource_spans[0].scope_spans[0].spans
    assert [kv.key for kv in span.attributes] == ["fine", "nested"]
    assert sum("Failed to encode key big" in r.getMessage() for r in caplog.records) == 2


def test_a_span_with_nothing_optional() -> None:
    scope = InstrumentationScope("", None)
    _same([_bare_span({}, name="", start_time=None, end_time=None, instrumentation_scope=scope)])
    _same([_bare_span({}, status=None)])


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=10),
    lambda inner: st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    attributes=st.lists(st.dictionaries(st.text(max_size=12), _values, max_size=6), max_size=4),
    events=st.lists(st.tuples(st.text(max_size=8), st.integers(0, 1 << 63)), max_size=3),
)
def test_any_attributes_encode_as_the_sdk_encodes_them(
    attributes: list[dict[str, Any]], events: list[tuple[str, int]]
) -> None:
    from opentelemetry.sdk.trace import Event

    spans = [
        _bare_span(attrs, events=[Event(name, {"n": i}, timestamp=ts) for name, ts in events])
        for i, attrs in enumerate(attributes)
    ]
    # an attribute repeated across spans (and runs) comes from the cache: still the same
    _same(spans + spans)


def test_a_float_attribute_keeps_its_sign_and_value() -> None:
    encoded = _same([_bare_span({"z": 0.0}), _bare_span({"z": -0.0}), _bare_span({"z": 1e300})])
    spans = encoded.resource_spans[0].scope_spans[0].spans
    values = [s.attributes[0].value.double_value for s in spans]
    assert [math.copysign(1, v) for v in values] == [1, -1, 1] and values[2] == 1e300


def test_the_exporter_hands_grpc_the_message_the_sdk_would(
    recorded: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = recorded
    with provider.get_tracer("t").start_as_current_span("one", attributes={"a": 1}):
        pass
    spans = list(exporter.get_finished_spans())
    fast = FastOTLPSpanExporter(endpoint="http://127.0.0.1:1", insecure=True)
    try:
        request = fast._translate_data(spans)
    finally:
        fast.shutdown()
    assert isinstance(request, ExportTraceServiceRequest)
    assert request == sdk_encode_spans(spans)
    assert trace.get_tracer_provider() is not provider  # nothing global was touched


@pytest.mark.integration
async def test_spans_exported_through_it_arrive_in_jaeger_whole(telemetry_stack: StackInfo) -> None:
    assert telemetry_stack.otlp_endpoint and telemetry_stack.jaeger_url
    service = f"streamwal-test-fast-{uuid.uuid4().hex[:10]}"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(
        BatchSpanProcessor(FastOTLPSpanExporter(endpoint=telemetry_stack.otlp_endpoint))
    )
    tracer = provider.get_tracer(__name__)
    try:
        with tracer.start_as_current_span("fast.parent", kind=SpanKind.SERVER) as parent:
            parent.set_attribute("streamwal.node.id", 7)
            parent.set_attribute("names", ("a", "b"))
            with tracer.start_as_current_span("fast.child") as child:
                child.add_event("appended", {"offset": 7})
                child.set_status(Status(StatusCode.ERROR, "fenced"))
        assert provider.force_flush(timeout_millis=10_000)
    finally:
        provider.shutdown()
    traces = await find_traces(telemetry_stack.jaeger_url, service, min_spans=2, timeout=30.0)
    assert len(traces) == 1, traces
    spans = {span.operation: span for span in span_summaries(traces[0])}
    assert set(spans) == {"fast.parent", "fast.child"}
    parent_span, child_span = spans["fast.parent"], spans["fast.child"]
    assert parent_span.tags["streamwal.node.id"] == 7
    assert parent_span.tags["span.kind"] == "server"
    assert child_span.parent_id == parent_span.span_id
    assert child_span.tags["otel.status_code"] == "ERROR"
    assert [(log.event, log.fields.get("offset")) for log in child_span.logs] == [("appended", 7)]
