"""``Scanner.next_batch``: the messages ``__anext__`` would give, in batches of what is
ready; and ``BufferCursor.ready``, the buffer's side of it."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId
from streamwal.errors import BufferSealedError, ClosedError, EvictedError
from streamwal.wal import (
    WAL,
    DeliveryPolicy,
    ImmutableMessage,
    MessageType,
    Scanner,
)
from streamwal.wal.message_id import MessageId
from streamwal.wal.write_ahead_buffer import WriteAheadBuffer
from tests.wal.testkit import OpenOwner, fast_config, insert, log_messages


async def _fill(wal: WAL) -> MessageId:
    """Inserts on several vchannels, a committed and a rolled-back transaction; the
    position of the last."""
    for i in range(30):
        await wal.append(insert(b"a%d" % i, ("v1", "v2", "")[i % 3]))
    committed = await wal.begin_txn("v1")
    rolled_back = await wal.begin_txn("v2")
    for i in range(4):
        await wal.append(insert(b"t%d" % i, "v1").with_txn(committed))
        await wal.append(insert(b"r%d" % i, "v2").with_txn(rolled_back))
    await wal.append(insert(b"between", ""))
    await wal.commit_txn(committed)
    await wal.rollback_txn(rolled_back)
    for i in range(30):
        await wal.append(insert(b"b%d" % i, ("v2", "v1")[i % 2]))
    return (await wal.append(insert(b"last", ""))).message_id


async def _one_by_one(scanner: Scanner, last: MessageId) -> list[ImmutableMessage]:
    got = [await asyncio.wait_for(scanner.__anext__(), 2.0)]
    while got[-1].message_id != last:
        got.append(await asyncio.wait_for(scanner.__anext__(), 2.0))
    return got


async def _batched(scanner: Scanner, last: MessageId, limit: int) -> list[ImmutableMessage]:
    got: list[ImmutableMessage] = []
    while not got or got[-1].message_id != last:
        batch = await asyncio.wait_for(scanner.next_batch(limit), 2.0)
        assert 1 <= len(batch) <= limit
        got.extend(batch)
    return got


@pytest.mark.parametrize("vchannel", [None, "v1", "v2"])
async def test_batches_are_the_messages_one_by_one_reads_give(
    open_owner: OpenOwner, vchannel: str | None
) -> None:
    wal = await open_owner()
    last = await _fill(wal)
    reference = await wal.read(DeliveryPolicy.all(), vchannel)
    expected = await _one_by_one(reference, last)
    committed = {b"t"} if vchannel != "v2" else set()
    assert {m.payload[:1] for m in expected} >= {b"a", b"b"} | committed
    assert not any(m.payload.startswith(b"r") for m in expected)
    for limit in (1, 3, 1000):
        scanner = await wal.read(DeliveryPolicy.all(), vchannel)
        got = await _batched(scanner, last, limit)
        assert got == expected
        assert scanner.watermark == reference.watermark
        assert scanner.source == "buffer"
        await scanner.close()
    await reference.close()
    # from a time tick in the middle: the policy's floor filters batches as it does one by one
    everything = len(expected)
    middle = expected[everything // 2].time_tick
    reference = await wal.read(DeliveryPolicy.start_from_time_tick(middle), vchannel)
    expected = await _one_by_one(reference, last)
    assert 0 < len(expected) < everything
    for limit in (1, 3, 1000):
        scanner = await wal.read(DeliveryPolicy.start_from_time_tick(middle), vchannel)
        assert await _batched(scanner, last, limit) == expected
        assert scanner.watermark == reference.watermark
        await scanner.close()
    await reference.close()


async def test_a_batch_holds_what_is_ready_and_waits_only_for_its_first(
    open_owner: OpenOwner,
) -> None:
    wal = await open_owner()
    scanner = await wal.read(DeliveryPolicy.latest())
    for i in range(5):
        await wal.append(insert(b"%d" % i))
    assert [m.payload for m in await scanner.next_batch(100)] == [b"%d" % i for i in range(5)]
    waiting = asyncio.ensure_future(scanner.next_batch(100))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    await wal.append(insert(b"late"))
    assert [m.payload for m in await asyncio.wait_for(waiting, 2.0)] == [b"late"]
    await scanner.close()
    with pytest.raises(ClosedError):
        await scanner.next_batch(10)


async def test_batches_fall_back_to_the_backend_when_evicted_and_lose_nothing(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(buffer_capacity_bytes=600))
    scanner = await wal.read(DeliveryPolicy.all())
    await scanner.next_batch(10)
    for i in range(40):  # far more than the buffer holds, while the reader waits
        last = await wal.append(insert(b"%d" % i))
    got = await _batched(scanner, last.message_id, 7)
    assert got == log_messages(store, channel)[1:41]
    assert scanner.source == "buffer"


def _persisted(position: int, time_tick: int) -> ImmutableMessage:
    message_id = MemoryMessageId(position)
    return ImmutableMessage(
        message_id=message_id,
        type=MessageType.INSERT,
        payload=b"%d" % position,
        time_tick=time_tick,
        last_confirmed=message_id,
        source=1,
    )


async def test_a_cursor_hands_out_only_what_next_returns_at_once() -> None:
    buffer = WriteAheadBuffer(_persisted(0, 100), capacity_bytes=10_000, keepalive=60.0)
    cursor = buffer.read_after(99)
    assert [e.time_tick for e in cursor.take_ready(10)] == [100]  # the first message
    assert cursor.take_ready(10) == []  # next() would wait
    buffer.append_time_tick(105)
    buffer.append(_persisted(1, 106))
    buffer.append(_persisted(2, 107))
    assert [e.time_tick for e in cursor.take_ready(2)] == [105, 106]  # at most the limit
    assert [e.time_tick for e in cursor.take_ready(2)] == [107]
    late = buffer.read_after(105)  # starts after an entry: skips what is at or below
    assert [e.time_tick for e in late.take_ready(10)] == [106, 107]
    buffer.append(_persisted(3, 108))
    buffer.mark_gap(109)
    assert cursor.take_ready(10) == []  # next() says why
    with pytest.raises(EvictedError):
        await cursor.next()
    sealed = buffer.read_after(109)
    buffer.seal()
    assert sealed.take_ready(10) == []
    with pytest.raises(BufferSealedError):
        await sealed.next()
    closed = WriteAheadBuffer(_persisted(0, 100), capacity_bytes=10_000, keepalive=60.0)
    reader = closed.read_after(99)
    reader.close()
    assert reader.take_ready(10) == []
    with pytest.raises(ClosedError):
        await reader.next()


async def test_a_cursor_behind_evicted_entries_takes_from_the_oldest_kept() -> None:
    buffer = WriteAheadBuffer(_persisted(0, 100), capacity_bytes=300, keepalive=60.0)
    cursor = buffer.read_after(99)
    for i in range(1, 10):
        buffer.append(_persisted(i, 100 + i))
    assert cursor.take_ready(10) == []  # evicted: next() raises
    kept = buffer.read_after(buffer.floor)
    assert [e.time_tick for e in kept.take_ready(100)] == [e.time_tick for e in buffer._entries]
