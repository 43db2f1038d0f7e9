"""Spans of this process, kept in memory, for scenarios that check what a trace shows.

Installs an SDK tracer provider unless one is installed already, and adds an
in-memory exporter to it (once per process).
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["captured_spans", "install_span_capture"]

_exporter: InMemorySpanExporter | None = None


def install_span_capture() -> InMemorySpanExporter:
    global _exporter
    if _exporter is None:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        _exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
    return _exporter


def captured_spans(trace_id: str) -> list[ReadableSpan]:
    """Finished spans of the trace ``trace_id`` (32 hex digits)."""
    exporter = install_span_capture()
    return [
        s
        for s in exporter.get_finished_spans()
        if s.context is not None and format(s.context.trace_id, "032x") == trace_id
    ]
