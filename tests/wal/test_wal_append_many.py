"""Batch appends: stamped in order, back to back; a partial failure names what landed."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping

import pytest

from streamwal.adaptors.memory import MemoryLogStore
from streamwal.errors import (
    BatchAppendError,
    ChannelFencedError,
    ClosedError,
    InvalidInputError,
    UnavailableError,
    WriteOutcome,
)
from streamwal.wal import DeliveryPolicy, MessageType, MutableMessage
from streamwal.wal.backend import AppendCallback
from tests.wal.testkit import (
    BatchAllocator,
    CounterTSO,
    OpenOwner,
    ProxyBackend,
    RecordingOpener,
    assert_strictly_increasing,
    fast_config,
    log_messages,
)


def _batch(prefix: str, count: int) -> list[MutableMessage]:
    return [
        MutableMessage(MessageType.INSERT, f"{prefix}{i}".encode(), vchannel="v1")
        for i in range(count)
    ]


async def test_a_batch_lands_in_order_with_the_stamps_of_single_appends(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner, tso: CounterTSO
) -> None:
    # a small allocator batch: the appends wait for fetches in the middle of the batch
    wal = await open_owner(node_id=3, allocator=BatchAllocator(tso, batch_size=4))
    results = await wal.append_many(_batch("m", 10))
    log = log_messages(store, channel)
    assert [m.payload for m in log[1:]] == [b"m%d" % i for i in range(10)]
    assert_strictly_increasing(log)
    for result, persisted in zip(results, log[1:], strict=True):
        assert persisted.message_id == result.message_id
        assert persisted.time_tick == result.time_tick
        assert persisted.source == 3
    for before, after in itertools.pairwise(log):
        assert after.last_confirmed <= before.message_id
    # when it returns, every message is in the buffer and MVCC, as for append()
    assert wal.buffer.last_time_tick == results[-1].time_tick
    assert wal.mvcc.get("v1").time_tick == results[-1].time_tick


async def test_concurrent_batches_each_stay_contiguous(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner, tso: CounterTSO
) -> None:
    wal = await open_owner(allocator=BatchAllocator(tso, batch_size=7))
    singles = [wal.append(m) for m in _batch("s", 20)]
    batches = [wal.append_many(_batch(f"b{b}-", 15)) for b in range(6)]
    await asyncio.gather(*singles, *batches)
    payloads = [m.payload.decode() for m in log_messages(store, channel)[1:]]
    assert_strictly_increasing(log_messages(store, channel))
    for b in range(6):
        start = payloads.index(f"b{b}-0")
        assert payloads[start : start + 15] == [f"b{b}-{i}" for i in range(15)]


async def test_an_invalid_message_refuses_the_whole_batch(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    batch = _batch("m", 3)
    batch.insert(1, MutableMessage(MessageType.TIME_TICK))
    with pytest.raises(InvalidInputError, match="message 1 of the batch"):
        await wal.append_many(batch)
    with pytest.raises(InvalidInputError, match="message 0 of the batch"):
        await wal.append_many([b"raw"])  # type: ignore[list-item]
    assert len(log_messages(store, channel)) == 1  # the first time tick only
    assert await wal.append_many([]) == []


async def test_a_failure_in_the_middle_names_what_landed(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(pack_appends=False))  # one entry each
    store.max_message_size = 200  # the entry: payload and the WAL's frame
    batch = _batch("m", 5)
    batch[2] = MutableMessage(MessageType.INSERT, b"x" * 201)  # the backend refuses it
    with pytest.raises(BatchAppendError) as caught:
        await wal.append_many(batch)
    error = caught.value
    assert error.landed == [0, 1, 3, 4]
    assert list(error.failed) == [2]
    assert isinstance(error.failed[2], InvalidInputError)
    assert error.failed[2].outcome is WriteOutcome.NOT_WRITTEN
    assert error.outcome is WriteOutcome.UNKNOWN and not error.retriable
    log = log_messages(store, channel)
    assert [m.payload for m in log[1:]] == [b"m0", b"m1", b"m3", b"m4"]
    for i in error.landed:
        assert error.results[i] in [(m.message_id, m.time_tick) for m in log]


async def test_a_failed_head_is_not_retried_behind_its_successors(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(pack_appends=False))  # one entry each
    store.faults.fail_appends = 1  # message 0 fails retriably, the others land
    with pytest.raises(BatchAppendError) as caught:
        await wal.append_many(_batch("m", 4))
    assert caught.value.landed == [1, 2, 3]
    assert isinstance(caught.value.failed[0], UnavailableError)
    assert caught.value.failed[0].outcome is WriteOutcome.NOT_WRITTEN
    assert [m.payload for m in log_messages(store, channel)[1:]] == [b"m1", b"m2", b"m3"]


async def test_a_failed_tail_is_retried_in_order(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner, tso: CounterTSO
) -> None:
    opener = RecordingOpener(store, proxy=True)
    allocator = BatchAllocator(tso)
    wal = await open_owner(opener=opener, allocator=allocator)
    (backend,) = opener.opened
    assert isinstance(backend, ProxyBackend)
    submitted = 0
    forward = backend.submit

    def failing_tail(payload: bytes, properties: Mapping[str, str], done: AppendCallback) -> None:
        nonlocal submitted
        submitted += 1
        if submitted in (4, 5):  # the last two of the first attempt
            asyncio.get_running_loop().call_soon(done, None, UnavailableError("injected"))
            return
        forward(payload, properties, done)

    backend.submit = failing_tail  # type: ignore[method-assign]
    before = len(allocator.allocated)
    results = await wal.append_many(_batch("m", 5))
    log = log_messages(store, channel)
    assert [m.payload for m in log[1:]] == [b"m%d" % i for i in range(5)]
    assert [(m.message_id, m.time_tick) for m in log[1:]] == results
    assert_strictly_increasing(log)
    assert len(allocator.allocated) - before == 7  # the tail got fresh time ticks


async def test_a_fenced_owner_fails_the_batch_and_then_refuses_batches(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    old = await open_owner(node_id=1)
    await open_owner(node_id=2)
    with pytest.raises(BatchAppendError) as caught:
        await old.append_many(_batch("m", 3))
    assert caught.value.landed == []
    assert all(isinstance(e, ChannelFencedError) for e in caught.value.failed.values())
    assert all(e.outcome is WriteOutcome.NOT_WRITTEN for e in caught.value.failed.values())
    assert old.is_fenced
    with pytest.raises(ChannelFencedError):
        await old.append_many(_batch("n", 2))
    assert not [m for m in log_messages(store, channel) if m.payload.startswith(b"m")]


async def test_a_closed_wal_refuses_batches(open_owner: OpenOwner) -> None:
    wal = await open_owner()
    await wal.close()
    with pytest.raises(ClosedError):
        await wal.append_many(_batch("m", 2))


async def test_a_batch_of_idempotent_and_transaction_messages_goes_through_the_chain(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    """Numbered messages and a transaction's messages are seen by their interceptors:
    a numbered duplicate in a batch is answered with its first position, and a
    transaction's batch is delivered only at its commit."""
    wal = await open_owner(node_id=1)
    numbered = [m.with_producer(7, i) for i, m in enumerate(_batch("n", 3))]
    first = await wal.append_many(numbered)
    again = await wal.append_many(numbered)  # a retried batch: nothing appended twice
    assert [(r.message_id, r.time_tick) for r in again] == [
        (r.message_id, r.time_tick) for r in first
    ]
    assert [m.payload for m in log_messages(store, channel)[1:]] == [b"n0", b"n1", b"n2"]

    txn = await wal.begin_txn("v1")
    await wal.append_many([m.with_txn(txn) for m in _batch("t", 2)])
    await wal.rollback_txn(txn)
    await wal.append(MutableMessage(MessageType.INSERT, b"after", vchannel="v1"))
    assert len(log_messages(store, channel)) > 6  # the transaction's batch is in the log
    scanner = await wal.read(DeliveryPolicy.all())
    seen: list[bytes] = []
    async with asyncio.timeout(5):
        while seen[-1:] != [b"after"]:
            msg = await scanner.__anext__()
            if msg.payload:
                seen.append(msg.payload)
    await scanner.close()
    assert seen == [b"n0", b"n1", b"n2", b"after"]  # the rolled-back batch: never delivered
