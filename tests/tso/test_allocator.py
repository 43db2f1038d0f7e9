"""LocalAllocator against scripted sources (no oracle, no etcd)."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.errors import (
    ClosedError,
    InvalidInputError,
    TimestampRegressionError,
    UnavailableError,
)
from streamwal.tso.allocator import LocalAllocator, TimestampAllocator, TimestampSource
from streamwal.tso.timestamp import compose


class CountingSource:
    """Hands out consecutive ranges from a counter; can be gated, failed or rewound."""

    def __init__(self, start: int = compose(1_700_000_000_000, 0)) -> None:
        self.top = start
        self.calls: list[int] = []
        self.gate: asyncio.Event | None = None
        self.fail_with: Exception | None = None
        self.closed = False

    async def fetch(self, count: int) -> int:
        self.calls.append(count)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        self.top += count
        return self.top

    async def close(self) -> None:
        self.closed = True


async def test_allocate_hands_out_a_cached_range_in_order() -> None:
    source = CountingSource()
    allocator = LocalAllocator(source, batch_size=100)
    assert isinstance(allocator, TimestampAllocator)
    assert isinstance(source, TimestampSource)
    values = [await allocator.allocate() for _ in range(250)]
    assert values == list(range(values[0], values[0] + 250))
    assert source.calls == [100, 100, 100]
    assert allocator.cached == 50
    assert allocator.last == values[-1]


async def test_sync_drops_the_cached_range() -> None:
    source = CountingSource()
    allocator = LocalAllocator(source, batch_size=100)
    first = await allocator.allocate()
    await allocator.sync()
    assert allocator.cached == 0
    second = await allocator.allocate()
    assert len(source.calls) == 2
    # The second value comes from a fresh range, past everything the first held.
    assert second == first + 100


async def test_a_range_below_the_previous_one_is_rejected_and_never_handed_out() -> None:
    source = CountingSource()
    allocator = LocalAllocator(source, batch_size=10)
    handed = [await allocator.allocate() for _ in range(10)]
    source.top -= 15  # the next range overlaps what was handed out
    with pytest.raises(TimestampRegressionError):
        await allocator.allocate()
    assert allocator.last == handed[-1]
    source.top += 15  # a well-behaved source again: strictly above the last range
    nxt = await allocator.allocate()
    assert nxt > handed[-1]


async def test_a_repeated_range_is_rejected() -> None:
    class Repeating(CountingSource):
        async def fetch(self, count: int) -> int:
            self.calls.append(count)
            return 10_000

    allocator = LocalAllocator(Repeating(), batch_size=10)
    assert await allocator.allocate() == 9_991
    await allocator.sync()
    with pytest.raises(TimestampRegressionError):
        await allocator.allocate()


async def test_concurrent_callers_share_one_fetch() -> None:
    source = CountingSource()
    source.gate = asyncio.Event()
    allocator = LocalAllocator(source, batch_size=100)
    callers = [asyncio.create_task(allocator.allocate()) for _ in range(20)]
    await asyncio.sleep(0.01)
    assert source.calls == [100]
    source.gate.set()
    values = await asyncio.gather(*callers)
    assert len(set(values)) == 20
    assert source.calls == [100]


async def test_a_failed_fetch_reaches_every_waiter_and_the_next_call_retries() -> None:
    source = CountingSource()
    source.gate = asyncio.Event()
    source.fail_with = UnavailableError("etcd is down")
    allocator = LocalAllocator(source, batch_size=10)
    callers = [asyncio.create_task(allocator.allocate()) for _ in range(3)]
    await asyncio.sleep(0.01)
    source.gate.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, UnavailableError) for r in results)
    source.fail_with = None
    assert await allocator.allocate() > 0
    assert len(source.calls) == 2


async def test_cancelling_one_caller_does_not_cancel_the_shared_fetch() -> None:
    source = CountingSource()
    source.gate = asyncio.Event()
    allocator = LocalAllocator(source, batch_size=10)
    first = asyncio.create_task(allocator.allocate())
    second = asyncio.create_task(allocator.allocate())
    await asyncio.sleep(0.01)
    first.cancel()
    source.gate.set()
    assert await second > 0
    assert first.cancelled()
    assert source.calls == [10]


async def test_sync_during_a_fetch_discards_its_range() -> None:
    source = CountingSource()
    source.gate = asyncio.Event()
    allocator = LocalAllocator(source, batch_size=10)
    waiter = asyncio.create_task(allocator.allocate())
    await asyncio.sleep(0.01)
    await allocator.sync()
    source.gate.set()
    value = await waiter
    # The range fetched before sync() was dropped; the value is from a later fetch.
    assert source.calls == [10, 10]
    assert value == source.top - 9


async def test_alloc_returns_consecutive_ranges_even_larger_than_a_batch() -> None:
    source = CountingSource()
    allocator = LocalAllocator(source, batch_size=10)
    first, last = await allocator.alloc(4)
    assert last - first == 3
    f2, l2 = await allocator.alloc(25)
    assert (f2, l2 - f2) == (last + 7, 24)  # leftover of 6 dropped: too small for 25
    assert await allocator.allocate() == l2 + 1  # the 25-range was used up exactly
    with pytest.raises(InvalidInputError):
        await allocator.alloc(0)


async def test_close_fails_waiters_and_later_calls() -> None:
    source = CountingSource()
    source.gate = asyncio.Event()
    allocator = LocalAllocator(source, batch_size=10, close_source=True)
    waiter = asyncio.create_task(allocator.allocate())
    await asyncio.sleep(0.01)
    await allocator.close()
    with pytest.raises(ClosedError):
        await waiter
    with pytest.raises(ClosedError):
        await allocator.allocate()
    with pytest.raises(ClosedError):
        await allocator.sync()
    assert source.closed
    await allocator.close()  # idempotent


@pytest.mark.parametrize("batch_size", [0, -1, 1 << 18, True])
def test_batch_size_is_validated(batch_size: int) -> None:
    with pytest.raises(InvalidInputError, match="batch_size"):
        LocalAllocator(CountingSource(), batch_size=batch_size)


async def test_a_range_is_dropped_once_it_is_older_than_its_max_age() -> None:
    # the physical part is the TSO's clock at the fetch: a range kept for long would
    # stamp a sparse channel's time ticks far behind the time of its writes
    source = CountingSource()
    allocator = LocalAllocator(source, batch_size=100, max_age_s=0.05)
    first = await allocator.allocate()
    assert allocator.allocate_cached() == first + 1
    await asyncio.sleep(0.2)
    assert allocator.cached == 0 and allocator.allocate_cached() is None
    second = await allocator.allocate()
    assert source.calls == [100, 100] and second > first + 1
    await allocator.close()
    with pytest.raises(InvalidInputError):
        LocalAllocator(source, max_age_s=0)
