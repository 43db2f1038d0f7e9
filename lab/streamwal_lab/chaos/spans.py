"""Spans of this process, kept in memory while a scenario (or a test) looks at them.

``with capture_spans() as capture:`` records the spans that end inside the block, at
most ``limit`` of them (the oldest go first), and nothing once the block is left.

Why not an exporter added for good: the SDK cannot remove a span processor, and an
in-memory exporter left on the global provider keeps every span the process ends from
then on: a test session that ran one scenario needing spans would keep every append
of every later test (how much memory that takes: docs/testing.md). So one
processor is installed once per process, and it hands spans only to the captures
open at that moment: none open, nothing is kept.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

__all__ = ["DEFAULT_LIMIT", "SpanCapture", "capture_spans"]

#: spans one capture keeps at most: a scenario's traces of interest end within
#: seconds of being looked at, and a few thousand spans are a few MB
DEFAULT_LIMIT = 20_000


class SpanCapture:
    """The spans ended while this capture was open, newest last, at most ``limit``."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._spans: deque[ReadableSpan] = deque(maxlen=limit)

    def add(self, span: ReadableSpan) -> None:
        self._spans.append(span)  # deque.append is atomic: no lock for the SDK's threads

    def get_finished_spans(self) -> list[ReadableSpan]:
        return list(self._spans)

    def spans_of(self, trace_id: str) -> list[ReadableSpan]:
        """The finished spans of the trace ``trace_id`` (32 hex digits)."""
        return [
            s
            for s in list(self._spans)
            if s.context is not None and format(s.context.trace_id, "032x") == trace_id
        ]

    def clear(self) -> None:
        self._spans.clear()


class _Dispatch(SpanProcessor):
    """Hands each ended span to the captures open right now; keeps nothing itself."""

    def __init__(self) -> None:
        self.captures: tuple[SpanCapture, ...] = ()  # replaced whole: readers need no lock

    def on_end(self, span: ReadableSpan) -> None:
        for capture in self.captures:
            capture.add(span)


_lock = threading.Lock()
_dispatch: _Dispatch | None = None


def _installed() -> _Dispatch:
    """The process's one dispatching processor, on the global SDK provider (installed
    here unless the process has one already)."""
    global _dispatch
    with _lock:
        if _dispatch is None:
            provider = trace.get_tracer_provider()
            if not isinstance(provider, TracerProvider):
                provider = TracerProvider()
                trace.set_tracer_provider(provider)
            _dispatch = _Dispatch()
            provider.add_span_processor(_dispatch)
        return _dispatch


@contextmanager
def capture_spans(limit: int = DEFAULT_LIMIT) -> Iterator[SpanCapture]:
    """Record the spans that end inside the block (see the module docstring)."""
    dispatch = _installed()
    capture = SpanCapture(limit)
    with _lock:
        dispatch.captures = (*dispatch.captures, capture)
    try:
        yield capture
    finally:
        with _lock:
            dispatch.captures = tuple(c for c in dispatch.captures if c is not capture)
