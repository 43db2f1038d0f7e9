"""Appending: time ticks, pipelining, retries, fencing, periodic time ticks."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId
from streamwal.errors import ChannelFencedError, InvalidInputError, UnavailableError
from streamwal.wal import Backoff, MessageType, MutableMessage
from tests.wal.testkit import (
    BatchAllocator,
    CounterTSO,
    OpenOwner,
    ProxyBackend,
    RecordingOpener,
    assert_strictly_increasing,
    fast_config,
    insert,
    log_messages,
    wait_until,
)


async def test_an_append_is_persisted_with_its_stamps(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(node_id=5)
    result = await wal.append(
        MutableMessage(MessageType.CREATE_COLLECTION, b"c", vchannel="v1", properties={"a": "b"})
    )
    first, persisted = log_messages(store, channel)
    assert persisted.message_id == result.message_id
    assert persisted.time_tick == result.time_tick > wal.first_time_tick
    assert persisted.type is MessageType.CREATE_COLLECTION
    assert persisted.payload == b"c" and persisted.vchannel == "v1"
    assert persisted.properties == {"a": "b"}
    assert persisted.source == 5
    assert persisted.last_confirmed == first.message_id
    # When append returns, the message is in the write-ahead buffer and MVCC.
    assert wal.buffer.last_time_tick == result.time_tick
    assert wal.mvcc.get("v1").time_tick == result.time_tick


async def test_concurrent_appends_keep_time_ticks_increasing_in_log_order(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner, tso: CounterTSO
) -> None:
    wal = await open_owner(allocator=BatchAllocator(tso, batch_size=7))
    results = await asyncio.gather(*(wal.append(insert(b"%d" % i)) for i in range(300)))
    log = log_messages(store, channel)
    assert_strictly_increasing(log)
    by_id = {m.message_id: m for m in log}
    assert len(log) == 301
    for i, result in enumerate(results):
        assert by_id[result.message_id].payload == b"%d" % i
        assert by_id[result.message_id].time_tick == result.time_tick
    # A last-confirmed id never points at or beyond the message itself.
    for before, after in itertools.pairwise(log):
        assert after.last_confirmed <= before.message_id


async def test_appends_are_pipelined(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    opener = RecordingOpener(store, proxy=True)
    wal = await open_owner(opener=opener)
    (backend,) = opener.opened
    assert isinstance(backend, ProxyBackend)
    store.faults.append_delay = 0.02
    await asyncio.gather(*(wal.append(insert(b"%d" % i)) for i in range(32)))
    assert backend.max_in_flight == 32  # none waited for another's round trip
    assert_strictly_increasing(log_messages(store, channel))


async def test_a_retried_append_gets_a_fresh_time_tick(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner, tso: CounterTSO
) -> None:
    allocator = BatchAllocator(tso)
    wal = await open_owner(allocator=allocator)
    store.faults.fail_appends = 2
    before = len(allocator.allocated)
    result = await wal.append(insert(b"x"))
    tried = allocator.allocated[before:]
    assert len(tried) == 3 and tried[-1] == result.time_tick
    log = log_messages(store, channel)
    assert [m.payload for m in log].count(b"x") == 1
    assert log[-1].time_tick == result.time_tick


async def test_a_failed_append_never_lands_behind_a_higher_time_tick(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(pack_appends=False))  # one entry each
    store.faults.fail_appends = 1  # the first of the batch fails, the others pass
    results = await asyncio.gather(*(wal.append(insert(b"%d" % i)) for i in range(10)))
    log = log_messages(store, channel)
    assert_strictly_increasing(log)
    assert sorted(r.time_tick for r in results) == [m.time_tick for m in log[1:]]
    assert log[-1].payload == b"0"  # the failed one was retried after the others


async def test_retries_are_bounded(store: MemoryLogStore, open_owner: OpenOwner) -> None:
    config = fast_config(append_backoff=Backoff(initial=0.001, maximum=0.001, max_attempts=3))
    wal = await open_owner(config=config)
    store.faults.fail_appends = 10
    with pytest.raises(UnavailableError):
        await wal.append(insert(b"x"))
    assert store.faults.fail_appends == 7


async def test_invalid_input_is_not_retried(store: MemoryLogStore, open_owner: OpenOwner) -> None:
    wal = await open_owner()
    store.max_message_size = 200  # the entry: payload and the WAL's frame
    with pytest.raises(InvalidInputError):
        await wal.append(insert(b"x" * 201))
    with pytest.raises(InvalidInputError):  # time ticks are the WAL's own
        await wal.append(MutableMessage(MessageType.TIME_TICK))
    assert (await wal.append(insert(b"small"))).time_tick > wal.first_time_tick


async def test_a_fenced_wal_fails_fast_for_good_and_still_reads(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner, tso: CounterTSO
) -> None:
    allocator = BatchAllocator(tso)
    old = await open_owner(node_id=1, allocator=allocator)
    scanner = await old.read()
    assert (await scanner.__anext__()).message_id == old.first_message_id
    new = await open_owner(node_id=2)
    assert not old.is_fenced

    with pytest.raises(ChannelFencedError):
        await old.append(insert(b"late"))
    assert old.is_fenced
    allocated = len(allocator.allocated)
    for _ in range(3):
        with pytest.raises(ChannelFencedError):
            await old.append(insert(b"later"))
    assert len(allocator.allocated) == allocated  # failed fast: nothing allocated
    assert old.buffer.sealed

    result = await new.append(insert(b"new owner"))
    seen = [await asyncio.wait_for(scanner.__anext__(), 2.0) for _ in range(2)]
    assert [m.message_id for m in seen] == [new.first_message_id, result.message_id]
    await scanner.close()
    assert b"late" not in [m.payload for m in log_messages(store, channel)]


async def test_an_idle_channel_only_ticks_in_memory(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(time_tick_interval=0.002))
    await wait_until(lambda: len(wal.buffer) >= 5)
    assert len(log_messages(store, channel)) == 1  # nothing but the first time tick
    assert wal.mvcc.pchannel.time_tick > wal.first_time_tick
    assert wal.mvcc.pchannel.confirmed


async def test_a_dirty_channel_gets_one_persisted_time_tick_after_its_data(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(time_tick_interval=0.002))
    result = await wal.append(insert(b"x"))
    assert not wal.mvcc.get("v1").confirmed or wal.mvcc.get("v1").time_tick > result.time_tick
    await wait_until(lambda: len(log_messages(store, channel)) == 3)
    tick = log_messages(store, channel)[2]
    assert tick.type is MessageType.TIME_TICK and tick.time_tick > result.time_tick
    assert tick.last_confirmed == result.message_id
    buffered = len(wal.buffer)
    await wait_until(lambda: len(wal.buffer) >= buffered + 5)  # several more intervals
    assert len(log_messages(store, channel)) == 3  # clean again: in memory only
    assert wal.mvcc.get("v1").confirmed


async def test_a_failed_periodic_tick_is_persisted_at_the_next_interval(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(time_tick_interval=0.002))
    await wal.append(insert(b"x"))
    store.faults.fail_appends = 2
    await wait_until(lambda: len(log_messages(store, channel)) == 3)
    assert log_messages(store, channel)[2].type is MessageType.TIME_TICK
    assert store.faults.fail_appends == 0


async def test_a_takeover_seen_by_the_periodic_tick_fences_the_wal(
    store: MemoryLogStore, open_owner: OpenOwner
) -> None:
    old = await open_owner(node_id=1, config=fast_config(time_tick_interval=0.002))
    await old.append(insert(b"x"))  # dirty: the next tick is to be persisted
    store.faults.fail_appends = 1_000_000  # ... and fails, so the channel stays dirty
    await wait_until(lambda: store.faults.fail_appends < 1_000_000)
    new_owner = asyncio.create_task(open_owner(node_id=2))  # fences at once, then retries
    await wait_until(lambda: old.is_fenced)  # only the periodic tick can have noticed
    store.faults.fail_appends = 0
    await new_owner
    with pytest.raises(ChannelFencedError):
        await old.append(insert(b"y"))


async def test_the_allocator_failing_during_appends_is_retried(
    open_owner: OpenOwner, tso: CounterTSO
) -> None:
    allocator = BatchAllocator(tso)
    wal = await open_owner(allocator=allocator)
    allocator.fail_allocations = 2
    result = await wal.append(insert(b"x"))
    assert result.time_tick > wal.first_time_tick
    assert isinstance(result.message_id, MemoryMessageId)


async def test_the_first_acknowledged_append_is_dated_once_and_a_close_ends_the_wait(
    open_owner: OpenOwner,
) -> None:
    wal = await open_owner(node_id=5)
    waiting = asyncio.create_task(wal.first_acknowledged())
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the open's own first time tick is no acknowledged write
    before = time.time_ns()
    await wal.append(MutableMessage(MessageType.INSERT, b"a", vchannel="v1"))
    first = await asyncio.wait_for(waiting, 5)
    assert first is not None and before <= first <= time.time_ns()
    await wal.append_many([MutableMessage(MessageType.INSERT, b"b", vchannel="v1")])
    assert await wal.first_acknowledged() == first
    unused = await open_owner(node_id=6)
    waiting = asyncio.create_task(unused.first_acknowledged())
    await unused.close()
    assert await asyncio.wait_for(waiting, 5) is None
