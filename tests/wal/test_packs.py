"""Packed entries (log format v2, ``WALConfig.pack_appends``): the appends the WAL has
in hand at one send are one backend entry, and every read path gives them back one by
one (unit: a log in memory)."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId, MemoryOpener
from streamwal.errors import TruncatedError
from streamwal.tso.allocator import LocalAllocator
from streamwal.wal import DeliveryPolicy, MessageType, MutableMessage
from streamwal.wal.backend import BackendMessage
from streamwal.wal.chunking import reassemble
from streamwal.wal.initializing import open_wal
from streamwal.wal.interceptors import AppendResult
from streamwal.wal.interceptors.timetick.fence_readback import FenceReadback
from streamwal.wal.message.codec import decode_entry
from streamwal.wal.message.frame import V2_PROPERTIES, encode_pack
from tests.wal.test_fence_readback import _Log
from tests.wal.test_writer_gate import _SlowSource
from tests.wal.testkit import (
    OpenOwner,
    assert_strictly_increasing,
    fast_config,
    insert,
    log_messages,
    read_payloads,
)


def _batch(prefix: str, count: int, size: int = 0) -> list[MutableMessage]:
    return [
        MutableMessage(MessageType.INSERT, f"{prefix}{i}".encode().ljust(size, b"."), "v1")
        for i in range(count)
    ]


def _entry_sizes(store: MemoryLogStore, channel: str) -> list[int]:
    """How many messages each entry of the log holds (the first time tick's included)."""
    return [len(decode_entry(raw, MemoryMessageId.from_bytes)) for raw in store.entries(channel)]


async def test_a_batch_is_one_entry_each_message_with_its_id_in_it(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    results = await wal.append_many(_batch("m", 10))
    assert _entry_sizes(store, channel) == [1, 10]
    log = log_messages(store, channel)
    assert_strictly_increasing(log)
    assert [(m.message_id, m.time_tick) for m in log[1:]] == [tuple(r) for r in results]
    assert [r.message_id for r in results] == [MemoryMessageId(1, i) for i in range(10)]
    assert {m.last_confirmed for m in log[1:]} == {wal.first_message_id}  # the pack's one


async def test_single_appends_of_one_loop_iteration_share_an_entry(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    results = await asyncio.gather(*(wal.append(insert(b"%d" % i)) for i in range(5)))
    assert _entry_sizes(store, channel) == [1, 5]
    assert [r.message_id for r in results] == [MemoryMessageId(1, i) for i in range(5)]
    # the next append confirms the whole pack: its last message
    nxt = await wal.append(insert(b"next"))
    assert log_messages(store, channel)[-1].last_confirmed == results[-1].message_id
    assert nxt.message_id == MemoryMessageId(2)  # a pack of one: the entry's own id


async def test_packing_off_writes_one_entry_per_message(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(pack_appends=False))
    await wal.append_many(_batch("m", 4))
    assert _entry_sizes(store, channel) == [1, 1, 1, 1, 1]


async def test_packs_stop_at_the_budget_and_an_oversized_message_goes_alone(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    store.max_entry_bytes = 4096  # the pack budget; larger is chunked
    wal = await open_owner()
    batch = _batch("m", 10, size=1000)
    batch.insert(5, MutableMessage(MessageType.INSERT, b"big".ljust(10_000, b"!"), "v1"))
    results = await wal.append_many(batch)
    assert all(len(raw.payload) <= 4096 for raw in store.entries(channel))
    entries = list(reassemble(channel, store.entries(channel)))
    log = [m for raw in entries for m in decode_entry(raw, MemoryMessageId.from_bytes)]
    assert [m.payload for m in log[1:]] == [m.payload for m in batch]  # chunks rebuilt
    assert_strictly_increasing(log)
    assert [(m.message_id, m.time_tick) for m in log[1:]] == [tuple(r) for r in results]
    packs = [r.message_id.index for r in results]  # type: ignore[attr-defined]
    assert packs[5] == -1  # the big one: an entry (its first chunk) of its own
    assert max(packs) >= 1  # the small ones still share entries


async def test_every_read_path_unpacks(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    tail = await wal.read(DeliveryPolicy.latest(), appended_only=True)
    results = await wal.append_many(_batch("m", 6))
    expected = [b"m%d" % i for i in range(6)]
    tailed = [(await asyncio.wait_for(tail.__anext__(), 2.0)).payload for _ in range(6)]
    await tail.close()
    assert tailed == expected  # the tail reader gets them one by one
    assert await read_payloads(wal, DeliveryPolicy.all(), 6) == expected
    inside = results[2].message_id
    assert await read_payloads(wal, DeliveryPolicy.start_from(inside), 4) == expected[2:]
    assert await read_payloads(wal, DeliveryPolicy.start_after(inside), 3) == expected[3:]
    tick = results[4].time_tick
    assert await read_payloads(wal, DeliveryPolicy.start_from_time_tick(tick), 2) == expected[4:]
    # a new owner reads the old owner's packs from the backend (no buffer of its own)
    await wal.close()
    successor = await open_owner(node_id=2)
    assert await read_payloads(successor, DeliveryPolicy.start_after(inside), 3) == expected[3:]


async def test_a_failed_pack_is_retried_whole_and_lands_once_in_order(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    store.faults.fail_appends = 1  # the pack's one entry fails retriably
    results = await wal.append_many(_batch("m", 4))
    log = log_messages(store, channel)
    assert [m.payload for m in log[1:]] == [b"m0", b"m1", b"m2", b"m3"]
    assert_strictly_increasing(log)
    assert [(m.message_id, m.time_tick) for m in log[1:]] == [tuple(r) for r in results]


async def test_a_retried_idempotent_batch_lands_each_message_once(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    batch = [m.with_producer(7, i) for i, m in enumerate(_batch("m", 5))]
    first = await wal.append_many(batch)
    again = await wal.append_many([*batch[2:], _batch("n", 1)[0].with_producer(7, 5)])
    assert again[:3] == first[2:]
    assert [m.payload for m in log_messages(store, channel)[1:]] == [
        b"m0",
        b"m1",
        b"m2",
        b"m3",
        b"m4",
        b"n0",
    ]
    # the next owner rebuilds the windows from the packs: the retry is answered there too
    await wal.close()
    successor = await open_owner(node_id=2)
    assert await successor.append_many(batch) == first
    assert len(log_messages(store, channel)) == 1 + 6 + 1  # and its own first time tick


async def test_a_transaction_inside_a_pack_is_delivered_at_its_commit(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    txn = await wal.begin_txn("v1")
    await asyncio.gather(
        *(wal.append(insert(b"t%d" % i).with_txn(txn)) for i in range(3)),
        wal.append(insert(b"plain")),
    )
    assert max(_entry_sizes(store, channel)) == 4  # the four appends shared an entry
    await wal.commit_txn(txn)
    got = await read_payloads(wal, DeliveryPolicy.all(), 4)
    assert got == [b"plain", b"t0", b"t1", b"t2"]


async def test_truncating_to_a_message_inside_a_pack_keeps_its_entry(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    before = await wal.append(insert(b"before"))
    results = await wal.append_many(_batch("m", 4))
    assert await wal.truncate_to(results[1].message_id) == results[1].message_id
    with pytest.raises(TruncatedError):
        await wal.read(DeliveryPolicy.start_from(before.message_id))
    # the pack's later messages are kept: its entry is discarded only when all may be
    assert await read_payloads(wal, DeliveryPolicy.start_after(results[1].message_id), 2) == [
        b"m2",
        b"m3",
    ]
    assert await read_payloads(wal, DeliveryPolicy.start_from(results[0].message_id), 4) == [
        b"m0",
        b"m1",
        b"m2",
        b"m3",
    ]


def _pack(offset: int, source: int, ticks: list[int]) -> BackendMessage:
    msgs = [(insert(b"p"), tick) for tick in ticks]
    payload = encode_pack(msgs, MemoryMessageId(0), source, 0)
    return BackendMessage(MemoryMessageId(offset), payload, dict(V2_PROPERTIES))


async def test_the_fence_read_back_finds_each_message_of_a_pack() -> None:
    first = MutableMessage(MessageType.TIME_TICK)
    taken = encode_pack([(first, 200)], None, 2, 1)
    log = _Log(
        [
            _pack(1, 1, [101]),
            _pack(2, 1, [102, 103, 104]),  # the old owner's pack that landed
            BackendMessage(MemoryMessageId(3), taken, dict(V2_PROPERTIES)),
            _pack(4, 1, [105, 106]),  # past the new owner's first time tick
        ]
    )
    readback = FenceReadback("c", log, 1)  # type: ignore[arg-type]
    after = MemoryMessageId(1)
    answers = await asyncio.gather(*(readback.settle(t, after) for t in (102, 103, 104, 105)))
    assert answers[:3] == [MemoryMessageId(2, i) for i in range(3)]
    assert answers[3] is not None and not isinstance(answers[3], MemoryMessageId)
    await readback.close()


async def test_batches_take_their_time_ticks_as_ranges_beside_single_appends() -> None:
    """Batches allocate a range (``alloc(count)``) across allocator fetches, single
    appends the cache: the log's time ticks still increase, each message's own."""
    source = _SlowSource(delay_s=0.001)
    store = MemoryLogStore()
    wal = await open_wal(MemoryOpener(store), "ranges", LocalAllocator(source, batch_size=50), 1)
    try:

        async def batches(n: int) -> list[AppendResult]:
            out: list[AppendResult] = []
            for i in range(10):
                out.extend(await wal.append_many(_batch(f"b{n}-{i}-", 30)))
            return out

        async def singles(n: int) -> list[AppendResult]:
            return [await wal.append(insert(b"s%d-%d" % (n, i))) for i in range(40)]

        answered = await asyncio.gather(batches(0), batches(1), singles(2), singles(3))
    finally:
        await wal.close()
    log = log_messages(store, "ranges")
    assert_strictly_increasing(log)
    results = [r for group in answered for r in group]
    assert len(results) == 2 * 300 + 2 * 40
    assert sorted((r.time_tick, str(r.message_id)) for r in results) == sorted(
        (m.time_tick, str(m.message_id)) for m in log if m.type == MessageType.INSERT
    )
    for group in answered[:2]:  # a batch's ticks increase in batch order
        ticks = [r.time_tick for r in group]
        assert ticks == sorted(ticks)
    assert max(_entry_sizes(store, "ranges")) > 1
