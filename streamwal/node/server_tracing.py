"""The node's gRPC server interceptor: a SERVER span per call, typed refusals of malformed
requests, each method's handler wrapped once for the server's life.

OpenTelemetry's generic ``aio_server_interceptor`` rebuilt every handler on every call,
split the method name in its filter, and proxied the servicer context to learn the
status: costs every small ``Produce`` paid (docs/performance.md, "What the design
choices save").
This does the same observable job with less work per call:

- the W3C trace context (and baggage: the global propagator) is read from the call's
  metadata, and a SERVER span named after the full method (``/package.Service/Method``)
  is current while the handler runs; one span per call, streams included;
- the span carries the attributes the OpenTelemetry gRPC instrumentation sets
  (``rpc.system``, ``rpc.service``, ``rpc.method``, ``rpc.grpc.status_code``,
  ``rpc.user_agent``, ``net.peer.ip``, ``net.peer.port``, ``net.peer.name``);
- the status comes from the servicer context when the handler ends (``context.abort``
  and ``context.set_code`` both leave it there): its number in ``rpc.grpc.status_code``
  and, for the codes that mean a server fault, an ERROR status ``"<code>:<details>"``;
  an exception is recorded on the span, and one that escapes the handler without a
  status is UNKNOWN, which is what gRPC answers;
- a call refused because this node does not own the channel (fenced by a newer owner,
  or not here) is marked ERROR too, with the domain error (its type and message) as
  the exception: the gRPC conventions leave FAILED_PRECONDITION and NOT_FOUND unset on
  a server, but a fenced write is what an operator reading a move looks for, and
  gRPC's own ``AbortError`` (how a handler ends a call with a status) names nothing;
- health checks make no span: they would flood the traces; TSO calls make one only
  when they join a caller's trace (a timestamp batch fetched in the background would
  otherwise be a one-span trace of its own per fetch);
- a call the node's sampler would drop makes no span object at all: the sampler
  (:class:`~streamwal.node.tracing.LifecycleSampler`) decides first, and the call runs
  in its caller's unsampled context, or in one shared unsampled context when it has
  none, so what it starts or calls is dropped as a dropped span's children are. The
  SDK would draw two ids, count the span in its own metrics and build a context and a
  non-recording span for it: with 1 % of new traces kept, that is work for nothing on
  99 of 100 calls. A sampled call's span, its attributes and its parent are as they
  would be without this. With a provider of another sampler, every call starts its
  span through the SDK, which decides;
- with ``route=True`` (a process hosting several nodes) the spans library code starts
  during the call go to this node's provider (:mod:`streamwal.node.tracing`).

Request bytes that are not the method's message get INVALID_ARGUMENT (gRPC alone
answers UNKNOWN, which a client cannot act on): requests are parsed leniently and the
handler's wrapper refuses the marker, in the call's span. A malformed frame ends a
request stream: the frames before it are answered, then the call ends with
INVALID_ARGUMENT (aborting from inside the input would race the handler's answers).

Handlers are looked up once per method and cached: the server's handlers are fixed
once it starts, so this must be the last interceptor of the chain. Handlers are async
(coroutines or async generators), as all of the node's are.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TracerProvider,
)
from opentelemetry.util.types import AttributeValue

from streamwal.errors import ChannelFencedError, ChannelNotFoundError
from streamwal.node.tracing import (
    RPC_GRPC_STATUS_CODE,
    RPC_METHOD,
    RPC_SERVICE,
    RPC_SYSTEM,
    LifecycleSampler,
    RoutingTracerProvider,
    route_call,
    unroute,
)

__all__ = ["HEALTH_SERVICE", "REFUSALS", "TSO_SERVICE", "ServerInterceptor"]

_log = logging.getLogger(__name__)

HEALTH_SERVICE = "grpc.health.v1.Health"
TSO_SERVICE = "streamwal.tso.v1.TSO"
#: domain errors whose refusal marks the server span ERROR (see the module docstring)
REFUSALS: tuple[type[Exception], ...] = (ChannelFencedError, ChannelNotFoundError)

# the server-only names the gRPC instrumentation uses (the shared ones: node/tracing.py)
RPC_USER_AGENT = "rpc.user_agent"
NET_PEER_IP = "net.peer.ip"
NET_PEER_PORT = "net.peer.port"
NET_PEER_NAME = "net.peer.name"

# the codes that say the server failed (the others say the request was refused)
_SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_LOOPBACK = frozenset({"[::1]", "127.0.0.1"})

# The context a dropped call without a caller's trace runs in: one unsampled parent for
# them all, so that their children are dropped too (a child of no span would be a new
# root, sampled anew) without ids drawn per call. Nothing records an unsampled trace id.
_UNSAMPLED = trace.set_span_in_context(
    NonRecordingSpan(SpanContext(0x5E1DE7, 0x5E1DE7, is_remote=False, trace_flags=TraceFlags(0)))
)

#: what extracting from headers that carry no trace context gives
_EMPTY = Context()


def _presampler(provider: TracerProvider | None) -> LifecycleSampler | None:
    """The sampler that decides the spans of ``provider`` (the global one if ``None``),
    if it can decide before a span exists."""
    if provider is None:
        provider = trace.get_tracer_provider()
    if isinstance(provider, RoutingTracerProvider):
        provider = provider.default  # a process's nodes share one sampler
    sampler = getattr(provider, "sampler", None)
    return sampler if isinstance(sampler, LifecycleSampler) else None


Behavior = Callable[..., Any]


class _Malformed:
    """Stands for request bytes that did not parse (the handler's wrapper refuses it)."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse_or_mark(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # protobuf's DecodeError, or anything a parser raises
            return _Malformed(f"malformed request: {type(exc).__name__}")

    return parse_or_mark


@functools.lru_cache(maxsize=1024)
def _peer_attributes(peer: str) -> dict[str, AttributeValue]:
    """``ipv4:127.0.0.1:57284`` (or ``ipv6:[::1]:57284``, or several, comma-separated:
    the first counts) as attributes; a Unix socket has none. Cached: a connection's
    calls share their peer."""
    if peer.startswith("unix:"):
        return {}
    try:
        ip, port = peer.split(",")[0].split(":", 1)[1].rsplit(":", 1)
    except (IndexError, ValueError):
        _log.warning("cannot parse the peer address %r", peer)
        return {}
    ip = unquote(ip)
    found: dict[str, AttributeValue] = {NET_PEER_IP: ip, NET_PEER_PORT: port}
    if ip in _LOOPBACK:
        found[NET_PEER_NAME] = "localhost"
    return found


@dataclass(frozen=True)
class _Method:
    """What every call of one method shares: its span's name and fixed attributes."""

    name: str
    attributes: dict[str, AttributeValue]
    #: a span only inside a caller's trace
    joined_only: bool = False

    @classmethod
    def of(cls, full_method: str) -> _Method:
        attributes: dict[str, AttributeValue] = {
            RPC_SYSTEM: "grpc",
            RPC_GRPC_STATUS_CODE: grpc.StatusCode.OK.value[0],
        }
        service, _, method = full_method.lstrip("/").partition("/")
        if method:
            attributes[RPC_METHOD] = method
            attributes[RPC_SERVICE] = service
        return cls(full_method, attributes)


def _parsed(requests: AsyncIterator[Any], malformed: list[_Malformed]) -> AsyncIterator[Any]:
    async def frames() -> AsyncIterator[Any]:
        async for request in requests:
            if isinstance(request, _Malformed):
                malformed.append(request)
                return
            yield request

    return frames()


async def _admitted(
    request: Any,
    streaming: bool,
    malformed: list[_Malformed],
    context: grpc.aio.ServicerContext[Any, Any],
) -> Any:
    """What the handler reads: a request stream up to its first malformed frame (kept in
    ``malformed``), or the one request; a malformed one request is refused here."""
    if streaming:
        return _parsed(request, malformed)
    if isinstance(request, _Malformed):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.problem)
    return request


async def _refuse_rest(
    malformed: list[_Malformed], context: grpc.aio.ServicerContext[Any, Any]
) -> None:
    """End the call with INVALID_ARGUMENT once the frames before a malformed one are
    answered."""
    if malformed:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, malformed[0].problem)


def _domain_error(exc: Exception) -> Exception:
    """What a call failed of: the error a handler was answering when it aborted (gRPC's
    ``AbortError`` chains it as its context), else what it raised."""
    if isinstance(exc, grpc.aio.AbortError) and isinstance(exc.__context__, Exception):
        return exc.__context__
    return exc


class _Call:
    """One call's span, current while its handler runs; ``span`` ``None``: a call that
    makes none (untraced, or dropped by the sampler), with nothing to record."""

    __slots__ = ("escaped", "refused", "route", "span", "token")

    def __init__(
        self, span: Span | None, token: object | None, route: object | None = None
    ) -> None:
        self.span = span
        self.token = token
        self.route = route
        self.escaped: Exception | None = None
        self.refused: Exception | None = None

    def failed(self, exc: Exception) -> None:
        """Record what the handler raised (``context.abort`` raises too), as the domain
        error it answered where there is one."""
        if self.span is None:
            return
        self.escaped = exc
        error = _domain_error(exc)
        if isinstance(error, grpc.aio.AbortError):
            return  # a bare abort: the status says it all
        if isinstance(error, REFUSALS):
            self.refused = error
        if type(error) is not Exception:  # a bare ``Exception`` says nothing more
            self.span.record_exception(error)

    def end(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        span = self.span
        if span is None:
            return
        code = context.code()  # set by ``abort`` and ``set_code``, else None
        details = context.details()
        if code is None and self.escaped is not None:  # gRPC answers it UNKNOWN
            code = grpc.StatusCode.UNKNOWN
            details = f"Unexpected {type(self.escaped)}: {self.escaped}"
        if isinstance(code, grpc.StatusCode) and code is not grpc.StatusCode.OK:
            span.set_attribute(RPC_GRPC_STATUS_CODE, code.value[0])
            if code in _SERVER_FAULTS:
                span.set_status(Status(StatusCode.ERROR, f"{code}:{details}"))
            elif self.refused is not None:
                refused = self.refused
                span.set_status(Status(StatusCode.ERROR, f"{type(refused).__name__}: {refused}"))
        span.end()

    def detach(self) -> None:
        if self.token is not None:
            otel_context.detach(self.token)  # type: ignore[arg-type]
        if self.route is not None:
            unroute(self.route)


class ServerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """``grpc.aio.server(interceptors=[ServerInterceptor()])``; see the module docstring.

    ``untraced``: services whose calls make no span (their requests are still checked);
    ``joined_only``: services whose calls make one only inside a caller's trace;
    ``span_attributes``: on every call's span (a node names itself);
    ``route``: spans started during a call go to ``tracer_provider`` (a process hosting
    several nodes, each with a provider of its own);
    ``guard``: wraps each method's handler once, inside the call's span and after the
    request's check (the node's :class:`~streamwal.node.auth.Authorizer`): it gets the
    full method name, the handler and whether the request is a stream.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        untraced: Collection[str] = (HEALTH_SERVICE,),
        joined_only: Collection[str] = (TSO_SERVICE,),
        span_attributes: dict[str, AttributeValue] | None = None,
        route: bool = False,
        guard: Callable[[str, Behavior, bool], Behavior] | None = None,
    ) -> None:
        self._guard = guard
        self._tracer = trace.get_tracer(__name__, tracer_provider=tracer_provider)
        self._untraced = frozenset(untraced)
        self._joined_only = frozenset(joined_only)
        self._span_attributes = dict(span_attributes or {})
        self._route = tracer_provider if route else None
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        self._provider = tracer_provider
        # read at the first call, once telemetry is set up (the global provider may be
        # installed after this interceptor is made)
        self._resolved = False
        self._sampler: LifecycleSampler | None = None
        self._fields: frozenset[str] = frozenset()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        method: str = handler_call_details.method
        wrapped = self._handlers.get(method)
        if wrapped is None:
            handler = await continuation(handler_call_details)
            if handler is None:
                return None  # not cached: any name a client sends would grow the cache
            wrapped = self._handlers[method] = self._wrap(method, handler)
        return wrapped

    def _wrap(self, full_method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        if not self._resolved:
            self._sampler = _presampler(self._provider)
            self._fields = frozenset(propagate.get_global_textmap().fields)
            self._resolved = True
        service = full_method.lstrip("/").partition("/")[0]
        method = None if service in self._untraced else _Method.of(full_method)
        if method is not None:
            method.attributes.update(self._span_attributes)
            if service in self._joined_only:
                method = dataclasses.replace(method, joined_only=True)
        changes: dict[str, Any] = {}
        if handler.request_deserializer is not None:
            changes["request_deserializer"] = _lenient(handler.request_deserializer)
        for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
            behavior = getattr(handler, kind)
            if behavior is not None:
                if self._guard is not None:
                    behavior = self._guard(full_method, behavior, kind.startswith("stream"))
                changes[kind] = self._wrapped(behavior, method, kind.startswith("stream"))
        return handler._replace(**changes)

    def _begin(self, method: _Method | None, context: grpc.aio.ServicerContext[Any, Any]) -> _Call:
        route = route_call(self._route) if self._route is not None else None
        if method is None:
            return _Call(None, None, route)
        parent: Context | None = None
        agent = None
        metadata = context.invocation_metadata()
        if metadata:
            carrier = {key: value for key, value in metadata}
            # no header the propagators read: what extracting would give, without the work
            parent = _EMPTY if self._fields.isdisjoint(carrier) else propagate.extract(carrier)
            agent = carrier.get("user-agent")
        caller = trace.get_current_span(parent).get_span_context()
        if method.joined_only and not caller.is_valid:
            return _Call(None, None, route)
        start_in = parent
        if self._sampler is not None:
            start_in = self._sampler.presample(
                parent, method.name, SpanKind.SERVER, method.attributes
            )
            if start_in is None:  # dropped: no span (see the module docstring)
                unsampled = parent if caller.is_valid else _UNSAMPLED
                return _Call(None, otel_context.attach(unsampled), route)  # type: ignore[arg-type]
        attributes = dict(method.attributes)
        if agent:
            attributes[RPC_USER_AGENT] = agent
        attributes.update(_peer_attributes(context.peer()))
        span = self._tracer.start_span(
            method.name, context=start_in, kind=SpanKind.SERVER, attributes=attributes
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        return _Call(span, token, route)

    def _wrapped(
        self, behavior: Behavior, method: _Method | None, request_streaming: bool
    ) -> Behavior:
        """The (async) handler, in its own style, which gRPC runs it by: an async
        generator yields its responses, a coroutine returns its response or writes
        them with ``context.write`` (the health service's ``Watch``)."""
        begin = self._begin

        if inspect.isasyncgenfunction(behavior):

            async def streamed(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                call = begin(method, context)
                # no detach: an abandoned stream is closed later from another task, where
                # resetting this task's context fails; the call's task ends with the call
                try:
                    malformed: list[_Malformed] = []
                    request = await _admitted(request, request_streaming, malformed, context)
                    async for response in behavior(request, context):
                        yield response
                    await _refuse_rest(malformed, context)
                except Exception as exc:
                    call.failed(exc)
                    raise
                finally:
                    call.end(context)

            return streamed

        async def awaited(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            call = begin(method, context)
            try:
                if not request_streaming:  # the one request checked here, as _admitted does
                    if isinstance(request, _Malformed):
                        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.problem)
                    return await behavior(request, context)
                malformed: list[_Malformed] = []
                request = await _admitted(request, request_streaming, malformed, context)
                response = await behavior(request, context)
                await _refuse_rest(malformed, context)
                return response
            except Exception as exc:
                call.failed(exc)
                raise
            finally:
                call.end(context)
                call.detach()

        return awaited
