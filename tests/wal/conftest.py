"""Fixtures of the WAL unit tests: in-process backend, counter oracle, span capture."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from streamwal.adaptors.memory import MemoryLogStore, MemoryOpener
from streamwal.wal import WAL, ReadOnlyWAL, WALConfig, open_read_only, open_wal
from streamwal_lab.chaos.spans import capture_spans
from tests.wal.testkit import (
    BatchAllocator,
    CounterTSO,
    OpenOwner,
    OpenReader,
    RecordingOpener,
    fast_config,
)


@pytest.fixture
def spans() -> Iterator[Callable[[], list[ReadableSpan]]]:
    """The spans finished since the test started, oldest first. Kept during the test
    only: an exporter on the session's provider would keep every later test's spans."""
    with capture_spans() as capture:
        yield capture.get_finished_spans


@pytest.fixture
def channel() -> str:
    return f"ch-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store() -> MemoryLogStore:
    return MemoryLogStore()


@pytest.fixture
def opener(store: MemoryLogStore) -> RecordingOpener:
    return RecordingOpener(store)


@pytest.fixture
def tso() -> CounterTSO:
    return CounterTSO()


@pytest.fixture
def allocator(tso: CounterTSO) -> BatchAllocator:
    return BatchAllocator(tso)


@pytest.fixture
async def open_owner(
    store: MemoryLogStore, tso: CounterTSO, channel: str
) -> AsyncIterator[OpenOwner]:
    """Opens owners of ``channel`` (each its own opener and allocator); closes them after."""
    opened: list[WAL] = []

    async def _open(
        node_id: int = 1,
        config: WALConfig | None = None,
        allocator: BatchAllocator | None = None,
        opener: RecordingOpener | None = None,
        clock: Callable[[], float] = time.monotonic,
        term: int = 0,
    ) -> WAL:
        wal = await open_wal(
            opener if opener is not None else RecordingOpener(store),
            channel,
            allocator if allocator is not None else BatchAllocator(tso),
            node_id,
            config if config is not None else fast_config(),
            clock=clock,
            term=term,
        )
        opened.append(wal)
        return wal

    yield _open
    for wal in opened:
        await wal.close()


@pytest.fixture
async def open_reader(store: MemoryLogStore, channel: str) -> AsyncIterator[OpenReader]:
    """Opens read-only WALs of ``channel`` (the tests' config); closes them after."""
    async with contextlib.AsyncExitStack() as readers:

        async def _open() -> ReadOnlyWAL:
            reader = await open_read_only(MemoryOpener(store), channel, fast_config())
            return await readers.enter_async_context(reader)

        yield _open
