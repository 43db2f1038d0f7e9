"""Opening a channel: fence the old owner, persist a first time tick, build the WAL.

The counterpart of Milvus's ``wal/adaptor/initializing.go``. Tracing: ``wal.open``
spans the whole open; each first-time-tick attempt is a child span
``wal.first_time_tick.attempt``; the outcome is on the parent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import Attributes

from streamwal.errors import (
    ChannelFencedError,
    ClosedError,
    InvalidInputError,
    MisconfiguredError,
    QuotaExceededError,
    StaleTermError,
)
from streamwal.retry import Retry, RetryAttempt
from streamwal.timestamps import TimestampAllocator
from streamwal.wal.backend import (
    AccessMode,
    BackendOpener,
    BackendWAL,
    append_entry,
    validate_channel_name,
)
from streamwal.wal.chunking import with_chunking
from streamwal.wal.config import Backoff, WALConfig
from streamwal.wal.interceptors import ChannelInfo, InterceptorParams
from streamwal.wal.message import ImmutableMessage, MessageType, MutableMessage, encode
from streamwal.wal.message.codec import LOG_FORMAT_V2, log_format_number
from streamwal.wal.metrics import record_first_time_tick_attempt, record_open
from streamwal.wal.mvcc import MVCCManager
from streamwal.wal.retention_contract import BackendRetention
from streamwal.wal.truncation import Truncator
from streamwal.wal.wal import WAL, ReadOnlyWAL
from streamwal.wal.write_ahead_buffer import WriteAheadBuffer

__all__ = [
    "ATTR_ATTEMPT",
    "ATTR_ATTEMPTS",
    "ATTR_BACKOFF_MS",
    "ATTR_CHANNEL",
    "ATTR_FIRST_TIME_TICK",
    "ATTR_MESSAGE_ID",
    "ATTR_NODE_ID",
    "ATTR_TIME_TICK",
    "FirstTimeTick",
    "build_interceptor_params",
    "open_read_only",
    "open_wal",
    "send_first_time_tick",
]

_log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

ATTR_CHANNEL = "wal.channel"
#: the node id under the one key every span of a node carries (docs/traces.md)
ATTR_NODE_ID = "streamwal.node.id"
ATTR_ATTEMPTS = "wal.attempts"
ATTR_FIRST_TIME_TICK = "wal.first_time_tick"
ATTR_ATTEMPT = "wal.attempt"
ATTR_BACKOFF_MS = "wal.backoff_ms"
ATTR_TIME_TICK = "wal.time_tick"
ATTR_MESSAGE_ID = "wal.message_id"

# Trying again cannot help: a newer owner exists, the backend is closed, or the
# broker does not enforce the single-writer fence (it will not start to by waiting,
# and retrying would only hide that behind an open that never returns).
#: an operator (or a consumer, for a quota) must act before another attempt can succeed
_FINAL_ERRORS = (
    ChannelFencedError,
    ClosedError,
    MisconfiguredError,
    QuotaExceededError,
    StaleTermError,
)


async def open_wal(
    opener: BackendOpener,
    channel: str,
    allocator: TimestampAllocator,
    node_id: int,
    config: WALConfig | None = None,
    *,
    term: int = 0,
    clock: Callable[[], float] = time.monotonic,
    log_format: str | int | None = None,
    fenced_hook: Callable[[], Awaitable[None]] | None = None,
) -> WAL:
    """Take ``channel`` over for ``node_id`` and return its started WAL.

    ``term``: the channel's term this owner opens it under (Milvus's
    ``PChannelInfo.Term``), kept on the WAL (:attr:`WAL.term`) and written in every
    entry of log format v2, so every message read says the term it was written under.
    The library does not check it against earlier owners': whoever hands terms out (a
    node, a cluster) refuses a stale one before the open; the broker's fence stays the
    enforcement.

    ``fenced_hook``: awaited once the old owner is fenced and before anything is
    written; raising abandons the open (nothing written). A term store checks there
    that no newer term was claimed meanwhile: every later claimant fences after its
    claim, so a term checked after this owner's fence is never followed in the log by
    a lower one.

    ``clock``: the owner's monotonic clock in seconds (transaction keepalives), for
    tests that move time without sleeping. ``log_format``: the format to write,
    ``"v1"`` or ``"v2"``, in place of ``config.log_format`` (a cluster member passes
    what every node of its cluster reads).

    Retries until the first time tick is persisted; ends early with
    :class:`~streamwal.errors.ChannelFencedError` if a newer owner exists, with
    :class:`~streamwal.errors.MisconfiguredError` at the first attempt if the backend cannot
    fence an old owner or the broker's policies would lose data
    (:class:`~streamwal.errors.ExclusivityNotEnforcedError`,
    :class:`~streamwal.errors.UnsafeBrokerPolicyError`), and with ``CancelledError`` within one
    backoff step when cancelled.
    """
    config = config if config is not None else WALConfig()
    validate_channel_name(channel)
    if not isinstance(node_id, int) or isinstance(node_id, bool) or node_id < 0:
        raise InvalidInputError(f"node id must be an int >= 0, got {node_id!r}")
    if not isinstance(term, int) or isinstance(term, bool) or not 0 <= term < 2**64:
        raise InvalidInputError(f"term must be an int >= 0 (and below 2**64), got {term!r}")
    info = ChannelInfo(
        channel,
        node_id,
        term,
        log_format_number(log_format if log_format is not None else config.log_format),
    )
    attributes: Attributes = {ATTR_CHANNEL: channel, ATTR_NODE_ID: node_id}
    started = time.perf_counter()
    outcome = "error"
    try:
        with _tracer.start_as_current_span("wal.open", attributes=attributes):
            backend = with_chunking(await opener.open(channel, AccessMode.READ_WRITE))
            try:
                if config.pack_appends and info.log_format == LOG_FORMAT_V2:
                    info = replace(info, pack_bytes=_write_packs(backend))
                first = await _first_time_tick_within_quota(
                    backend, allocator, info, config, fenced_hook
                )
                params = build_interceptor_params(
                    first.message,
                    info,
                    backend,
                    allocator,
                    config,
                    clock=clock,
                )
                wal = WAL(params, opener.message_id_from_bytes, open_attempts=first.attempts)
                await wal.start()
            except BaseException:
                await _close_quietly(backend)
                raise
            params.wal.set_result(wal)
            outcome = "ok"
            return wal
    except ChannelFencedError:
        outcome = "fenced"
        raise
    except asyncio.CancelledError:
        outcome = "cancelled"
        raise
    finally:
        record_open(channel, time.perf_counter() - started, outcome)


def _write_packs(backend: BackendWAL) -> int:
    """The most bytes a pack may take on ``backend`` (0: no packs), which writes one
    entry per submit once asked to (before its writer exists: the Pulsar backend then
    makes its producer without client batching): a pack of several messages must be
    an entry of its own. A backend without ``write_packs`` gets one message per entry."""
    ask = getattr(backend, "write_packs", None)
    budget = ask() if callable(ask) else 0
    return budget if isinstance(budget, int) and not isinstance(budget, bool) else 0


#: how long an open that truncated keeps trying under a backlog quota: the broker counts
#: the backlog until deduplication's own cursor moves, at its next snapshot (120 s by
#: default, brokerDeduplicationSnapshotIntervalSeconds)
QUOTA_RETRY_S = 150.0


async def _first_time_tick_within_quota(
    backend: BackendWAL,
    allocator: TimestampAllocator,
    info: ChannelInfo,
    config: WALConfig,
    fenced_hook: Callable[[], Awaitable[None]] | None = None,
) -> FirstTimeTick:
    """The first time tick; if a backlog quota blocks it, truncate and try again.

    A channel whose backlog quota is reached cannot create its producer, and only an
    open channel truncates: it would never open again (Milvus #42649). With a retention
    window, the open runs a truncation round (it needs no producer) and keeps trying
    for up to :data:`QUOTA_RETRY_S`; without one, or if nothing could be truncated, the
    quota error says what holds the backlog.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + QUOTA_RETRY_S
    truncator = Truncator(
        backend.channel, backend, config.retention, config.truncate_interval, lambda: None
    )
    truncated = False
    # the quota's own bound, whatever the first time tick's max_attempts
    retry = Retry(
        config.first_time_tick_backoff,
        max_attempts=None,
        retry_if=lambda _: truncated and loop.time() < deadline,
    )
    while True:
        try:
            return await send_first_time_tick(
                backend,
                allocator,
                info.node_id,
                config.first_time_tick_backoff,
                term=info.term,
                log_format=info.log_format,
                fenced_hook=fenced_hook,
            )
        except QuotaExceededError as exc:
            if config.retention is None or not isinstance(backend, BackendRetention):
                raise
            moved = await truncator.round()
            truncated = truncated or moved is not None
            if not retry.allows(exc):
                raise
            _log.warning(
                "channel %s: the backlog quota blocks the open; truncated%s, trying again",
                backend.channel,
                f" before {moved}" if moved is not None else "",
            )
            await retry.pause(exc)


@dataclass(frozen=True, slots=True)
class FirstTimeTick:
    """The persisted first time tick of an owner, and how many attempts it took."""

    message: ImmutableMessage
    attempts: int


async def send_first_time_tick(
    backend: BackendWAL,
    allocator: TimestampAllocator,
    node_id: int,
    backoff: Backoff,
    *,
    term: int = 0,
    log_format: int = LOG_FORMAT_V2,
    fenced_hook: Callable[[], Awaitable[None]] | None = None,
) -> FirstTimeTick:
    """Fence, then persist this owner's first time tick directly on ``backend``
    (``fenced_hook``, if given, between the two: see :func:`open_wal`).

    Retries every error except a fenced or closed backend and a misconfigured one (a
    broker that does not enforce exclusivity, or policies that would lose data: an
    operator must act first), which end it at once, following ``backoff``
    (``max_attempts`` honoured if set). Outcome attributes go on the current span.
    """
    channel = backend.channel
    parent = trace.get_current_span()

    def failed(attempt: RetryAttempt) -> None:
        _log.warning(
            "channel %s: first time tick attempt %d failed (%r); next attempt in %.0f ms",
            channel,
            attempt.attempt,
            attempt.error,
            attempt.delay * 1000,
        )

    retry = Retry(backoff, retry_if=Exception, give_up_on=_FINAL_ERRORS, on_retry=failed)
    waited = 0.0
    attempt = 0
    _log.info("channel %s: sending the first time tick as node %d", channel, node_id)
    try:
        while True:
            attempt = retry.attempt
            outcome = await _traced_attempt(
                backend, allocator, (node_id, term, log_format), attempt, waited, fenced_hook
            )
            record_first_time_tick_attempt(
                channel, "ok" if isinstance(outcome, ImmutableMessage) else "error"
            )
            if isinstance(outcome, ImmutableMessage):
                parent.set_attribute(ATTR_ATTEMPTS, attempt)
                parent.set_attribute(ATTR_FIRST_TIME_TICK, outcome.time_tick)
                parent.set_attribute(ATTR_MESSAGE_ID, str(outcome.message_id))
                parent.set_status(Status(StatusCode.OK))
                _log.info(
                    "channel %s: first time tick %d persisted at %s after %d attempt(s)",
                    channel,
                    outcome.time_tick,
                    outcome.message_id,
                    attempt,
                )
                return FirstTimeTick(outcome, attempt)
            delay = retry.next(outcome)
            if delay is None:
                _end(parent, attempt, repr(outcome))
                _log.error(
                    "channel %s: first time tick failed after %d attempt(s): %r",
                    channel,
                    attempt,
                    outcome,
                )
                raise outcome
            waited = delay
            await retry.wait(waited)  # cancellation lands here, within one step
    except asyncio.CancelledError:
        _end(parent, attempt, "cancelled")
        _log.warning("channel %s: first time tick cancelled after %d attempt(s)", channel, attempt)
        raise


async def _traced_attempt(
    backend: BackendWAL,
    allocator: TimestampAllocator,
    owner: tuple[int, int, int],
    attempt: int,
    waited: float,
    fenced_hook: Callable[[], Awaitable[None]] | None = None,
) -> ImmutableMessage | Exception:
    """One attempt in its own span; the error is returned, cancellation raised.

    The span names its node and channel itself: a move's trace holds spans of several
    nodes, and a reader of one attempt (or a search for a channel's failed attempts)
    must not have to walk up to ``wal.open`` to learn whose it is.
    """
    attributes: Attributes = {
        ATTR_CHANNEL: backend.channel,
        ATTR_ATTEMPT: attempt,
        ATTR_BACKOFF_MS: waited * 1000,
        ATTR_NODE_ID: owner[0],
    }
    with _tracer.start_as_current_span(
        "wal.first_time_tick.attempt",
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            return await _attempt(backend, allocator, owner, span, fenced_hook)
        except asyncio.CancelledError:
            span.set_status(Status(StatusCode.ERROR, "cancelled"))
            raise
        except Exception as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, repr(exc)))
            return exc


async def _attempt(
    backend: BackendWAL,
    allocator: TimestampAllocator,
    owner: tuple[int, int, int],
    span: Span,
    fenced_hook: Callable[[], Awaitable[None]] | None = None,
) -> ImmutableMessage:
    node_id, term, log_format = owner
    # THE FENCE, before any timestamp is taken. Once this owner's exclusive writer
    # exists, the old owner can persist nothing more; every time tick it did persist
    # was allocated before this point, so it is below what we allocate after it.
    # Allocating first and fencing after leaves a window in which the old owner,
    # still writing, persists a time tick above our first one.
    await backend.ensure_writable()
    if fenced_hook is not None:
        await fenced_hook()  # fenced, nothing written: the owner's last word on the open
    await allocator.sync()  # drop any batch fetched before the fence
    time_tick = await allocator.allocate()
    span.set_attribute(ATTR_TIME_TICK, time_tick)
    # Last confirmed = itself: its id is known only after the append, so ``_lc`` is
    # left out and decoding derives it (see docs/wire-format.md).
    msg = MutableMessage(MessageType.TIME_TICK).stamped(time_tick, None, node_id)
    payload, properties = encode(msg, log_format=log_format, term=term)
    message_id = await append_entry(backend, payload, properties)  # directly: no interceptors yet
    span.set_attribute(ATTR_MESSAGE_ID, str(message_id))
    return msg.into_immutable(message_id, term)


def _end(parent: Span, attempts: int, description: str) -> None:
    parent.set_attribute(ATTR_ATTEMPTS, attempts)
    parent.set_status(Status(StatusCode.ERROR, description))


def build_interceptor_params(
    first: ImmutableMessage,
    channel: ChannelInfo,
    backend: BackendWAL,
    allocator: TimestampAllocator,
    config: WALConfig,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> InterceptorParams:
    """The write-ahead buffer and MVCC start at the first time tick; ``wal`` is pending."""
    buffer = WriteAheadBuffer(
        first,
        capacity_bytes=config.buffer_capacity_bytes,
        keepalive=config.buffer_keepalive,
        channel=channel.name,
    )
    return InterceptorParams(
        channel=channel,
        first_message=first,
        buffer=buffer,
        mvcc=MVCCManager(first.time_tick),
        backend=backend,
        allocator=allocator,
        config=config,
        wal=asyncio.get_running_loop().create_future(),
        clock=clock,
    )


async def open_read_only(
    opener: BackendOpener, channel: str, config: WALConfig | None = None
) -> ReadOnlyWAL:
    """Open ``channel`` for reading only: no ownership, no fence, backend reads only."""
    validate_channel_name(channel)
    backend = with_chunking(await opener.open(channel, AccessMode.READ_ONLY))
    return ReadOnlyWAL(
        backend, opener.message_id_from_bytes, config if config is not None else WALConfig()
    )


async def _close_quietly(backend: BackendWAL) -> None:
    try:
        await backend.close()
    except Exception:
        _log.exception("channel %s: closing the backend after a failed open", backend.channel)
