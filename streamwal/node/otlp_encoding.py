"""Finished spans to OTLP protobuf bytes, written directly, for the node's span exporter.

The OpenTelemetry exporter builds a protobuf object for every span, attribute and
value, then serialises the tree: measured on a node answering unary appends, that was
the largest part of what tracing cost (more than making the spans), on the exporter's
thread but under the same GIL as the event loop. This writes the same message's wire
format straight from the finished spans. What repeats from span to span (the resource,
the instrumentation scope, attributes such as the method, the peer or the node id) is
encoded once and reused.

The message is the one ``opentelemetry-exporter-otlp-proto-common`` makes, field for
field (``tests/node/test_otlp_encoding.py`` parses both and compares them): the same
grouping by resource then scope in first-seen order, the same span flags, an empty
status when the status is unset, an attribute that cannot be encoded left out with a
log line. :class:`FastOTLPSpanExporter` is the SDK's OTLP/gRPC exporter (endpoint, TLS,
headers, retries and its environment variables unchanged) with this as its encoder.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind

__all__ = ["FastOTLPSpanExporter", "encode_spans"]

_log = logging.getLogger(__name__)

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_PACK_DOUBLE = struct.Struct("<d").pack
_PACK_FIXED64 = struct.Struct("<Q").pack
_PACK_FIXED32 = struct.Struct("<I").pack

# Span.SpanKind of the proto (SPAN_KIND_INTERNAL = 1, ...)
_KINDS = {
    SpanKind.INTERNAL: 1,
    SpanKind.SERVER: 2,
    SpanKind.CLIENT: 3,
    SpanKind.PRODUCER: 4,
    SpanKind.CONSUMER: 5,
}
# SpanFlags: the context's "is remote" bit is known (0x100); it is set (0x200)
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200

# an attribute's bytes for the values that repeat; bounded, emptied when full
_CACHE_LIMIT = 8192
_kv_cache: dict[tuple[int, str, type, object], bytes] = {}  # (field number, key, type, value)
# the encoded resources and scopes, by identity (the entry keeps its object, so its id
# is not reused while cached): few, long-lived objects, whose hash is costly (the
# resource's is a JSON dump of its attributes)
_resource_cache: dict[int, tuple[Any, bytes]] = {}
_scope_cache: dict[int, tuple[Any, bytes]] = {}
_EMPTY_SCOPE = b"\x0a\x00"  # a present, empty InstrumentationScope (field 1)


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 on the wire: two's complement, ten bytes
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    """An ``AnyValue``'s body; raises for a type OTLP has no value for."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(1, value.encode())
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"{value} does not fit an int64")
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _PACK_DOUBLE(value)
    if isinstance(value, bytes):
        return _field(7, value)
    if isinstance(value, Sequence):
        return _field(5, b"".join(_field(1, _any_value(v)) for v in value))
    if isinstance(value, Mapping):
        return _field(6, b"".join(_field(1, _key_value(str(k), v)) for k, v in value.items()))
    raise TypeError(f"Invalid type {type(value)} of value {value}")


def _key_value(key: str, value: Any) -> bytes:
    """A ``KeyValue``'s body."""
    return _field(1, key.encode()) + _field(2, _any_value(value))


def _attributes(number: int, attributes: Mapping[str, Any] | None) -> bytes:
    """Every attribute as a repeated ``KeyValue`` field ``number``."""
    if not attributes:
        return b""
    parts = []
    for key, value in attributes.items():
        kind = type(value)
        cacheable = kind is str or kind is int or kind is bool or kind is bytes
        if cacheable:
            cached = _kv_cache.get((number, key, kind, value))
            if cached is not None:
                parts.append(cached)
                continue
        try:
            encoded = _field(number, _key_value(key, value))
        except Exception as exc:  # as the SDK's encoder: the attribute is left out
            _log.exception("Failed to encode key %s: %s", key, exc)
            continue
        if cacheable:
            if len(_kv_cache) >= _CACHE_LIMIT:
                _kv_cache.clear()
            _kv_cache[(number, key, kind, value)] = encoded
        parts.append(encoded)
    return b"".join(parts)


def _flags(context: SpanContext | None) -> int:
    return _HAS_IS_REMOTE | (_IS_REMOTE if context is not None and context.is_remote else 0)


def _by_identity(
    cache: dict[int, tuple[Any, bytes]], limit: int, obj: Any, encode: Callable[[Any], bytes]
) -> bytes:
    """``encode(obj)``, once per object while it stays in ``cache`` (see the caches)."""
    entry = cache.get(id(obj))
    if entry is None or entry[0] is not obj:
        if len(cache) >= limit:
            cache.clear()
        entry = cache[id(obj)] = (obj, encode(obj))
    return entry[1]


def _encode_resource(resource: Resource) -> bytes:
    return _field(1, _attributes(1, resource.attributes))


def _encode_scope(scope: InstrumentationScope) -> bytes:
    body = b""
    if scope.name:
        body += _field(1, scope.name.encode())
    if scope.version:
        body += _field(2, scope.version.encode())
    return _field(1, body + _attributes(3, scope.attributes))


def _resource(resource: Resource) -> bytes:
    return _by_identity(_resource_cache, 64, resource, _encode_resource)


def _scope(scope: InstrumentationScope | None) -> bytes:
    if scope is None:
        return _EMPTY_SCOPE
    return _by_identity(_scope_cache, 256, scope, _encode_scope)


def _span(span: ReadableSpan) -> bytes:
    context = span.get_span_context()
    assert context is not None  # a finished SDK span always has one
    parts = [
        b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + context.span_id.to_bytes(8, "big"),
    ]
    if context.trace_state:
        state = ",".join(f"{key}={value}" for key, value in context.trace_state.items())
        parts.append(_field(3, state.encode()))
    parent = span.parent
    if parent:
        parts.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    if span.name:
        parts.append(_field(5, span.name.encode()))
    kind = _KINDS[span.kind]
    parts.append(b"\x30" + _varint(kind))
    if span.start_time:
        parts.append(b"\x39" + _PACK_FIXED64(span.start_time))
    if span.end_time:
        parts.append(b"\x41" + _PACK_FIXED64(span.end_time))
    parts.append(_attributes(9, span.attributes))
    if span.dropped_attributes:
        parts.append(b"\x50" + _varint(span.dropped_attributes))
    for event in span.events:
        body = b""
        if event.timestamp:
            body += b"\x09" + _PACK_FIXED64(event.timestamp)
        if event.name:
            body += _field(2, event.name.encode())
        body += _attributes(3, event.attributes)
        if event.dropped_attributes:
            body += b"\x20" + _varint(event.dropped_attributes)
        parts.append(_field(11, body))
    if span.dropped_events:
        parts.append(b"\x60" + _varint(span.dropped_events))
    for link in span.links:
        body = (
            b"\x0a\x10"
            + link.context.trace_id.to_bytes(16, "big")
            + b"\x12\x08"
            + link.context.span_id.to_bytes(8, "big")
            + _attributes(4, link.attributes)
        )
        if link.dropped_attributes:
            body += b"\x28" + _varint(link.dropped_attributes)
        body += b"\x35" + _PACK_FIXED32(_flags(link.context))
        parts.append(_field(13, body))
    if span.dropped_links:
        parts.append(b"\x70" + _varint(span.dropped_links))
    status = span.status
    if status is not None:
        body = b""
        if status.description:
            body += _field(2, status.description.encode())
        if status.status_code.value:
            body += b"\x18" + _varint(status.status_code.value)
        parts.append(_field(15, body))
    parts.append(b"\x85\x01" + _PACK_FIXED32(_flags(parent)))  # field 16, fixed32
    return b"".join(parts)


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """The serialised ``ExportTraceServiceRequest`` of ``spans``."""
    # Grouped as the SDK's encoder groups them: by resource (a dict: its hash, then
    # equality; the first one seen stands for its group), then, within each, by scope.
    # A resource's hash is a JSON dump of its attributes, so it is taken once per
    # object of the batch, not once per span (the spans keep those objects alive, so
    # their ids are theirs for this call).
    canonical: dict[Resource, Resource] = {}
    by_id: dict[int, Resource] = {}
    grouped: dict[int, tuple[Resource, dict[InstrumentationScope | None, list[bytes]]]] = {}
    for span in spans:
        resource = by_id.get(id(span.resource))
        if resource is None:
            resource = by_id[id(span.resource)] = canonical.setdefault(
                span.resource, span.resource
            )
        _, scopes = grouped.setdefault(id(resource), (resource, {}))
        scopes.setdefault(span.instrumentation_scope or None, []).append(_field(2, _span(span)))
    out = []
    for resource, scopes in grouped.values():
        body = [_resource(resource)]
        for scope, encoded in scopes.items():
            scope_body = _scope(scope) + b"".join(encoded)
            if scope is not None and scope.schema_url:
                scope_body += _field(3, scope.schema_url.encode())
            body.append(_field(2, scope_body))
        if resource.schema_url:
            body.append(_field(3, resource.schema_url.encode()))
        out.append(_field(1, b"".join(body)))
    return b"".join(out)


class FastOTLPSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/gRPC span exporter, encoding with :func:`encode_spans`.

    The request handed to the gRPC stub is still the protobuf message (parsed from the
    bytes by the protobuf runtime's C code, a small part of building it in Python), so
    nothing else of the exporter changes.
    """

    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(
            encode_spans(data)
        )
        return request
