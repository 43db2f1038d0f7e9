"""Span capture keeps the spans of its block only (issue 26: an exporter left on the
global provider kept every span of the rest of the test session)."""

from __future__ import annotations

import gc
import weakref

from opentelemetry import trace

from streamwal_lab.chaos.spans import capture_spans


def _span(name: str) -> None:
    with trace.get_tracer(__name__).start_as_current_span(name):
        pass


def test_only_spans_ended_inside_the_block_are_kept() -> None:
    _span("before")
    with capture_spans() as capture:
        _span("inside")
    _span("after")
    assert [s.name for s in capture.get_finished_spans()] == ["inside"]


def test_a_span_ended_outside_any_capture_is_not_held_by_anything() -> None:
    with capture_spans():
        pass
    span = trace.get_tracer(__name__).start_span("nobody looks")
    span.end()
    ref = weakref.ref(span)
    del span
    gc.collect()
    assert ref() is None


def test_a_capture_keeps_at_most_its_limit_newest_last() -> None:
    with capture_spans(limit=10) as capture:
        for i in range(100):
            _span(f"s{i}")
    assert [s.name for s in capture.get_finished_spans()] == [f"s{i}" for i in range(90, 100)]


def test_captures_open_at_once_each_see_their_own_window_and_a_trace_by_id() -> None:
    with capture_spans() as outer:
        _span("first")
        with (
            capture_spans() as inner,
            trace.get_tracer(__name__).start_as_current_span("second") as span,
        ):
            trace_id = format(span.get_span_context().trace_id, "032x")
    assert [s.name for s in outer.get_finished_spans()] == ["first", "second"]
    assert [s.name for s in inner.spans_of(trace_id)] == ["second"]
    assert outer.spans_of("0" * 32) == []
