"""Fence before allocate: the log's time ticks never go back when owners change."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from streamwal.adaptors.memory import MemoryLogStore
from streamwal.errors import ChannelFencedError
from streamwal.wal import WAL, AccessMode, MessageType, MutableMessage, encode
from streamwal.wal.backend import BackendWAL, append_entry
from tests.wal.testkit import (
    BatchAllocator,
    CounterTSO,
    OpenOwner,
    RecordingOpener,
    assert_strictly_increasing,
    log_messages,
)


async def _allocate_then_fence(
    backend: BackendWAL, allocator: BatchAllocator, node_id: int, race: asyncio.Event
) -> int:
    """The WRONG order, on purpose: a first time tick allocated before the fence."""
    await allocator.sync()
    time_tick = await allocator.allocate()
    race.set()  # the window: the old owner is still the writer
    await asyncio.sleep(0.01)
    await backend.ensure_writable()
    msg = MutableMessage(MessageType.TIME_TICK).stamped(time_tick, None, node_id)
    await append_entry(backend, *encode(msg))
    return time_tick


async def _old_owner_appends_with_a_fresh_range(old: WAL, allocator: BatchAllocator) -> bool:
    """The old owner fetches a new timestamp range and appends; whether it persisted."""
    await allocator.sync()
    try:
        await old.append(MutableMessage(MessageType.INSERT, b"late", vchannel="v"))
    except ChannelFencedError:
        return False
    return True


async def _old_owner(open_owner: OpenOwner, tso: CounterTSO) -> tuple[WAL, BatchAllocator]:
    """The owner the race is against, one append made, and its allocator."""
    allocator = BatchAllocator(tso)
    old = await open_owner(node_id=1, allocator=allocator)
    await old.append(MutableMessage(MessageType.INSERT, b"a", vchannel="v"))
    return old, allocator


async def test_the_wrong_order_would_regress(
    store: MemoryLogStore, tso: CounterTSO, channel: str, open_owner: OpenOwner
) -> None:
    old, old_allocator = await _old_owner(open_owner, tso)

    race = asyncio.Event()
    backend = await RecordingOpener(store).open(channel, AccessMode.READ_WRITE)
    new_first = asyncio.create_task(_allocate_then_fence(backend, BatchAllocator(tso), 2, race))
    await race.wait()
    assert await _old_owner_appends_with_a_fresh_range(old, old_allocator)
    first_time_tick = await new_first

    ticks = [m.time_tick for m in log_messages(store, channel)]
    assert ticks[-1] == first_time_tick
    assert max(ticks[:-1]) > first_time_tick  # the regression the right order prevents
    with pytest.raises(AssertionError):
        assert_strictly_increasing(log_messages(store, channel))
    await backend.close()


async def test_the_fence_comes_before_the_allocation(
    store: MemoryLogStore, tso: CounterTSO, channel: str, open_owner: OpenOwner
) -> None:
    old, old_allocator = await _old_owner(open_owner, tso)

    # The same race, at the same point of the new owner's open: right after its fence,
    # the old owner fetches a fresh range and appends.
    new_allocator = BatchAllocator(tso)
    persisted: list[bool] = []

    async def race() -> None:
        new_allocator.on_sync = None
        persisted.append(await _old_owner_appends_with_a_fresh_range(old, old_allocator))

    new_allocator.on_sync = race
    new = await open_owner(node_id=2, allocator=new_allocator)

    assert persisted == [False]  # fenced: the old owner persisted nothing more
    assert old.is_fenced
    log = log_messages(store, channel)
    assert_strictly_increasing(log)
    assert log[-1].time_tick == new.first_time_tick
    assert log[-1].type is MessageType.TIME_TICK and log[-1].source == 2


async def test_owners_in_turn_with_concurrent_appenders(
    store: MemoryLogStore, tso: CounterTSO, channel: str, open_owner: OpenOwner
) -> None:
    """Three takeovers while the current owner's appenders fetch fresh ranges and append."""
    acknowledged: list[bytes] = []
    owners: list[WAL] = []

    async def appender(wal: WAL, allocator: BatchAllocator, name: str) -> None:
        for i in range(10_000):
            if i % 3 == 0:
                await allocator.sync()  # a freshly fetched range, as after a batch runs out
            payload = f"{name}-{i}".encode()
            try:
                await wal.append(MutableMessage(MessageType.INSERT, payload, vchannel="v"))
            except ChannelFencedError:
                return
            acknowledged.append(payload)

    tasks: list[asyncio.Task[None]] = []
    for node_id in range(1, 5):
        allocator = BatchAllocator(tso, batch_size=1)  # every allocation a fresh fetch
        # A fence takes a round trip, during which the old owner keeps appending.
        opener = RecordingOpener(store, fence_delay=0.002)
        owners.append(await open_owner(node_id=node_id, allocator=allocator, opener=opener))
        tasks += [
            asyncio.create_task(appender(owners[-1], allocator, f"n{node_id}a{k}"))
            for k in range(4)
        ]
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.02)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task

    log = log_messages(store, channel)
    assert_strictly_increasing(log)
    payloads = [m.payload for m in log if m.type is MessageType.INSERT]
    assert len(payloads) == len(set(payloads))
    assert set(acknowledged) <= set(payloads)
    assert len(acknowledged) > 20  # the owners did append while racing
    assert all(owner.is_fenced for owner in owners[:-1])
    for owner in owners:
        (first_index,) = [i for i, m in enumerate(log) if m.message_id == owner.first_message_id]
        first = log[first_index]
        assert first.type is MessageType.TIME_TICK and first.source == owner.node_id
        assert all(m.time_tick < first.time_tick for m in log[:first_index])
        # Nothing of an older owner after a newer owner's first time tick.
        assert all(m.source >= owner.node_id for m in log[first_index:])
