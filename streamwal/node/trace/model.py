"""One trace from Jaeger, arranged as a tree a person reads top to bottom.

Jaeger's JSON gives spans in no useful order, with the node a span ran on in two
places (the span's ``streamwal.node.id``, the process resource).
:func:`trace_view` puts the spans in tree order (each parent before its children,
siblings by start time), settles each span's node, status and exception messages,
and keeps every attribute: the ones a reader follows an open or a move by under short
names first, then the rest under their own (only Jaeger's and OpenTelemetry's
bookkeeping tags, which the status and kind columns already show, are left out).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import grpc

from streamwal.node.trace.query import SpanSummary, Trace, span_summaries

__all__ = [
    "KEY_ATTRIBUTES",
    "TraceSpan",
    "TraceView",
    "attributes_of",
    "error_messages",
    "span_status",
    "trace_view",
]

#: span attribute -> the short name the waterfall and ``--json`` use, in display order
KEY_ATTRIBUTES: Mapping[str, str] = {
    "wal.channel": "channel",
    "streamwal.channel": "channel",
    "streamwal.cluster.reason": "reason",
    "streamwal.cluster.from": "from",
    "streamwal.cluster.to": "to",
    "streamwal.cluster.term": "term",
    "wal.attempt": "attempt",
    "wal.backoff_ms": "backoff_ms",
    "wal.attempts": "attempts",
    "wal.time_tick": "time_tick",
    "wal.first_time_tick": "first_time_tick",
    "wal.message_id": "message_id",
}

_GRPC_STATUS = "rpc.grpc.status_code"
_GRPC_ABORT = "AbortError"
#: gRPC status numbers -> names; OK (0) is no error
_GRPC_CODES = {code.value[0]: code.name for code in grpc.StatusCode if code.value[0] != 0}

#: where a span's node is written (the span's tags first, then its process's)
_NODE_TAGS = ("streamwal.node.id",)
#: tags the columns already show, or Jaeger's own bookkeeping
_SHOWN_ELSEWHERE = frozenset(
    {
        "span.kind",
        "otel.status_code",
        "otel.status_description",
        "error",
        "internal.span.format",
        "otel.scope.name",
        "otel.scope.version",
        "otel.library.name",
        "otel.library.version",
    }
)


@dataclass(frozen=True)
class TraceSpan:
    """One span as the waterfall shows it; times in microseconds from the trace start.

    ``node`` is ``None`` for a span no node ran (a client's own span); ``status`` is
    ``ok``, ``error`` or ``unset`` (OpenTelemetry's default, shown as ``-``).
    """

    span_id: str
    parent_id: str | None
    depth: int
    service: str
    node: str | None
    operation: str
    kind: str
    offset_us: int
    duration_us: int
    status: str
    errors: tuple[str, ...]
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Every field (times in µs), plus the times in ms a person reads."""
        return {
            **asdict(self),
            "errors": list(self.errors),
            "start_offset_ms": self.offset_us / 1000,
            "duration_ms": self.duration_us / 1000,
        }


@dataclass(frozen=True)
class TraceView:
    """A trace in tree order: ``start_us`` is µs since the epoch, the rest relative."""

    trace_id: str
    start_us: int
    duration_us: int
    spans: tuple[TraceSpan, ...]

    def to_json(self) -> dict[str, Any]:
        """The trace's times as its spans give theirs: in µs, and the duration in ms too."""
        return {
            "trace_id": self.trace_id,
            "start_us": self.start_us,
            "duration_us": self.duration_us,
            "duration_ms": self.duration_us / 1000,
            "spans": [s.to_json() for s in self.spans],
        }


def trace_view(trace: Trace) -> TraceView:
    """The tree of one Jaeger trace (an element of ``/api/traces``' ``data``).

    A span whose parent Jaeger does not hold is shown as a root; spans that are their
    own ancestors (a malformed trace) are shown once each, from the first of them.
    """
    spans = span_summaries(trace)
    if not spans:
        return TraceView(str(trace.get("traceID", "")), 0, 0, ())
    start = min(s.start_us for s in spans)
    end = max(s.start_us + s.duration_us for s in spans)
    ids = {s.span_id for s in spans}
    children: dict[str | None, list[SpanSummary]] = {}
    for span in spans:  # already by start time
        children.setdefault(span.parent_id if span.parent_id in ids else None, []).append(span)
    out: list[TraceSpan] = []
    seen: set[str] = set()

    def walk(parent: str | None, depth: int, inherited: str | None) -> None:
        for span in children.get(parent, []):
            if span.span_id in seen:
                continue
            seen.add(span.span_id)
            node = _node(span, inherited)
            out.append(_view(span, depth, node, start))
            walk(span.span_id, depth + 1, node)

    walk(None, 0, None)
    for span in spans:  # spans in a parent cycle: no root leads to them
        if span.span_id not in seen:
            seen.add(span.span_id)
            node = _node(span, None)
            out.append(_view(span, 0, node, start))
            walk(span.span_id, 1, node)
    return TraceView(str(trace.get("traceID", "")), start, end - start, tuple(out))


def _node(span: SpanSummary, inherited: str | None) -> str | None:
    for source in (span.tags, span.process_tags):
        for key in _NODE_TAGS:
            if key in source:
                return str(source[key])
    # a server span starts another process's part of the trace: its parent's node
    # says nothing about where it ran
    return None if span.tags.get("span.kind") == "server" else inherited


def _view(span: SpanSummary, depth: int, node: str | None, start: int) -> TraceSpan:
    return TraceSpan(
        span_id=span.span_id,
        parent_id=span.parent_id,
        depth=depth,
        service=span.service,
        node=node,
        operation=span.operation,
        kind=str(span.tags.get("span.kind", "internal")),
        offset_us=span.start_us - start,
        duration_us=span.duration_us,
        status=span_status(span),
        errors=error_messages(span),
        attributes=attributes_of(span),
    )


def attributes_of(span: SpanSummary) -> dict[str, Any]:
    """Every attribute of ``span``: the key ones by short name, in display order, then
    the others by full name, sorted."""
    found = {
        short: _plain(short, span.tags[key])
        for key, short in KEY_ATTRIBUTES.items()
        if key in span.tags
    }
    for key in sorted(span.tags):
        if key not in KEY_ATTRIBUTES and key not in _SHOWN_ELSEWHERE:
            found[key] = _plain(key, span.tags[key])
    return found


def span_status(span: SpanSummary) -> str:
    """``error``, ``ok`` or ``unset`` from the OpenTelemetry status Jaeger keeps as tags."""
    code = str(span.tags.get("otel.status_code", "")).upper()
    if code == "ERROR" or span.tags.get("error") is True:
        return "error"
    return "ok" if code == "OK" else "unset"


def error_messages(span: SpanSummary) -> tuple[str, ...]:
    """Each recorded exception as ``Type: message``; without one, the error status's
    description, led by the gRPC status a call ended with.

    gRPC's ``AbortError`` is left out: it is how a handler ends a call with a status,
    and says nothing the status does not.
    """
    found = []
    for log in span.logs:
        if log.event != "exception":
            continue
        kind = str(log.fields.get("exception.type", "")).rsplit(".", 1)[-1]
        if kind == _GRPC_ABORT:
            continue
        message = str(log.fields.get("exception.message", ""))
        found.append(f"{kind}: {message}" if kind and message else kind or message)
    if found:
        return tuple(found)
    description = span.tags.get("otel.status_description") if span_status(span) == "error" else None
    code = _GRPC_CODES.get(_int(span.tags.get(_GRPC_STATUS)))
    if description:
        return (f"{code}: {description}" if code else str(description),)
    return (f"gRPC {code}",) if code else ()


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _plain(name: str, value: Any) -> Any:
    """Jaeger sends large integers as text: give them back as numbers."""
    if name in {"channel", "message_id", "reason"} or "." in name:
        return str(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
