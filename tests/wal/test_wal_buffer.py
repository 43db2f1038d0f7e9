"""The write-ahead buffer: bounds, floor, cursors, sealing."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.memory import MemoryMessageId
from streamwal.errors import BufferSealedError, ClosedError, EvictedError, InvalidInputError
from streamwal.wal import (
    DeliveryPolicy,
    ImmutableMessage,
    MessageType,
    MutableMessage,
    WriteAheadBuffer,
)
from streamwal.wal.write_ahead_buffer import BufferCursor, BufferEntry


def _msg(time_tick: int, offset: int | None = None, payload: bytes = b"") -> ImmutableMessage:
    offset = time_tick if offset is None else offset
    msg_type = MessageType.TIME_TICK if not payload else MessageType.INSERT
    return (
        MutableMessage(msg_type, payload)
        .stamped(time_tick, MemoryMessageId(0), 1)
        .into_immutable(MemoryMessageId(offset))
    )


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _buffer(
    capacity: int = 1 << 20, keepalive: float = 30.0, clock: _Clock | None = None
) -> WriteAheadBuffer:
    return WriteAheadBuffer(
        _msg(100), capacity_bytes=capacity, keepalive=keepalive, clock=clock or _Clock()
    )


async def _drain(cursor: BufferCursor, count: int) -> list[BufferEntry]:
    return [await asyncio.wait_for(cursor.next(), 1.0) for _ in range(count)]


def test_the_buffer_starts_with_the_first_time_tick() -> None:
    buffer = _buffer()
    assert buffer.floor == 99
    assert buffer.last_time_tick == 100
    assert len(buffer) == 1


async def test_eviction_by_size_keeps_the_newest_and_moves_the_floor() -> None:
    entry_size = _msg(101, payload=b"x" * 100).estimated_size
    buffer = _buffer(capacity=3 * entry_size)
    for tt in range(101, 111):
        buffer.append(_msg(tt, payload=b"x" * 100))
    assert len(buffer) == 3
    assert buffer.size_bytes <= 3 * entry_size
    assert buffer.floor == 107  # the last evicted entry
    cursor = buffer.read_after(buffer.floor)
    assert [e.time_tick for e in await _drain(cursor, 3)] == [108, 109, 110]


async def test_the_last_entry_stays_even_when_it_alone_exceeds_capacity() -> None:
    buffer = _buffer(capacity=10)
    buffer.append(_msg(101, payload=b"x" * 1000))
    assert len(buffer) == 1
    assert buffer.last_time_tick == 101
    assert buffer.floor == 100


async def test_eviction_by_keepalive() -> None:
    clock = _Clock()
    buffer = _buffer(keepalive=10.0, clock=clock)
    clock.now = 5.0
    buffer.append(_msg(101, payload=b"a"))
    clock.now = 12.0  # the first entry (added at 0) is now too old
    buffer.append_time_tick(102)
    assert buffer.floor == 100
    assert [e.time_tick for e in await _drain(buffer.read_after(100), 2)] == [101, 102]
    clock.now = 100.0
    assert buffer.evict() == 1  # everything is too old, but the last entry stays
    assert len(buffer) == 1 and buffer.floor == 101


async def test_read_after_older_than_the_floor_is_evicted() -> None:
    buffer = _buffer(capacity=1)
    buffer.append(_msg(101, payload=b"a"))
    buffer.append(_msg(102, payload=b"b"))
    assert buffer.floor == 101
    with pytest.raises(EvictedError):
        buffer.read_after(100)
    assert [e.time_tick for e in await _drain(buffer.read_after(101), 1)] == [102]


async def test_a_cursor_that_falls_behind_gets_evicted() -> None:
    buffer = _buffer(capacity=_msg(101, payload=b"a").estimated_size * 2)
    cursor = buffer.read_after(100)
    for tt in range(101, 106):
        buffer.append(_msg(tt, payload=b"a"))
    with pytest.raises(EvictedError):
        await cursor.next()


async def test_a_cursor_past_the_evicted_entries_is_not_evicted() -> None:
    buffer = _buffer(capacity=_msg(101, payload=b"a").estimated_size * 2)
    cursor = buffer.read_after(103)  # beyond the end: waits for > 103
    for tt in range(101, 106):
        buffer.append(_msg(tt, payload=b"a"))
    assert buffer.floor == 103
    assert [e.time_tick for e in await _drain(cursor, 2)] == [104, 105]


async def test_in_memory_time_ticks_are_entries_without_a_message() -> None:
    buffer = _buffer()
    buffer.append_time_tick(101)
    buffer.append(_msg(102, payload=b"a"))
    entries = await _drain(buffer.read_after(100), 2)
    assert entries[0].message is None and entries[0].time_tick == 101
    assert entries[1].message is not None


def test_time_ticks_must_increase() -> None:
    buffer = _buffer()
    with pytest.raises(InvalidInputError):
        buffer.append_time_tick(100)


async def test_a_sealed_buffer_is_drained_then_signals() -> None:
    buffer = _buffer()
    cursor = buffer.read_after(99)
    waiting = buffer.read_after(100)
    pending = asyncio.create_task(waiting.next())
    await asyncio.sleep(0)
    buffer.seal()
    buffer.append(_msg(101, payload=b"ignored"))
    assert buffer.last_time_tick == 100
    assert [e.time_tick for e in await _drain(cursor, 1)] == [100]
    with pytest.raises(BufferSealedError):
        await cursor.next()
    with pytest.raises(BufferSealedError):
        await asyncio.wait_for(pending, 1.0)
    with pytest.raises(BufferSealedError):
        buffer.read_after(100)


async def test_closing_a_cursor_wakes_its_reader() -> None:
    buffer = _buffer()
    cursor = buffer.read_after(100)
    pending = asyncio.create_task(cursor.next())
    await asyncio.sleep(0)
    cursor.close()
    with pytest.raises(ClosedError):
        await asyncio.wait_for(pending, 1.0)


def test_start_policy_names_where_the_backend_continues() -> None:
    buffer = _buffer(capacity=_msg(101, payload=b"a").estimated_size * 3)
    assert buffer.read_after(99).start_policy == DeliveryPolicy.start_from(MemoryMessageId(100))
    buffer.append_time_tick(101)
    buffer.append(_msg(102, payload=b"a"))
    buffer.append_time_tick(103)
    assert buffer.read_after(103).start_policy == DeliveryPolicy.start_after(MemoryMessageId(102))
    assert buffer.read_after(101).start_policy == DeliveryPolicy.start_after(MemoryMessageId(100))
    for tt in range(104, 110):
        buffer.append_time_tick(tt)
    # Every message in the buffer was evicted: continue after the last evicted one.
    assert buffer.read_after(109).start_policy == DeliveryPolicy.start_after(MemoryMessageId(102))


async def test_concurrent_readers_lose_nothing() -> None:
    buffer = _buffer()
    expected = list(range(101, 601))

    async def reader(after: int) -> list[int]:
        cursor = buffer.read_after(after)
        wanted = [tt for tt in expected if tt > after]
        return [e.time_tick for e in await _drain(cursor, len(wanted))]

    async def writer() -> None:
        for tt in expected:
            if tt % 2:
                buffer.append(_msg(tt, payload=b"m"))
            else:
                buffer.append_time_tick(tt)
            if tt % 7 == 0:
                await asyncio.sleep(0)

    readers = [asyncio.create_task(reader(100)) for _ in range(5)]
    await asyncio.sleep(0)
    write = asyncio.create_task(writer())
    await asyncio.sleep(0)
    late = asyncio.create_task(reader(buffer.last_time_tick))
    results = await asyncio.gather(*readers)
    await write
    assert all(result == expected for result in results)
    late_result = await late
    assert late_result == expected[len(expected) - len(late_result) :]
