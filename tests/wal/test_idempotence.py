"""Idempotent appends on the in-process backend: duplicates, gaps, windows, takeovers."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.memory import MemoryLogStore
from streamwal.adaptors.memory.backend import MemoryMessageId
from streamwal.errors import (
    OutcomeUnknownError,
    SequenceGapError,
    SequenceTooOldError,
    UnavailableError,
    WriteOutcome,
)
from streamwal.wal import WAL
from streamwal.wal.interceptors import AppendResult
from streamwal.wal.interceptors.idempotence import IdempotenceInterceptor, ProducerTable
from streamwal.wal.message import MessageType, MutableMessage, decode
from tests.wal.testkit import OpenOwner, fast_config, log_messages

PRODUCER = 7
WINDOW = fast_config().idempotence_window


async def test_numbers_arriving_out_of_order_within_the_window_are_taken_once_each(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    """A client's concurrent appends may reach the WAL out of order: not a gap, and a
    retry of each is still answered with its first result."""
    wal = await open_owner()
    order = [0, 3, 1, 2, 7, 4, 6, 5]
    first = {seq: await wal.append(_msg(seq)) for seq in order}
    for seq in reversed(order):
        assert await wal.append(_msg(seq)) == first[seq]
    assert all(_copies(store, channel, seq) == 1 for seq in order)


def _msg(seq: int, producer: int = PRODUCER) -> MutableMessage:
    return MutableMessage(MessageType.INSERT, f"p{producer}-s{seq}".encode()).with_producer(
        producer, seq
    )


def _copies(store: MemoryLogStore, channel: str, seq: int, producer: int = PRODUCER) -> int:
    return sum(
        1 for m in log_messages(store, channel) if m.producer_id == producer and m.sequence == seq
    )


async def _lands_once(
    wal: WAL, store: MemoryLogStore, channel: str, seq: int, producer: int = PRODUCER
) -> AppendResult:
    """Appends (or sends again) ``seq``: whatever came before, it is in the log once."""
    result = await wal.append(_msg(seq, producer))
    assert _copies(store, channel, seq, producer) == 1
    return result


async def test_a_retry_is_answered_with_the_first_result_and_nothing_appended(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    first = await wal.append(_msg(0))
    entries = len(store.entries(channel))
    again = await wal.append(_msg(0))
    assert again == first
    assert len(store.entries(channel)) == entries
    assert _copies(store, channel, 0) == 1


async def test_the_producer_and_sequence_are_in_the_log(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    result = await wal.append(_msg(5))
    raw = next(e for e in store.entries(channel) if e.message_id == result.message_id)
    logged = decode(raw, MemoryMessageId.from_bytes)
    assert (logged.producer_id, logged.sequence) == (PRODUCER, 5)


async def test_a_sequence_that_skips_ahead_is_refused_and_not_appended(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    await wal.append(_msg(0))
    entries = len(store.entries(channel))
    with pytest.raises(SequenceGapError) as caught:
        await wal.append(_msg(1 + WINDOW))  # a whole window ahead
    assert caught.value.expected == 1
    assert len(store.entries(channel)) == entries
    await wal.append(_msg(1))  # the expected one still goes in


async def test_a_sequence_older_than_the_window_is_refused(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner(config=fast_config(idempotence_window=4))
    for seq in range(10):
        await wal.append(_msg(seq))
    entries = len(store.entries(channel))
    with pytest.raises(SequenceTooOldError):
        await wal.append(_msg(2))
    assert (await wal.append(_msg(7))).message_id is not None  # inside the window: answered
    assert len(store.entries(channel)) == entries


async def test_concurrent_retries_of_one_sequence_persist_it_once(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    store.faults.append_delay = 0.01
    results = await asyncio.gather(*(wal.append(_msg(0)) for _ in range(5)))
    assert len(set(results)) == 1
    assert _copies(store, channel, 0) == 1


async def test_pipelined_sequences_all_land_once_in_order(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    results = await asyncio.gather(*(wal.append(_msg(seq)) for seq in range(50)))
    assert [r.message_id for r in results] == sorted(r.message_id for r in results)
    assert all(_copies(store, channel, seq) == 1 for seq in range(50))


async def test_an_ambiguous_failure_then_a_retry_leaves_one_copy(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    store.faults.lose_answers = 1
    with pytest.raises(OutcomeUnknownError):
        await wal.append(_msg(0))
    assert _copies(store, channel, 0) == 1  # it did land
    retried = await _lands_once(wal, store, channel, 0)
    landed = next(m for m in log_messages(store, channel) if m.sequence == 0)
    assert retried.message_id == landed.message_id
    assert retried.time_tick == landed.time_tick


async def test_a_failure_known_unwritten_may_be_sent_again(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    store.faults.fail_appends = 1_000  # every attempt fails: the append gives up unwritten
    with pytest.raises(UnavailableError) as caught:
        await wal.append(_msg(0))
    assert caught.value.outcome is WriteOutcome.NOT_WRITTEN
    store.faults.fail_appends = 0
    await _lands_once(wal, store, channel, 0)


async def test_a_new_owner_rebuilds_the_windows_from_the_log(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    old = await open_owner(node_id=1)
    originals = [await old.append(_msg(seq)) for seq in range(3)]
    new = await open_owner(node_id=2)
    assert await _lands_once(new, store, channel, 1) == originals[1]
    with pytest.raises(SequenceGapError):
        await new.append(_msg(3 + WINDOW))
    await _lands_once(new, store, channel, 3)


async def test_an_ambiguous_failure_across_a_takeover_leaves_one_copy(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    old = await open_owner(node_id=1)
    await old.append(_msg(0))
    store.faults.lose_answers = 1
    with pytest.raises(OutcomeUnknownError):
        await old.append(_msg(1))
    new = await open_owner(node_id=2)
    retried = await _lands_once(new, store, channel, 1)
    landed = next(m for m in log_messages(store, channel) if m.sequence == 1)
    assert retried.message_id == landed.message_id


async def test_appends_without_a_producer_are_not_deduplicated(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    plain = MutableMessage(MessageType.INSERT, b"x")
    first, second = await wal.append(plain), await wal.append(plain)
    assert first != second


def _interceptor(wal: WAL) -> IdempotenceInterceptor:
    found = wal._chain.find(IdempotenceInterceptor)
    assert found is not None
    return found


async def test_old_producer_ids_expire(open_owner: OpenOwner) -> None:
    wal = await open_owner(config=fast_config(idempotence_producers=3))
    for producer in range(10):
        await wal.append(_msg(0, producer))
    table = _interceptor(wal).producers
    assert len(table) == 3
    assert table.get(0) is None and table.get(9) is not None


def test_the_window_forgets_sequences_beyond_its_size() -> None:
    table = ProducerTable(window=3, max_producers=10)

    async def run() -> None:
        for seq in range(10):
            table.decide(1, seq)
            table.begin(1, seq)
            table.finish(1, seq, None)
        producer = table.get(1)
        assert producer is not None and producer.next_seq == 10
        with pytest.raises(SequenceTooOldError):
            table.decide(1, 5)

    asyncio.run(run())


async def test_a_new_owner_reads_only_the_logs_tail(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    """The rebuild reads what was published within ``idempotence_rebuild_window``: a
    retry older than that, after a change of owner, is appended again (the bound's
    price, documented); a recent one is still answered."""
    old = await open_owner(node_id=1)
    await old.append(_msg(0, producer=1))
    recent = await old.append(_msg(0, producer=2))
    stamps = store.log(channel).appended_ms
    stamps[:2] = [stamp - 3_600_000 for stamp in stamps[:2]]  # the first time tick, p1
    new = await open_owner(node_id=2, config=fast_config(idempotence_rebuild_window=60.0))
    assert await _lands_once(new, store, channel, 0, producer=2) == recent
    await new.append(_msg(0, producer=1))
    assert _copies(store, channel, 0, producer=1) == 2


def test_a_run_of_new_sequences_is_decided_at_once_and_a_known_one_is_not() -> None:
    """``begin_range`` reserves a run only when every sequence of it is new and inside
    the window; otherwise it reserves nothing and each is decided on its own."""
    table = ProducerTable(window=8, max_producers=10)

    async def run() -> None:
        assert table.begin_range(1, 0, 4)
        producer = table.get(1)
        assert producer is not None and producer.next_seq == 4
        assert (await _pending_of(table, 1, 2)) is not None  # in flight: a retry waits
        results = [AppendResult(MemoryMessageId(9, i), 100 + i) for i in range(4)]
        table.finish_range(1, 0, results)
        assert table.decide(1, 2).result == results[2]
        assert not table.begin_range(1, 3, 2)  # 3 is known: nothing reserved
        assert producer.next_seq == 4 and 4 not in producer.in_flight
        assert not table.begin_range(1, 4, 9)  # its tail is a window ahead
        assert table.begin_range(1, 6, 6)  # skips 4 and 5, as one append may
        assert producer.next_seq == 12

    asyncio.run(run())


async def _pending_of(table: ProducerTable, producer_id: int, seq: int) -> object:
    return table.decide(producer_id, seq).pending


async def test_a_batch_numbered_as_one_run_lands_once_and_its_retry_is_answered(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner()
    batch = [_msg(seq) for seq in range(10, 20)]
    first = await wal.append_many(batch)
    entries = len(store.entries(channel))
    assert await wal.append_many(batch) == first  # the whole run again: the first results
    assert await wal.append_many(batch[3:6]) == first[3:6]
    assert len(store.entries(channel)) == entries
    assert all(_copies(store, channel, seq) == 1 for seq in range(10, 20))
