"""Fixtures of the WAL unit tests: in-process backend, counter oracle, span capture."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamwal.adaptors.memory import MemoryLogStore
from streamwal.wal import WAL, WALConfig, open_wal
from tests.wal.testkit import BatchAllocator, CounterTSO, OpenOwner, RecordingOpener, fast_config


@pytest.fixture(scope="session")
def span_exporter() -> InMemorySpanExporter:
    """Spans of the whole session; installs an SDK provider unless one already exists."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(span_exporter: InMemorySpanExporter) -> Callable[[], list[ReadableSpan]]:
    """The spans finished since the test started, oldest first."""
    span_exporter.clear()
    return lambda: list(span_exporter.get_finished_spans())


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
    ) -> WAL:
        wal = await open_wal(
            opener if opener is not None else RecordingOpener(store),
            channel,
            allocator if allocator is not None else BatchAllocator(tso),
            node_id,
            config if config is not None else fast_config(),
        )
        opened.append(wal)
        return wal

    yield _open
    for wal in opened:
        await wal.close()
