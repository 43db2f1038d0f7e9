"""Which spans a node keeps, and which node a span belongs to.

Sampling. A node answers many appends a second and a trace per append buys nothing
an operator reads, so new root traces are sampled by the OpenTelemetry standard
(``OTEL_TRACES_SAMPLER``/``OTEL_TRACES_SAMPLER_ARG``, or the ``tracing:`` section).
What an operator searches for is rare and must be there every time: a channel's open,
each of its first-time-tick attempts, a move, the assignment calls that cause them.
:class:`LifecycleSampler` records those by name (or by the ``streamwal.lifecycle``
attribute a span sets at its start) whatever the ratio, and honours a caller's sampled
parent whatever the configured sampler says, so a caller that traces a call sees the
node's part of it. Sampling decides spans only: metrics count every append.

Nodes apart. A resource belongs to a tracer provider, and one process may host several
nodes (the demo runs two beside its client). Each node then gets a provider of its own
(its resource names it) and :class:`RoutingTracerProvider`, installed as the global
provider, sends the spans that library code starts through the global API to the
provider of the node whose work is running (a context variable the node sets on its
calls and tasks), else to the process's own.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context, create_key, get_value, set_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SDKSpan
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.util.types import Attributes, AttributeValue

__all__ = [
    "DEFAULT_RATIO",
    "DEFAULT_SAMPLER",
    "LIFECYCLE_ATTRIBUTE",
    "LIFECYCLE_SPANS",
    "RPC_GRPC_STATUS_CODE",
    "RPC_METHOD",
    "RPC_SERVICE",
    "RPC_SYSTEM",
    "SAMPLERS",
    "ClientSpanNamer",
    "LifecycleSampler",
    "NodeIdProcessor",
    "RoutingTracerProvider",
    "base_sampler",
    "client_span_name",
    "emit_span_with_id",
    "routed_to",
    "samples_every_root",
]

#: the standard sampler names this node understands (``OTEL_TRACES_SAMPLER``)
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
DEFAULT_SAMPLER = "parentbased_traceidratio"
#: 1 % of new root traces: an append's trace now and then, for latency outliers,
#: without a span per append (docs/deploy.md "Tracing")
DEFAULT_RATIO = 0.01

#: spans recorded whatever the ratio: a channel's lifecycle
LIFECYCLE_SPANS = frozenset(
    {
        "wal.open",
        "wal.first_time_tick.attempt",
        "cluster.move",
        "/streamwal.v1.StreamingNode/AssignChannel",
        "/streamwal.v1.StreamingNode/RemoveChannel",
    }
)
#: a span that sets this (true) among its start attributes is recorded too
LIFECYCLE_ATTRIBUTE = "streamwal.lifecycle"


#: what a client's span of a call is named before the method (the server's span has
#: the method alone): the two spans of one call must differ where Jaeger lists them
CLIENT_PREFIX = "client "


# the OpenTelemetry semantic-convention names of a gRPC call's span, client and server
RPC_SYSTEM = "rpc.system"
RPC_SERVICE = "rpc.service"
RPC_METHOD = "rpc.method"
RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code"


def client_span_name(method: str) -> str:
    return f"{CLIENT_PREFIX}{method}"


def samples_every_root(name: str, ratio: float) -> bool:
    """Whether the standard sampler ``name`` (at ``ratio``) keeps every call that comes
    without a sampled trace of its caller: a native front must then hand the node each
    call on its own, since a coalesced call has no span of its own in the node."""
    every = ratio >= 1.0
    return name in ("always_on", "parentbased_always_on") or (
        every and name in ("traceidratio", "parentbased_traceidratio")
    )


def base_sampler(name: str, ratio: float) -> Sampler:
    """The SDK's sampler for a standard name; ``ratio`` for the ratio-based ones.
    The name is checked where the configuration is read (:mod:`streamwal.node.config`)."""
    samplers: dict[str, Sampler] = {
        "always_on": ALWAYS_ON,
        "always_off": ALWAYS_OFF,
        "traceidratio": TraceIdRatioBased(ratio),
        "parentbased_always_on": ParentBased(ALWAYS_ON),
        "parentbased_always_off": ParentBased(ALWAYS_OFF),
        "parentbased_traceidratio": ParentBased(TraceIdRatioBased(ratio)),
    }
    return samplers[name]


# in the context a presampled span starts in: its sampling is decided already
_PRESAMPLED = create_key("streamwal-presampled")


class LifecycleSampler(Sampler):
    """Lifecycle spans and children of sampled parents always; the rest as ``delegate``
    decides (see the module docstring for why)."""

    def __init__(self, delegate: Sampler, names: frozenset[str] = LIFECYCLE_SPANS) -> None:
        self._delegate = delegate
        self._names = names

    def presample(
        self,
        parent_context: Context | None,
        name: str,
        kind: SpanKind,
        attributes: Attributes = None,
    ) -> Context | None:
        """Decide a span's sampling before it exists: ``None`` if it would be dropped,
        so a caller that would start it for nothing makes no span object at all (the
        SDK builds ids, a context and a non-recording span for a dropped one); else the
        context to start it in (``parent_context`` marked decided), where this sampler
        keeps it without deciding again: a ratio's second draw, on the trace id the SDK
        then generates, would keep only ratio² of new traces. A root's decision is
        drawn on a random trace id, as the SDK's own ids are, so the ratio holds.
        ``parent_context`` ``None``: the current context, as ``start_span`` reads it."""
        parent = trace.get_current_span(parent_context).get_span_context()
        trace_id = parent.trace_id if parent.is_valid else random.getrandbits(128)
        result = self.should_sample(parent_context, trace_id, name, kind, attributes)
        if result.decision is not Decision.RECORD_AND_SAMPLE:
            return None
        return set_value(_PRESAMPLED, True, parent_context)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if (
            (parent_context is not None and get_value(_PRESAMPLED, parent_context) is True)
            or name in self._names
            or (attributes is not None and attributes.get(LIFECYCLE_ATTRIBUTE) is True)
            or (parent.is_valid and parent.trace_flags.sampled)
        ):
            state = parent.trace_state if parent.is_valid else trace_state
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, state)
        return self._delegate.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"LifecycleSampler{{{self._delegate.get_description()}}}"


class NodeIdProcessor(SpanProcessor):
    """Puts the node id on every span a node's provider starts: one key the Find box
    and ``trace show`` read, whichever code made the span. Only starts matter here:
    the SDK's base class is the no-op end, flush and shutdown."""

    def __init__(self, key: str, node_id: int) -> None:
        self._key = key
        self._node_id = node_id

    def on_start(self, span: SDKSpan, parent_context: Context | None = None) -> None:
        span.set_attribute(self._key, self._node_id)


class ClientSpanNamer(SpanProcessor):
    """Names every gRPC client span ``/package.Service/Method`` as
    :func:`client_span_name` does (the node's own clients name theirs so at the start),
    apart from the server's span of the same call: for the clients of other code that
    OpenTelemetry's gRPC instrumentation traces."""

    def on_start(self, span: SDKSpan, parent_context: Context | None = None) -> None:
        if span.kind is SpanKind.CLIENT and span.name.startswith("/"):
            span.update_name(client_span_name(span.name))


# the provider of the node whose work runs in this context, if not the process's own
_ROUTE: ContextVar[trace.TracerProvider | None] = ContextVar("streamwal_trace_route", default=None)


@contextlib.contextmanager
def routed_to(provider: trace.TracerProvider | None) -> Iterator[None]:
    """Spans started through the global API in this context (and in tasks created in
    it) go to ``provider``; ``None`` changes nothing."""
    if provider is None:
        yield
        return
    token = _ROUTE.set(provider)
    try:
        yield
    finally:
        _ROUTE.reset(token)


def route_call(provider: trace.TracerProvider) -> object:
    """:func:`routed_to` for a gRPC call's task; the token resets it (or the task's end
    does, where a stream is closed from another task)."""
    return _ROUTE.set(provider)


def unroute(token: object) -> None:
    _ROUTE.reset(token)  # type: ignore[arg-type]


class _RoutingTracer(trace.Tracer):
    def __init__(self, default: trace.TracerProvider, scope: Mapping[str, Any]) -> None:
        self._default = default
        self._scope = scope
        self._tracers: dict[int, trace.Tracer] = {}

    def _pick(self) -> trace.Tracer:
        provider = _ROUTE.get() or self._default
        tracer = self._tracers.get(id(provider))
        if tracer is None:
            tracer = self._tracers[id(provider)] = provider.get_tracer(**self._scope)
        return tracer

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._pick().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._pick().start_as_current_span(*args, **kwargs)


class RoutingTracerProvider(trace.TracerProvider):
    """The global provider of a process hosting several nodes; see the module docstring.
    Node providers must outlive the process's spans (they are kept, never collected)."""

    def __init__(self, default: trace.TracerProvider) -> None:
        self.default = default

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> trace.Tracer:
        scope = {
            "instrumenting_module_name": instrumenting_module_name,
            "instrumenting_library_version": instrumenting_library_version,
            "schema_url": schema_url,
            "attributes": attributes,
        }
        return _RoutingTracer(self.default, scope)


def emit_span_with_id(
    name: str,
    context: trace.SpanContext,
    *,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, AttributeValue],
    scope: str,
) -> bool:
    """Hand a finished root span whose ids were chosen before it ran to the span
    processors of the provider this context's spans go to; whether it was handed over.

    Only the SDK makes a span from given ids (the API always draws new ones), so the
    cluster layer, which uses the API, calls this for the one span whose id its
    children named long before it could be emitted (``cluster.failover``). Never
    raises: a span that cannot be emitted is no reason to fail the write it ends on.
    """
    try:
        provider = _ROUTE.get() or trace.get_tracer_provider()
        if isinstance(provider, RoutingTracerProvider):
            provider = provider.default
        processor = getattr(provider, "_active_span_processor", None)
        resource = getattr(provider, "resource", None)
        if processor is None or resource is None or not context.trace_flags.sampled:
            return False
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        span = ReadableSpan(
            name=name,
            context=context,
            parent=None,
            resource=resource,
            attributes=dict(attributes),
            kind=SpanKind.INTERNAL,
            start_time=start_ns,
            end_time=max(end_ns, start_ns),
            status=trace.Status(trace.StatusCode.OK),
            instrumentation_scope=InstrumentationScope(scope),
        )
        processor.on_end(span)
        return True
    except Exception:
        logging.getLogger(__name__).warning("span %s not emitted", name, exc_info=True)
        return False
