"""The spans one module of the product makes, kept in memory for a test."""

from __future__ import annotations

from types import ModuleType

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["capture_module_spans"]


def capture_module_spans(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType
) -> tuple[TracerProvider, InMemorySpanExporter]:
    """``module``'s ``_tracer`` now makes its spans with a provider of its own, which
    keeps them in the exporter returned (the process's global provider is left alone:
    it can be set once only)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(module, "_tracer", provider.get_tracer("test"))
    return provider, exporter
