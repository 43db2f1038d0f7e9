"""Opening a channel: the first time tick's traced retries, fence, cancellation."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from streamwal.adaptors.memory import MemoryBackendWAL, MemoryLogStore
from streamwal.errors import ChannelFencedError, ClosedError, UnavailableError
from streamwal.wal import (
    WAL,
    AccessMode,
    Backoff,
    MessageType,
    WALConfig,
    open_wal,
    send_first_time_tick,
)
from streamwal.wal.initializing import (
    ATTR_ATTEMPT,
    ATTR_ATTEMPTS,
    ATTR_BACKOFF_MS,
    ATTR_CHANNEL,
    ATTR_FIRST_TIME_TICK,
    ATTR_MESSAGE_ID,
    ATTR_NODE_ID,
    ATTR_TIME_TICK,
)
from tests.wal.testkit import BatchAllocator, RecordingOpener, fast_config, log_messages, wait_until

Spans = Callable[[], list[ReadableSpan]]
OpenAndClose = Callable[[int, WALConfig], Awaitable[WAL]]


@pytest.fixture
def open_and_close(
    opener: RecordingOpener, allocator: BatchAllocator, channel: str
) -> OpenAndClose:
    """Opens the test's channel as node ``node_id`` and closes it at once: what these
    tests look at is the open's own work (first time tick, spans, log lines)."""

    async def _open(node_id: int, config: WALConfig) -> WAL:
        wal = await open_wal(opener, channel, allocator, node_id, config)
        await wal.close()
        return wal

    return _open


def _named(spans: list[ReadableSpan], name: str, channel: str | None = None) -> list[ReadableSpan]:
    found = [s for s in spans if s.name == name]
    if channel is not None:
        found = [s for s in found if (s.attributes or {}).get(ATTR_CHANNEL) == channel]
    return found


def _attempts(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    children = [
        s
        for s in spans
        if s.name == "wal.first_time_tick.attempt"
        and s.parent is not None
        and s.parent.span_id == parent.context.span_id
    ]
    return sorted(children, key=lambda s: (s.attributes or {})[ATTR_ATTEMPT])  # type: ignore[arg-type,return-value]


def _open_span(spans: Spans, channel: str) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The channel's one ``wal.open`` span, and its attempts in order."""
    (opened,) = _named(spans(), "wal.open", channel)
    return opened, _attempts(spans(), opened)


def _exception_types(span: ReadableSpan) -> list[str]:
    return [
        str((e.attributes or {}).get("exception.type"))
        for e in span.events
        if e.name == "exception"
    ]


async def test_failed_attempts_are_retried_and_traced(
    store: MemoryLogStore, channel: str, spans: Spans, open_and_close: OpenAndClose
) -> None:
    store.faults.fail_ensure_writable = 2
    store.faults.fail_appends = 1
    config = fast_config(first_time_tick_backoff=Backoff(initial=0.002, maximum=0.004))

    wal = await open_and_close(7, config)

    opened, attempts = _open_span(spans, channel)
    assert len(attempts) == 4  # N = 3 failures, then success
    attrs = [dict(s.attributes or {}) for s in attempts]
    assert [a[ATTR_ATTEMPT] for a in attrs] == [1, 2, 3, 4]
    assert [a[ATTR_BACKOFF_MS] for a in attrs] == [0.0, 2.0, 4.0, 4.0]
    assert [a[ATTR_NODE_ID] for a in attrs] == [7, 7, 7, 7]  # each span names its node
    # The first two failed at the fence, before any allocation; the third at the append.
    assert [ATTR_TIME_TICK in a for a in attrs] == [False, False, True, True]
    assert [ATTR_MESSAGE_ID in a for a in attrs] == [False, False, False, True]
    for failed in attempts[:3]:
        assert failed.status.status_code is StatusCode.ERROR
        assert _exception_types(failed) == ["streamwal.errors.UnavailableError"]
    assert attempts[3].status.status_code is not StatusCode.ERROR
    assert _exception_types(attempts[3]) == []

    # The waits follow the schedule (lower bounds: a sleep is never shorter).
    for before, after in itertools.pairwise(attempts):
        gap_ms = ((after.start_time or 0) - (before.end_time or 0)) / 1e6
        assert gap_ms >= (after.attributes or {})[ATTR_BACKOFF_MS] * 0.9  # type: ignore[operator]

    # The outcome is on the parent.
    parent = dict(opened.attributes or {})
    assert parent[ATTR_NODE_ID] == 7
    assert parent[ATTR_ATTEMPTS] == 4
    assert opened.status.status_code is StatusCode.OK
    first = log_messages(store, channel)[0]
    assert first.type is MessageType.TIME_TICK
    assert parent[ATTR_FIRST_TIME_TICK] == first.time_tick == attrs[3][ATTR_TIME_TICK]
    assert parent[ATTR_MESSAGE_ID] == str(first.message_id) == attrs[3][ATTR_MESSAGE_ID]
    assert first.source == 7 and first.last_confirmed == first.message_id
    assert wal.first_time_tick == first.time_tick
    assert wal.open_attempts == 4


async def test_a_tso_failure_is_retried_like_an_append_failure(
    allocator: BatchAllocator, channel: str, spans: Spans, open_and_close: OpenAndClose
) -> None:
    allocator.fail_syncs = 1
    allocator.fail_allocations = 1

    await open_and_close(1, fast_config())

    opened, attempts = _open_span(spans, channel)
    assert len(attempts) == 3
    assert [_exception_types(s) for s in attempts] == [
        ["streamwal.errors.UnavailableError"],
        ["streamwal.errors.UnavailableError"],
        [],
    ]
    assert (opened.attributes or {})[ATTR_ATTEMPTS] == 3


async def test_a_fenced_owner_makes_exactly_one_attempt(
    store: MemoryLogStore, channel: str, allocator: BatchAllocator, spans: Spans
) -> None:
    old = await RecordingOpener(store).open(channel, AccessMode.READ_WRITE)
    new = await RecordingOpener(store).open(channel, AccessMode.READ_WRITE)
    await old.ensure_writable()
    await new.ensure_writable()  # the newer owner fences the old one

    tracer = trace.get_tracer(__name__)
    with (
        tracer.start_as_current_span("test.parent") as parent_span,
        pytest.raises(ChannelFencedError),
    ):
        await send_first_time_tick(old, allocator, 1, Backoff(initial=0.001, maximum=0.001))

    (parent,) = [s for s in spans() if s.context.span_id == parent_span.get_span_context().span_id]
    attempts = _attempts(spans(), parent)
    assert len(attempts) == 1
    assert _exception_types(attempts[0]) == ["streamwal.errors.ChannelFencedError"]
    assert (parent.attributes or {})[ATTR_ATTEMPTS] == 1
    assert parent.status.status_code is StatusCode.ERROR
    assert allocator.allocated == []  # fenced before anything was allocated


async def test_cancellation_during_a_backoff_wait_ends_the_open_promptly(
    store: MemoryLogStore,
    opener: RecordingOpener,
    allocator: BatchAllocator,
    channel: str,
    spans: Spans,
) -> None:
    store.faults.fail_ensure_writable = 1_000_000
    config = fast_config(first_time_tick_backoff=Backoff(initial=60.0, maximum=60.0))
    task = asyncio.create_task(open_wal(opener, channel, allocator, 1, config))
    await wait_until(lambda: len(_named(spans(), "wal.first_time_tick.attempt")) == 1)

    task.cancel()
    # A 60 s backoff: only a prompt cancellation ends within the 5 s bound.
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5.0)

    (opened,) = _named(spans(), "wal.open", channel)
    assert opened.status.status_code is StatusCode.ERROR
    assert (opened.attributes or {})[ATTR_ATTEMPTS] == 1
    (backend,) = opener.opened
    assert isinstance(backend, MemoryBackendWAL)
    with pytest.raises(ClosedError):  # the failed open closed its backend
        await backend.ensure_writable()


async def test_open_logs_start_failures_and_success(
    store: MemoryLogStore, caplog: pytest.LogCaptureFixture, open_and_close: OpenAndClose
) -> None:
    store.faults.fail_appends = 2
    caplog.set_level(logging.INFO, logger="streamwal.wal.initializing")
    wal = await open_and_close(1, fast_config())

    records = [r for r in caplog.records if r.name == "streamwal.wal.initializing"]
    assert [r.levelno for r in records] == [
        logging.INFO,
        logging.WARNING,
        logging.WARNING,
        logging.INFO,
    ]
    assert "next attempt in 1 ms" in records[1].getMessage()
    assert "next attempt in 2 ms" in records[2].getMessage()
    assert str(wal.first_message_id) in records[3].getMessage()
    assert str(wal.first_time_tick) in records[3].getMessage()


async def test_a_fenced_open_logs_an_error(
    store: MemoryLogStore, channel: str, allocator: BatchAllocator, caplog: pytest.LogCaptureFixture
) -> None:
    old = await RecordingOpener(store).open(channel, AccessMode.READ_WRITE)
    await old.ensure_writable()
    await (await RecordingOpener(store).open(channel, AccessMode.READ_WRITE)).ensure_writable()
    with pytest.raises(ChannelFencedError):
        await send_first_time_tick(old, allocator, 1, Backoff(initial=0.001, maximum=0.001))
    assert [r.levelno for r in caplog.records if r.name == "streamwal.wal.initializing"][
        -1
    ] == logging.ERROR


async def test_bounded_attempts_end_with_the_last_error(
    store: MemoryLogStore, channel: str, allocator: BatchAllocator
) -> None:
    backend = await RecordingOpener(store).open(channel, AccessMode.READ_WRITE)
    store.faults.fail_ensure_writable = 10
    with pytest.raises(UnavailableError):
        await send_first_time_tick(
            backend, allocator, 1, Backoff(initial=0.001, maximum=0.001, max_attempts=3)
        )
    assert store.faults.fail_ensure_writable == 7
