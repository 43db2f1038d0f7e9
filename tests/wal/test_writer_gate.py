"""The ordered writer's gate: exclusion across a suspension, no suspension when free;
its fast lane (a cached time tick) keeps the log in order."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryOpener
from streamwal.tso.allocator import LocalAllocator
from streamwal.wal import MessageType, MutableMessage
from streamwal.wal.initializing import open_wal
from streamwal.wal.interceptors.timetick.writer import _Gate
from tests.wal.testkit import assert_strictly_increasing, log_messages


class _SlowSource:
    """A timestamp source whose fetch suspends: ``delay_s`` of sleep, or ``iterations``
    event-loop iterations; appends queue at the writer's gate meanwhile."""

    def __init__(self, *, delay_s: float = 0.0, iterations: int = 0) -> None:
        self.top = 1 << 30
        self.fetches = 0
        self._delay_s = delay_s
        self._iterations = iterations

    async def fetch(self, count: int) -> int:
        self.fetches += 1
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        for _ in range(self._iterations):
            await asyncio.sleep(0)
        self.top += count
        return self.top

    async def close(self) -> None:
        return None


def test_a_free_gate_is_entered_without_suspending() -> None:
    gate = _Gate()

    async def enter_and_leave() -> str:
        async with gate:
            return "done"

    coro = enter_and_leave()
    with pytest.raises(StopIteration) as stopped:
        coro.send(None)  # runs to the end in one step: no event-loop round trip
    assert stopped.value.value == "done"


async def test_holders_never_overlap_across_suspensions() -> None:
    gate = _Gate()
    inside = 0
    overlaps = 0
    order: list[int] = []

    async def worker(n: int) -> None:
        nonlocal inside, overlaps
        async with gate:
            inside += 1
            overlaps += inside > 1
            await asyncio.sleep(0)  # a suspension inside, like an allocator fetch
            await asyncio.sleep(0)
            order.append(n)
            inside -= 1

    await asyncio.gather(*(worker(n) for n in range(20)))
    assert overlaps == 0
    assert order == list(range(20))  # and in the order they arrived


async def test_a_waiter_cancelled_after_its_wake_up_passes_it_on() -> None:
    gate = _Gate()
    entered: list[str] = []

    async def waiter(name: str) -> None:
        async with gate:
            entered.append(name)

    await gate.__aenter__()  # this task holds the gate
    woken = asyncio.create_task(waiter("woken"))
    other = asyncio.create_task(waiter("other"))
    await asyncio.sleep(0)  # both wait now, "woken" first
    await gate.__aexit__(None, None, None)  # wakes "woken"...
    woken.cancel()  # ...which is cancelled before it runs
    await asyncio.wait_for(other, 1.0)  # would hang if the wake-up were lost
    assert entered == ["other"]
    with pytest.raises(asyncio.CancelledError):
        await woken


async def test_a_waiter_cancelled_while_waiting_leaves_no_trace() -> None:
    gate = _Gate()
    release = asyncio.Event()

    async def holder() -> None:
        async with gate:
            await release.wait()

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(gate.__aenter__())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    await first
    async with gate:  # free again, nobody left queued
        pass
    assert not gate._waiters


async def test_cached_and_fetched_time_ticks_interleave_in_log_order() -> None:
    """The writer's fast lane (a time tick from the allocator's cache, no gate) and its
    slow lane (a fetch that suspends inside the gate) never reorder the log."""

    source = _SlowSource(delay_s=0.001)  # appenders pile up behind the gate meanwhile
    store = MemoryLogStore()
    wal = await open_wal(MemoryOpener(store), "lanes", LocalAllocator(source, batch_size=7), 1)
    try:

        async def appender(n: int) -> list[int]:
            ticks = []
            for i in range(40):
                result = await wal.append(MutableMessage(MessageType.INSERT, b"%d/%d" % (n, i)))
                ticks.append(result.time_tick)
            return ticks

        per_appender = await asyncio.gather(*(appender(n) for n in range(16)))
    finally:
        await wal.close()
    assert source.fetches > 16 * 40 // 7  # the slow lane ran, many times
    for ticks in per_appender:
        assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)
    logged = log_messages(store, "lanes")
    assert_strictly_increasing(logged)
    inserted = [m for m in logged if m.type is MessageType.INSERT]
    assert len(inserted) == 16 * 40


async def test_appends_started_in_order_land_in_that_order() -> None:
    """A node's ProduceStream starts a stream's appends one after the other without
    waiting for each: they must land in the order they were started, also when the
    allocator runs dry and an append waits for a fetch while later ones arrive."""

    source = _SlowSource(iterations=3)  # a few loop iterations, as a fetch over gRPC
    store = MemoryLogStore()
    wal = await open_wal(MemoryOpener(store), "started", LocalAllocator(source, batch_size=5), 1)
    try:
        tasks = []
        for i in range(200):  # one new append per loop iteration, like requests arriving
            message = MutableMessage(MessageType.INSERT, b"%03d" % i)
            tasks.append(asyncio.ensure_future(wal.append(message)))
            await asyncio.sleep(0)
        results = await asyncio.gather(*tasks)
    finally:
        await wal.close()
    assert source.fetches >= 200 // 5
    logged = [m.payload for m in log_messages(store, "started") if m.type is MessageType.INSERT]
    assert logged == [b"%03d" % i for i in range(200)]
    ticks = [r.time_tick for r in results]
    assert ticks == sorted(ticks)
