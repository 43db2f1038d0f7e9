"""The check every call of an authenticated node passes before its handler runs.

:class:`Authorizer` wraps each method's handler once, for the server's life (the
node's :class:`~streamwal.node.server_tracing.ServerInterceptor` asks it while it
builds its own per-method wrapper), so a call pays a metadata scan, one digest and a
prefix test, and an open method (health) pays nothing. The check runs inside the
call's span: the span carries the identity's name (``streamwal.identity``), never
its token.

A refused call never reaches its handler: nothing is written, fenced or truncated.
A produce stream (``ProduceStream``, ``ProduceBatchStream``) is checked frame by
frame and answers a refusal in band, as it answers any failed append: a caller
without the role gets every frame answered UNAUTHENTICATED or PERMISSION_DENIED (not
written); with the role, the frames before one outside its channel prefixes are
served and answered, then that frame and every later one are answered
PERMISSION_DENIED (not written) without reaching the handler. An answer that lists
channels (``ListChannels``) shows an identity limited to prefixes only the channels
under them.

Every call of an audited (admin) method is logged once on the ``streamwal.audit``
logger, refused or not, with the identity, the operation, the channel and the
outcome, in the message and as the json log's fields; with auth off too (the caller
``<anonymous>``), so a node's admin calls leave a trail whatever its settings.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from opentelemetry import trace

from streamwal.errors import short_repr
from streamwal.node.auth.identities import Identity, IdentityBook, Unknown
from streamwal.node.auth.table import RULES, Rule
from streamwal.node.proto import streaming_pb2 as pb

__all__ = ["AUDIT_LOGGER", "IDENTITY_ATTRIBUTE", "Authorizer"]

AUDIT_LOGGER = "streamwal.audit"
#: the span attribute naming the caller
IDENTITY_ATTRIBUTE = "streamwal.identity"

_audit = logging.getLogger(AUDIT_LOGGER)

Behavior = Callable[..., Any]
_Context = Any  # grpc.aio.ServicerContext


class _Denied(Exception):
    """A refusal decided before the handler: its status and details."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


#: the caller of every call while auth is off: it holds every role
_ANONYMOUS = Identity("<anonymous>", frozenset({"admin", "producer", "consumer", "node"}))


def _operation(full_method: str) -> str:
    return full_method.rpartition("/")[2]


class Authorizer:
    """Wraps handlers with the check of :data:`~streamwal.node.auth.table.RULES`."""

    def __init__(self, book: IdentityBook | None) -> None:
        """``book`` ``None``: auth is off, nothing is checked, and the admin calls are
        audited all the same (their caller ``<anonymous>``)."""
        self._book = book

    def wrap(self, full_method: str, behavior: Behavior, request_streaming: bool) -> Behavior:
        """``behavior`` behind its method's rule; with auth on, a method without a rule
        is refused to everyone."""
        rule = RULES.get(full_method)
        operation = _operation(full_method)
        if rule is not None and rule.open:
            return behavior
        check = self._checker(operation, rule)
        audited = rule is not None and rule.audited
        listing = rule is not None and rule.listing
        if self._book is None:
            if not audited or request_streaming or inspect.isasyncgenfunction(behavior):
                return behavior

            async def anonymous(request: Any, context: _Context) -> Any:
                return await self._audited(operation, check, behavior, request, context)

            return anonymous

        if inspect.isasyncgenfunction(behavior):
            in_band = _IN_BAND.get(operation) if request_streaming else None

            async def streamed(request: Any, context: _Context) -> Any:
                if in_band is None:
                    identity = await self._admit(
                        operation,
                        check,
                        None if request_streaming else _channel_of(request),
                        context,
                    )
                    if not request_streaming:
                        async for response in behavior(request, context):
                            yield response
                        return
                else:
                    try:  # the caller and its role; each frame's channel below
                        identity = self._identify(operation, context)
                        check(identity, None)
                    except _Denied as whole:
                        async for frame in request:
                            yield in_band(whole, frame)
                        return
                refused: list[tuple[_Denied, Any]] = []
                async for response in behavior(_frames(request, identity, check, refused), context):
                    yield response
                if refused:
                    first, frame = refused[0]
                    if in_band is None:
                        await context.abort(first.code, first.details)
                        return
                    yield in_band(first, frame)
                    async for frame in request:  # the rest of the stream, unread
                        yield in_band(first, frame)

            return streamed

        async def awaited(request: Any, context: _Context) -> Any:
            if request_streaming:  # stream in, one answer out: no method has it today
                identity = await self._admit(operation, check, None, context)
                refused: list[tuple[_Denied, Any]] = []
                response = await behavior(_frames(request, identity, check, refused), context)
                if refused:
                    await context.abort(refused[0][0].code, refused[0][0].details)
                return response
            if audited:
                return await self._audited(operation, check, behavior, request, context)
            # the hot path (a unary Produce): identify and check in line, no coroutine
            # of its own, an await only for a refusal
            try:
                identity = self._identify(operation, context)
                check(identity, _channel_of(request))
            except _Denied as denied:
                await context.abort(denied.code, denied.details)
                raise AssertionError("context.abort returned") from None
            response = await behavior(request, context)
            if listing and identity.prefixes:
                return _listed(identity, response)
            return response

        return awaited

    def _checker(self, operation: str, rule: Rule | None) -> Callable[[Identity, str | None], None]:
        """Raises :class:`_Denied` unless the identity may make the call on the channel."""

        def check(identity: Identity, channel: str | None) -> None:
            if rule is None:
                raise _Denied(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"{operation}: no role may call it (the node has no access rule for it)",
                )
            if rule.roles.isdisjoint(identity.roles):
                roles = " or ".join(sorted(rule.roles))
                on = f" on channel {short_repr(channel)}" if channel is not None else ""
                raise _Denied(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"identity {identity.name!r} may not call {operation}{on}: it needs the "
                    f"{roles} role",
                )
            if channel is not None and rule.channel and not identity.covers(channel):
                raise _Denied(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"identity {identity.name!r} may not call {operation} on channel "
                    f"{short_repr(channel)}: its channels are limited to the prefixes "
                    f"{', '.join(repr(p) for p in identity.prefixes)}",
                )

        return check

    def _identify(self, operation: str, context: _Context) -> Identity:
        if self._book is None:
            return _ANONYMOUS
        found = self._book.identify(context)
        if isinstance(found, Unknown):
            raise _Denied(grpc.StatusCode.UNAUTHENTICATED, f"{operation}: {found.why}")
        trace.get_current_span().set_attribute(IDENTITY_ATTRIBUTE, found.name)
        return found

    async def _admit(
        self,
        operation: str,
        check: Callable[[Identity, str | None], None],
        channel: str | None,
        context: _Context,
        *,
        audited: bool = False,
    ) -> Identity:
        """The caller, allowed the call on ``channel`` (``None`` for a stream: its
        frames are checked as they come); else the call is aborted with the refusal,
        which an ``audited`` call records first."""
        name = ""
        try:
            identity = self._identify(operation, context)
            name = identity.name
            check(identity, channel)
        except _Denied as denied:
            if audited:
                _record(name, operation, channel, denied.code.name)
            await context.abort(denied.code, denied.details)
            raise AssertionError("context.abort returned") from None
        return identity

    async def _audited(
        self,
        operation: str,
        check: Callable[[Identity, str | None], None],
        behavior: Behavior,
        request: Any,
        context: _Context,
    ) -> Any:
        channel = _channel_of(request)
        name = (await self._admit(operation, check, channel, context, audited=True)).name
        outcome = "OK"
        try:
            return await behavior(request, context)
        except BaseException as exc:
            code = context.code()
            outcome = code.name if isinstance(code, grpc.StatusCode) else type(exc).__name__
            raise
        finally:
            code = context.code()
            if outcome == "OK" and isinstance(code, grpc.StatusCode):
                outcome = code.name
            _record(name, operation, channel, outcome)


def _listed(identity: Identity, response: Any) -> Any:
    """``ListChannels``' answer with only the channels ``identity``'s prefixes cover."""
    if not isinstance(response, pb.ListChannelsResponse):
        return response
    return pb.ListChannelsResponse(
        channels=[c for c in response.channels if identity.covers(c.pchannel)],
        fenced=[name for name in response.fenced if identity.covers(name)],
    )


def _channel_of(request: Any) -> str | None:
    channel = getattr(request, "pchannel", None)
    return channel if isinstance(channel, str) else None


def _frames(
    requests: AsyncIterator[Any],
    identity: Identity,
    check: Callable[[Identity, str | None], None],
    refused: list[tuple[_Denied, Any]],
) -> AsyncIterator[Any]:
    """The request frames up to the first one the identity may not send (kept in
    ``refused`` with its refusal; the frames after it stay unread in ``requests``); a
    run of frames on one channel is checked once."""

    async def frames() -> AsyncIterator[Any]:
        allowed: str | None = None
        async for request in requests:
            channel = _channel_of(request)
            if channel != allowed:
                try:
                    check(identity, channel)
                except _Denied as denied:
                    refused.append((denied, request))
                    return
                allowed = channel
            yield request

    return frames()


def _append_error(denied: _Denied) -> pb.AppendError:
    return pb.AppendError(code=denied.code.value[0], message=denied.details, outcome=pb.NOT_WRITTEN)


#: how a produce stream answers a refused frame: in band, as it answers any failed
#: append (ending the call while the client still writes can reach an asyncio client
#: as INTERNAL instead of the refusal, streaming.proto says)
_IN_BAND: dict[str, Callable[[_Denied, Any], Any]] = {
    "ProduceStream": lambda denied, frame: pb.ProduceResponse(error=_append_error(denied)),
    "ProduceBatchStream": lambda denied, frame: pb.ProduceBatchResponse(
        results=[pb.ProduceResponse(error=_append_error(denied)) for _ in frame.messages]
    ),
}


def _record(identity: str, operation: str, channel: str | None, outcome: str) -> None:
    who = identity or "<unauthenticated>"
    _audit.info(
        "audit: %s %s channel=%s outcome=%s",
        who,
        operation,
        short_repr(channel or ""),
        outcome,
        extra={
            "fields": {
                "identity": who,
                "operation": operation,
                "channel": channel or "",
                "outcome": outcome,
            }
        },
    )
