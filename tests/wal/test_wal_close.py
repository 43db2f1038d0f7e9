"""Closing a WAL: drains appends, stops ticking, closes scanners and backend, then refuses."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.memory import MemoryBackendWAL, MemoryLogStore
from streamwal.errors import ClosedError
from streamwal.wal import Backoff, DeliveryPolicy
from tests.wal.testkit import OpenOwner, RecordingOpener, fast_config, insert, log_messages


async def test_close_waits_for_appends_in_flight(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    store.faults.append_delay = 0.02
    appends = [asyncio.create_task(wal.append(insert(b"%d" % i))) for i in range(10)]
    await asyncio.sleep(0.005)  # all handed to the backend, none answered yet
    await wal.close()
    assert all(task.done() for task in appends)
    results = [task.result() for task in appends]
    persisted = {m.message_id for m in log_messages(store, channel)}
    assert {r.message_id for r in results} <= persisted


async def test_after_close_every_method_raises_closed(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    opener = RecordingOpener(store)
    wal = await open_owner(opener=opener)
    await wal.close()
    await wal.close()  # idempotent
    with pytest.raises(ClosedError):
        await wal.append(insert(b"x"))
    with pytest.raises(ClosedError):
        await wal.read()
    with pytest.raises(ClosedError):
        await wal.start()
    (backend,) = opener.opened
    assert isinstance(backend, MemoryBackendWAL)
    with pytest.raises(ClosedError):  # the backend was closed too
        await backend.ensure_writable()


async def test_close_ends_scanners_and_the_time_tick(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(time_tick_interval=0.002))
    await wal.append(insert(b"x"))  # dirty: periodic ticks would be persisted
    scanner = await wal.read(DeliveryPolicy.latest())

    async def drain() -> None:
        while True:  # a persisted time tick may come first
            await scanner.__anext__()

    pending = asyncio.create_task(drain())
    await asyncio.sleep(0.001)
    await wal.close()
    with pytest.raises(ClosedError):
        await asyncio.wait_for(pending, 2.0)
    length = len(store.entries(channel))
    await asyncio.sleep(0.02)  # ten intervals
    assert len(store.entries(channel)) == length


async def test_concurrent_closes_all_wait_for_the_end(open_owner: OpenOwner) -> None:
    wal = await open_owner()
    await asyncio.gather(wal.close(), wal.close(), wal.close())
    with pytest.raises(ClosedError):
        await wal.append(insert(b"x"))


async def test_async_with_closes(store: MemoryLogStore, open_owner: OpenOwner) -> None:
    async with await open_owner() as wal:
        await wal.append(insert(b"x"))
    with pytest.raises(ClosedError):
        await wal.append(insert(b"y"))


async def test_an_append_waiting_in_a_retry_ends_at_close(
    store: MemoryLogStore, open_owner: OpenOwner
) -> None:
    config = fast_config(append_backoff=Backoff(initial=60.0, maximum=60.0, max_attempts=5))
    wal = await open_owner(config=config)
    store.faults.fail_appends = 1
    append = asyncio.create_task(wal.append(insert(b"x")))
    await asyncio.sleep(0.005)  # failed once, now waiting 60 s to retry
    await asyncio.wait_for(wal.close(), 2.0)
    with pytest.raises(ClosedError):
        await append
