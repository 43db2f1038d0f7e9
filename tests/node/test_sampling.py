"""Sampling by the OpenTelemetry standard, with a channel's lifecycle always kept.

Unit tests of the configuration and of the sampler's decisions; the integration
tests (test_demo.py, trace/test_trace_cli.py, test_jaeger_ui.py) show the kept spans
arriving in Jaeger at the default ratio.
"""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from streamwal.errors import ConfigError
from streamwal.node.config import TracingSettings, load_config
from streamwal.node.telemetry import sampler_of
from streamwal.node.tracing import (
    DEFAULT_RATIO,
    DEFAULT_SAMPLER,
    LIFECYCLE_ATTRIBUTE,
    base_sampler,
    samples_every_root,
)


def test_the_default_samples_one_root_trace_in_a_hundred() -> None:
    tracing = load_config(environ={}).tracing
    assert (tracing.sampler, tracing.ratio) == (DEFAULT_SAMPLER, DEFAULT_RATIO)
    assert (DEFAULT_SAMPLER, DEFAULT_RATIO) == ("parentbased_traceidratio", 0.01)


def test_the_standard_variables_win_over_the_file_and_its_overrides() -> None:
    environ = {
        "STREAMWAL_TRACING__SAMPLER": "traceidratio",
        "STREAMWAL_TRACING__RATIO": "0.5",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
    }
    assert load_config(environ=environ).tracing == TracingSettings("parentbased_always_on", 0.5)
    environ["OTEL_TRACES_SAMPLER_ARG"] = "0.25"
    assert load_config(environ=environ).tracing.ratio == 0.25


@pytest.mark.parametrize(
    ("variable", "value"),
    [("OTEL_TRACES_SAMPLER", "jaeger_remote"), ("OTEL_TRACES_SAMPLER_ARG", "a lot"),
     ("OTEL_TRACES_SAMPLER_ARG", "2")],
)  # fmt: skip
def test_a_bad_standard_variable_is_named(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={variable: value})
    assert caught.value.key == variable


def _provider(settings: TracingSettings) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler_of(settings))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_lifecycle_spans_are_kept_whatever_the_ratio_and_appends_are_not() -> None:
    provider, exporter = _provider(TracingSettings(ratio=0.0))
    tracer = provider.get_tracer("test")
    for _ in range(50):
        with tracer.start_as_current_span("/streamwal.v1.StreamingNode/Produce"):
            pass
    with (
        tracer.start_as_current_span("/streamwal.v1.StreamingNode/AssignChannel"),
        tracer.start_as_current_span("wal.open"),
    ):
        for _ in range(3):
            with tracer.start_as_current_span("wal.first_time_tick.attempt"):
                pass
    with (
        tracer.start_as_current_span("cluster.move"),
        tracer.start_as_current_span("/streamwal.v1.StreamingNode/Produce"),
    ):
        pass  # a refused write inside a move: its parent is kept, so it is
    with tracer.start_as_current_span("wal.fence", attributes={LIFECYCLE_ATTRIBUTE: True}):
        pass
    names = [s.name for s in exporter.get_finished_spans()]
    assert sorted(names) == sorted(
        ["/streamwal.v1.StreamingNode/AssignChannel", "wal.open", "cluster.move", "wal.fence"]
        + ["wal.first_time_tick.attempt"] * 3
        + ["/streamwal.v1.StreamingNode/Produce"]
    )


def test_a_callers_sampled_parent_is_honoured_even_by_a_sampler_that_ignores_parents() -> None:
    provider, exporter = _provider(TracingSettings(sampler="traceidratio", ratio=0.0))
    tracer = provider.get_tracer("test")
    sampled = SpanContext(0xAB, 0xCD, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    unsampled = SpanContext(0xAB, 0xCE, is_remote=True, trace_flags=TraceFlags(0))
    for parent in (sampled, unsampled):
        context = trace.set_span_in_context(NonRecordingSpan(parent))
        tracer.start_span("/streamwal.v1.StreamingNode/Produce", context=context).end()
    (kept,) = exporter.get_finished_spans()
    assert kept.parent is not None and kept.parent.span_id == 0xCD


def test_the_ratio_applies_to_new_root_traces() -> None:
    provider, exporter = _provider(TracingSettings(ratio=0.5))
    tracer = provider.get_tracer("test")
    for _ in range(2000):
        tracer.start_span("/streamwal.v1.StreamingNode/Produce").end()
    assert 800 < len(exporter.get_finished_spans()) < 1200


@pytest.mark.parametrize(
    ("name", "ratio"),
    [
        ("always_on", 0.0),
        ("always_off", 1.0),
        ("traceidratio", 1.0),
        ("traceidratio", 0.99),
        ("parentbased_always_on", 0.0),
        ("parentbased_always_off", 1.0),
        ("parentbased_traceidratio", 1.0),
        ("parentbased_traceidratio", DEFAULT_RATIO),
    ],
)
def test_a_sampler_that_keeps_every_new_root_is_told_apart(name: str, ratio: float) -> None:
    """What ``samples_every_root`` says is what the sampler does with 200 roots."""
    sampler = base_sampler(name, ratio)
    kept = [
        sampler.should_sample(None, trace_id, "call").decision.is_sampled()  # type: ignore[no-untyped-call]
        for trace_id in range(1, 2**64, 2**64 // 200)
    ]
    assert samples_every_root(name, ratio) == all(kept)
