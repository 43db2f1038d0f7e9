"""A node client's calls with their CLIENT spans and token, without grpc.aio interceptors.

Any interceptor on a grpc.aio channel turns every call into an intercepted call: a
task of its own for the interceptor chain, a call object wrapped in another, and
OpenTelemetry's client interceptor adds a context manager, a copy of the metadata and
callbacks per call. On a unary ``Produce`` that is about 85 us of the client's CPU on
top of 180 us for the call itself (docs/performance.md), in the process that also
runs its caller's work. Here the stub is built over :class:`TracedChannel`, whose
methods start the span and add the metadata (the trace context, the bearer token)
themselves and hand the call to the plain channel.

The spans are those the OpenTelemetry gRPC instrumentation makes, named as
:func:`~streamwal.node.tracing.client_span_name` says: kind CLIENT, ``rpc.system``,
``rpc.service``, ``rpc.method``, ``rpc.grpc.status_code`` (0 until a call fails), and
for a failed call an ERROR status with its details. A span lasts its call: a unary
call until its answer, a stream until it ends (a stream its client cancelled is not
an error). Its context goes with the call (the global propagator), sampled or not, so
the node follows the caller's decision.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import grpc
from grpc import aio
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from streamwal.node.tracing import (
    RPC_GRPC_STATUS_CODE,
    RPC_METHOD,
    RPC_SERVICE,
    RPC_SYSTEM,
    client_span_name,
)
from streamwal.tso.tls import AUTHORIZATION

__all__ = ["TracedChannel", "TracedStream", "TracedUnary"]

Metadata = tuple[tuple[str, str], ...]


class TracedChannel:
    """What a generated stub is built over in place of the channel itself: each of its
    methods is the channel's, sending ``token`` (if any) and, with a ``tracer``, the
    call's span context."""

    def __init__(self, channel: aio.Channel, tracer: Tracer | None, token: str | None) -> None:
        self.channel = channel
        self._tracer = tracer
        self._metadata: Metadata = () if token is None else ((AUTHORIZATION, f"Bearer {token}"),)
        # the streams whose spans end when they do: a task each, kept until it has run
        self._ending: set[asyncio.Task[None]] = set()

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> TracedUnary:
        return TracedUnary(self, method, self.channel.unary_unary(method, *args, **kwargs))

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> TracedUnary:
        return TracedUnary(self, method, self.channel.stream_unary(method, *args, **kwargs))

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> TracedStream:
        return TracedStream(self, method, self.channel.unary_stream(method, *args, **kwargs))

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> TracedStream:
        return TracedStream(self, method, self.channel.stream_stream(method, *args, **kwargs))

    def begin(self, method: _Method) -> tuple[Span | None, Metadata]:
        """A call of ``method``: its span (``None`` without tracing) and the metadata
        it sends."""
        if self._tracer is None:
            return None, self._metadata
        span = self._tracer.start_span(
            method.span_name, kind=SpanKind.CLIENT, attributes=method.attributes
        )
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        return span, self._metadata + tuple(carrier.items())

    def end_with_stream(self, span: Span, call: Any) -> None:
        """End ``span`` when the stream ``call`` ends, with its status."""

        def ended(_: object) -> None:
            task = asyncio.ensure_future(_end_stream(span, call))
            self._ending.add(task)
            task.add_done_callback(self._ending.discard)

        call.add_done_callback(ended)


def _failed(span: Span, code: grpc.StatusCode, details: str | None) -> None:
    span.set_attribute(RPC_GRPC_STATUS_CODE, code.value[0])
    span.set_status(Status(StatusCode.ERROR, details))


async def _end_stream(span: Span, call: Any) -> None:
    try:
        code = await call.code()
        if code is not grpc.StatusCode.OK and not call.cancelled():
            _failed(span, code, await call.details())
    finally:
        span.end()


class _Method:
    """One method of the channel: the channel's own multicallable, and its spans' name
    and first attributes (the SDK copies them into each span)."""

    def __init__(self, channel: TracedChannel, method: str, call: Any) -> None:
        self._channel = channel
        self._call = call
        service, _, name = method.lstrip("/").partition("/")
        self.span_name = client_span_name(method)
        self.attributes: dict[str, str | int] = {
            RPC_SYSTEM: "grpc",
            RPC_GRPC_STATUS_CODE: grpc.StatusCode.OK.value[0],
            RPC_METHOD: name,
            RPC_SERVICE: service,
        }


class TracedUnary(_Method):
    """A unary or client-streaming method: its answer, awaited inside its span."""

    async def __call__(
        self, request: Any, *, timeout: float | None = None, metadata: Sequence[Any] = ()
    ) -> Any:
        span, sent = self._channel.begin(self)
        try:
            return await self._call(request, timeout=timeout, metadata=(*sent, *metadata))
        except aio.AioRpcError as exc:
            if span is not None:
                _failed(span, exc.code(), exc.details())
            raise
        finally:
            if span is not None:
                span.end()


class TracedStream(_Method):
    """A server-streaming or bidirectional method: the call, its span ended with it."""

    def __call__(
        self, request: Any = None, *, timeout: float | None = None, metadata: Sequence[Any] = ()
    ) -> Any:
        span, sent = self._channel.begin(self)
        metadata = (*sent, *metadata)
        call = (
            self._call(timeout=timeout, metadata=metadata)
            if request is None
            else self._call(request, timeout=timeout, metadata=metadata)
        )
        if span is not None:
            self._channel.end_with_stream(span, call)
        return call
