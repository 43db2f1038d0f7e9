"""Test doubles for the WAL unit tests: a counter oracle, a batching allocator, proxies."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Final

from streamwal.adaptors.memory import (
    MemoryBackendWAL,
    MemoryLogStore,
    MemoryMessageId,
    MemoryOpener,
)
from streamwal.errors import UnavailableError
from streamwal.wal.backend import (
    AccessMode,
    AppendCallback,
    BackendMessage,
    BackendScanner,
    DeliveryPolicy,
)
from streamwal.wal.config import Backoff, WALConfig
from streamwal.wal.message import ImmutableMessage, MessageType, MutableMessage
from streamwal.wal.message.codec import decode_entry
from streamwal.wal.message_id import MessageId
from streamwal.wal.scanner import Scanner
from streamwal.wal.wal import WAL, ReadOnlyWAL

Hook = Callable[[], Awaitable[None]]
OpenOwner = Callable[..., Coroutine[Any, Any, WAL]]
"""The ``open_owner`` fixture: opens an owner of the test's channel, closed at teardown."""
OpenReader = Callable[[], Awaitable[ReadOnlyWAL]]
"""The ``open_reader`` fixture: opens a read-only WAL of the test's channel, closed at
teardown."""


class CounterTSO:
    """The oracle: hands out disjoint, increasing ranges of one counter."""

    def __init__(self, start: int = 1000) -> None:
        self._next = start

    async def fetch(self, count: int) -> range:
        await asyncio.sleep(0)  # a round trip: lets other tasks run, as a real RPC would
        issued = range(self._next, self._next + count)
        self._next += count
        return issued

    @property
    def issued_up_to(self) -> int:
        return self._next - 1


class ManualClock:
    """A monotonic clock that moves only when told: elapsed time without sleeping."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class BatchAllocator:
    """Serves timestamps from a fetched batch; ``sync()`` drops the batch.

    Failure injection: ``fail_syncs`` / ``fail_allocations`` fail that many calls with
    ``UnavailableError``. ``on_sync`` runs at the end of every successful ``sync()``.
    """

    def __init__(self, tso: CounterTSO, batch_size: int = 100) -> None:
        self._tso = tso
        self._batch_size = batch_size
        self._batch: list[int] = []
        self.allocated: list[int] = []
        self.fail_syncs = 0
        self.fail_allocations = 0
        self.syncs = 0
        self.on_sync: Hook | None = None

    async def sync(self) -> None:
        await asyncio.sleep(0)
        if self.fail_syncs > 0:
            self.fail_syncs -= 1
            raise UnavailableError("injected: TSO unreachable on sync")
        self._batch = []
        self.syncs += 1
        if self.on_sync is not None:
            await self.on_sync()

    async def allocate(self) -> int:
        if self.fail_allocations > 0:
            self.fail_allocations -= 1
            raise UnavailableError("injected: TSO unreachable on allocate")
        if not self._batch:
            self._batch = list(await self._tso.fetch(self._batch_size))
        value = self._batch.pop(0)
        self.allocated.append(value)
        return value


class ProxyBackend:
    """Delegates to a memory backend; records the most appends ever in flight.

    ``fence_delay``: ``ensure_writable()`` takes that long before it fences, like the
    round trip to a broker creating a producer. ``fail_reads`` / ``fail_scans`` fail
    that many reader creations / reads with ``UnavailableError``; ``reads`` records the
    policies readers were opened with; ``close_delay``: a reader's close takes that
    long, as one waiting on the broker's answer.
    """

    def __init__(self, inner: MemoryBackendWAL, fence_delay: float = 0.0) -> None:
        self.inner = inner
        self.fence_delay = fence_delay
        self.in_flight = 0
        self.max_in_flight = 0
        self.appends = 0
        self.fail_reads = 0
        self.fail_scans = 0
        self.close_delay = 0.0
        self.reads: list[DeliveryPolicy] = []
        self.channel: Final = inner.channel
        self.access_mode: Final = inner.access_mode

    async def ensure_writable(self) -> None:
        if self.fence_delay > 0:
            await asyncio.sleep(self.fence_delay)
        await self.inner.ensure_writable()

    def submit(self, payload: bytes, properties: Mapping[str, str], done: AppendCallback) -> None:
        self.appends += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

        def answered(message_id: MessageId | None, error: BaseException | None) -> None:
            self.in_flight -= 1
            done(message_id, error)

        self.inner.submit(payload, properties, answered)

    async def read(self, policy: DeliveryPolicy) -> BackendScanner:
        self.reads.append(policy)
        if self.fail_reads > 0:
            self.fail_reads -= 1
            raise UnavailableError("injected: cannot open a reader")
        return _FlakyScanner(await self.inner.read(policy), self)

    async def close(self) -> None:
        await self.inner.close()


class _FlakyScanner:
    def __init__(self, inner: BackendScanner, owner: ProxyBackend) -> None:
        self._inner = inner
        self._owner = owner

    def __aiter__(self) -> _FlakyScanner:
        return self

    async def __anext__(self) -> BackendMessage:
        if self._owner.fail_scans > 0:
            self._owner.fail_scans -= 1
            raise UnavailableError("injected: reader lost its connection")
        return await self._inner.__anext__()

    async def close(self) -> None:
        if self._owner.close_delay > 0:
            await asyncio.sleep(self._owner.close_delay)
        await self._inner.close()


class RecordingOpener:
    """A memory opener that keeps every backend it opened (wrapped if ``proxy``)."""

    name = "memory"

    def __init__(
        self, store: MemoryLogStore, proxy: bool = False, fence_delay: float = 0.0
    ) -> None:
        self._inner = MemoryOpener(store)
        self._proxy = proxy or fence_delay > 0
        self._fence_delay = fence_delay
        self.opened: list[MemoryBackendWAL | ProxyBackend] = []

    async def open(self, channel: str, mode: AccessMode) -> MemoryBackendWAL | ProxyBackend:
        backend: MemoryBackendWAL | ProxyBackend = await self._inner.open(channel, mode)
        if self._proxy and isinstance(backend, MemoryBackendWAL):
            backend = ProxyBackend(backend, self._fence_delay)
        self.opened.append(backend)
        return backend

    def message_id_from_bytes(self, data: bytes) -> MemoryMessageId:
        return self._inner.message_id_from_bytes(data)

    async def close(self) -> None:
        await self._inner.close()


def insert(payload: bytes, vchannel: str = "v1") -> MutableMessage:
    """An INSERT of ``payload`` on ``vchannel``: the plain message most tests append."""
    return MutableMessage(MessageType.INSERT, payload, vchannel=vchannel)


def fast_config(**overrides: object) -> WALConfig:
    """Millisecond backoffs and no periodic tick unless asked: fast, deterministic tests."""
    values: dict[str, object] = {
        "first_time_tick_backoff": Backoff(initial=0.001, maximum=0.004),
        "append_backoff": Backoff(initial=0.001, maximum=0.004, max_attempts=5),
        "scanner_backoff": Backoff(initial=0.001, maximum=0.01),
        "time_tick_interval": 3600.0,
        "close_timeout": 2.0,
    }
    values.update(overrides)
    return WALConfig(**values)  # type: ignore[arg-type]


def log_messages(store: MemoryLogStore, channel: str) -> list[ImmutableMessage]:
    """Every message of the channel's log, decoded, a pack's one by one (fails on a
    foreign entry)."""
    return [
        msg
        for raw in store.entries(channel)
        for msg in decode_entry(raw, MemoryMessageId.from_bytes)
    ]


def assert_strictly_increasing(messages: list[ImmutableMessage]) -> None:
    ticks = [m.time_tick for m in messages]
    for before, after in itertools.pairwise(ticks):
        assert after > before, f"time tick regression in the log: {before} then {after}"


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` until true; fail the test after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.002)


async def take(scanner: Scanner, count: int, timeout: float = 2.0) -> list[ImmutableMessage]:
    """The next ``count`` messages of ``scanner``, each within ``timeout`` seconds: a
    missing message fails the test instead of hanging it."""
    return [await asyncio.wait_for(scanner.__anext__(), timeout) for _ in range(count)]


async def read_payloads(
    wal: WAL, policy: DeliveryPolicy, count: int, timeout: float = 2.0
) -> list[bytes]:
    """The payloads of the first ``count`` appended messages a read from ``policy``
    delivers (time ticks left out); the scanner is closed."""
    scanner = await wal.read(policy, appended_only=True)
    try:
        return [message.payload for message in await take(scanner, count, timeout)]
    finally:
        await scanner.close()


async def take_and_close(
    scanner: Scanner, count: int, timeout: float = 5.0
) -> list[ImmutableMessage]:
    """The next ``count`` messages of ``scanner`` within ``timeout`` seconds in all; the
    scanner is closed after, whatever the read raised."""
    got: list[ImmutableMessage] = []
    try:
        async with asyncio.timeout(timeout):
            async for message in scanner:
                got.append(message)
                if len(got) == count:
                    break
    finally:
        await scanner.close()
    return got
