"""A node's read-only handles (unit: the in-process backend): one per channel, shared
by its readers, closed with the last one; a channel that does not exist is not found
and is not created by asking."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryOpener
from streamwal.errors import ClosedError, NoSuchChannelError
from streamwal.node.read_only import ReadOnlyChannels
from streamwal.wal.backend import DeliveryPolicy
from streamwal.wal.initializing import open_wal
from tests.wal.testkit import BatchAllocator, CounterTSO, fast_config, insert


async def test_readers_of_a_channel_share_one_handle_closed_with_the_last() -> None:
    store = MemoryLogStore()
    owner = await open_wal(
        MemoryOpener(store), "ch", BatchAllocator(CounterTSO()), 1, fast_config()
    )
    acked = [await owner.append(insert(f"m-{i}".encode())) for i in range(3)]
    handles = ReadOnlyChannels(MemoryOpener(store), fast_config())
    async with handles.read("ch", DeliveryPolicy.start_from(acked[0].message_id)) as one:
        async with handles.read("ch", DeliveryPolicy.start_after(acked[0].message_id)) as two:
            assert handles.open_channels == ["ch"] and handles.readers("ch") == 2
            assert [(await anext(one)).message_id for _ in range(3)] == [
                a.message_id for a in acked
            ]
            assert (await anext(two)).message_id == acked[1].message_id
        assert handles.readers("ch") == 1
    assert handles.open_channels == [] and handles.readers("ch") == 0
    with pytest.raises(ClosedError):  # the scanner went with its block
        await anext(one)
    # the owner was never disturbed: it still appends
    await owner.append(insert(b"after"))
    await owner.close()
    await handles.close()


async def test_a_channel_that_does_not_exist_is_not_found_and_stays_absent() -> None:
    store = MemoryLogStore()
    handles = ReadOnlyChannels(MemoryOpener(store), fast_config())
    with pytest.raises(NoSuchChannelError):
        async with handles.read("nobody", DeliveryPolicy.all()):
            raise AssertionError("a reader of a missing channel was opened")
    assert not store.exists("nobody")
    assert handles.open_channels == []
    await handles.close()


async def test_closing_ends_the_readers_and_refuses_new_ones() -> None:
    store = MemoryLogStore()
    owner = await open_wal(
        MemoryOpener(store), "ch", BatchAllocator(CounterTSO()), 1, fast_config()
    )
    handles = ReadOnlyChannels(MemoryOpener(store), fast_config())
    async with handles.read("ch", DeliveryPolicy.latest()) as scanner:
        waiting = asyncio.ensure_future(anext(scanner))
        await asyncio.sleep(0.01)
        await handles.close()
        with pytest.raises(ClosedError):
            await asyncio.wait_for(waiting, 2)
    with pytest.raises(ClosedError):
        async with handles.read("ch", DeliveryPolicy.all()):
            pass
    await owner.close()
