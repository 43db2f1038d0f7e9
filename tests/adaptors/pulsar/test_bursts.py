"""Bursts as one batch with two receipts: chunking, and how a channel answers each
entry from its chunk's edges (unit: a fake of the client's producer, no broker).

The fake keeps what the real client does that the channel relies on: messages go into
one open batch in send order, ``flush_async`` closes it (and is refused, answering at
once, while not connected), a batch lands as one entry and only messages sent with a
callback hear of it, in batch order, with batch indexes.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable
from typing import Any

import _pulsar

from adaptors.pulsar.bursts import CHUNK_BYTES, CHUNK_MESSAGES, Prepared, chunks, size_of
from adaptors.pulsar.channel import PulsarBackendWAL
from adaptors.pulsar.config import PulsarConfig
from adaptors.pulsar.message_id import PulsarMessageId
from wal.backend import AccessMode
from wal.errors import (
    ChannelFencedError,
    InvalidInputError,
    UnavailableError,
    UnknownPositionError,
)
from wal.message_id import MessageId

OK = _pulsar.Result.Ok
Callback = Callable[[Any, Any], None] | None


def _prepared(*sizes: int) -> list[Prepared]:
    return [(lambda _id, _error: None, i, size) for i, size in enumerate(sizes)]


def test_chunks_keep_order_and_both_bounds() -> None:
    burst = _prepared(*([10] * 10))
    assert [[p[1] for p in c] for c in chunks(burst, max_messages=4, max_bytes=1000)] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9],
    ]
    assert [[p[1] for p in c] for c in chunks(burst, max_messages=100, max_bytes=25)] == [
        [0, 1],
        [2, 3],
        [4, 5],
        [6, 7],
        [8, 9],
    ]
    assert list(chunks([], max_messages=4, max_bytes=10)) == []


def test_a_message_over_the_byte_bound_travels_alone() -> None:
    burst = _prepared(5, 5, 500, 5)
    assert [[p[1] for p in c] for c in chunks(burst, max_messages=10, max_bytes=100)] == [
        [0, 1],
        [2],
        [3],
    ]


def test_size_counts_payload_and_properties_high() -> None:
    assert size_of(b"x" * 100, {}) > 100
    assert size_of(b"", {"key": "v" * 50}) > 53
    assert CHUNK_MESSAGES * size_of(b"", {}) <= CHUNK_BYTES


class FakeId:
    def __init__(self, ledger: int, entry: int, batch_index: int) -> None:
        self._parts = (ledger, entry, batch_index)

    def ledger_id(self) -> int:
        return self._parts[0]

    def entry_id(self) -> int:
        return self._parts[1]

    def batch_index(self) -> int:
        return self._parts[2]


class FakeProducer:
    """The C extension's producer as the channel drives it."""

    def __init__(self) -> None:
        self.connected = True
        self.open: list[tuple[Any, Callback]] = []
        self.batches: list[list[tuple[Any, Callback]]] = []
        self.sent = 0
        self.cut_before: set[int] = set()  # the client closes its batch on its own here
        self.refuse: set[int] = set()  # send_async raises for these
        self.flushes = 0
        self.next_entry = 0

    def send_async(self, message: Any, callback: Callback) -> None:
        number, self.sent = self.sent, self.sent + 1
        if number in self.refuse:
            raise RuntimeError("refused")
        if number in self.cut_before and self.open:
            self.batches.append(self.open)
            self.open = []
        self.open.append((message, callback))

    def flush_async(self, callback: Callable[[Any], None]) -> None:
        self.flushes += 1
        if not self.connected:
            callback(_pulsar.Result.AlreadyClosed)
            return
        if self.open:
            self.batches.append(self.open)
            self.open = []

    def land(self, result: Any = OK, ledger: int = 7) -> int:
        """The broker answers the oldest batch; returns the number of callbacks called."""
        batch = self.batches.pop(0)
        entry, self.next_entry = self.next_entry, self.next_entry + 1
        called = 0
        for i, (_, callback) in enumerate(batch):
            if callback is not None:
                called += 1
                callback(result, FakeId(ledger, entry, i) if result == OK else FakeId(-1, -1, -1))
        return called

    def land_all(self, result: Any = OK) -> None:
        while self.batches:
            self.land(result)


async def _channel(**config: Any) -> tuple[PulsarBackendWAL, FakeProducer]:
    async def nothing() -> None:
        return None

    wal = PulsarBackendWAL(None, PulsarConfig(**config), "c", AccessMode.READ_WRITE, nothing)
    fake = FakeProducer()
    wal._producer = types.SimpleNamespace(_producer=fake)
    return wal, fake


async def _append(wal: PulsarBackendWAL, count: int) -> list[asyncio.Future[MessageId]]:
    futures: list[asyncio.Future[MessageId]] = [
        asyncio.ensure_future(wal.append(f"p{i}".encode(), {"_t": "Insert"})) for i in range(count)
    ]
    await asyncio.sleep(0)  # the outbox goes out at the end of this iteration
    await asyncio.sleep(0)
    return futures


async def _outcomes(futures: list[asyncio.Future[MessageId]]) -> list[Any]:
    return list(await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5))


async def test_a_burst_is_one_batch_with_receipts_on_its_edges_only() -> None:
    wal, fake = await _channel()
    futures = await _append(wal, 5)
    assert len(fake.batches) == 1 and fake.flushes == 1
    assert [cb is not None for _, cb in fake.batches[0]] == [True, False, False, False, True]
    assert fake.land() == 2
    assert await _outcomes(futures) == [PulsarMessageId(7, 0, i) for i in range(5)]
    assert wal._in_flight == 0


async def test_a_long_burst_is_cut_into_chunks_each_its_own_entry() -> None:
    wal, fake = await _channel()
    futures = await _append(wal, 2 * CHUNK_MESSAGES + 3)
    assert [len(b) for b in fake.batches] == [CHUNK_MESSAGES, CHUNK_MESSAGES, 3]
    fake.land_all()
    ids = await _outcomes(futures)
    per = CHUNK_MESSAGES
    assert ids == [PulsarMessageId(7, i // per, i % per) for i in range(len(ids))]


async def test_a_lone_append_has_its_own_receipt() -> None:
    wal, fake = await _channel()
    futures = await _append(wal, 1)
    assert [cb is not None for _, cb in fake.batches[0]] == [True]
    fake.land()
    assert await _outcomes(futures) == [PulsarMessageId(7, 0, 0)]


async def test_a_batch_cut_by_the_client_leaves_only_its_middle_unknown() -> None:
    wal, fake = await _channel()
    fake.cut_before = {2}  # the batch timer fired while the chunk was handed over
    futures = await _append(wal, 4)
    assert [len(b) for b in fake.batches] == [2, 2]
    fake.land_all()
    first, second, third, last = await _outcomes(futures)
    assert first == PulsarMessageId(7, 0, 0)
    assert isinstance(second, UnknownPositionError) and isinstance(third, UnknownPositionError)
    assert last == PulsarMessageId(7, 1, 1)
    assert not wal.is_fenced  # the guard did not take the cut for another producer
    more = await _append(wal, 3)
    fake.land_all()
    assert await _outcomes(more) == [PulsarMessageId(7, 2, i) for i in range(3)]


async def test_a_batch_that_fails_fails_every_entry_alike() -> None:
    wal, fake = await _channel()
    futures = await _append(wal, 3)
    fake.land(_pulsar.Result.Timeout)
    assert all(isinstance(o, UnavailableError) for o in await _outcomes(futures))
    assert not wal.is_fenced
    futures = await _append(wal, 3)
    fake.land(_pulsar.Result.ProducerFenced)
    assert all(isinstance(o, ChannelFencedError) for o in await _outcomes(futures))
    assert wal.is_fenced


async def test_a_refused_middle_message_fails_alone_and_makes_the_rest_unknown() -> None:
    wal, fake = await _channel()
    fake.refuse = {1}
    futures = await _append(wal, 4)
    fake.land_all()
    first, refused, third, last = await _outcomes(futures)
    assert isinstance(refused, UnavailableError)
    assert isinstance(third, UnknownPositionError)
    assert first == PulsarMessageId(7, 0, 0)
    assert last == PulsarMessageId(7, 0, 2)
    assert wal._in_flight == 0


async def test_while_reconnecting_every_message_has_a_receipt_until_a_flush_goes_through() -> None:
    wal, fake = await _channel()
    fake.connected = False
    during = await _append(wal, 3)  # flush refused: the chunk stays in the open batch
    assert wal._dirty
    later = await _append(wal, 3)  # still refused: a receipt for each message
    assert [cb is not None for _, cb in fake.open] == [True, False, True, True, True, True]
    fake.connected = True
    after = await _append(wal, 3)  # the leftover batch is flushed first, then this chunk
    assert not wal._dirty
    assert [len(b) for b in fake.batches] == [6, 3]
    fake.land_all()
    assert await _outcomes(during + later) == [PulsarMessageId(7, 0, i) for i in range(6)]
    assert await _outcomes(after) == [PulsarMessageId(7, 1, i) for i in range(3)]


async def test_appends_beyond_the_pending_limit_are_refused_not_queued() -> None:
    wal, fake = await _channel(max_pending_messages=5)
    futures = await _append(wal, 8)
    fake.land_all()
    outcomes = await _outcomes(futures)
    assert outcomes[:5] == [PulsarMessageId(7, 0, i) for i in range(5)]
    assert all(isinstance(o, UnavailableError) for o in outcomes[5:])
    assert "max_pending_messages" in str(outcomes[5])
    more = await _append(wal, 2)
    fake.land_all()
    assert await _outcomes(more) == [PulsarMessageId(7, 1, i) for i in range(2)]


async def test_a_bad_property_fails_its_own_entry_only() -> None:
    wal, fake = await _channel()
    good = asyncio.ensure_future(wal.append(b"a", {"k": "v"}))
    bad = asyncio.ensure_future(wal.append(b"b", {"k": 5}))  # type: ignore[dict-item]
    also = asyncio.ensure_future(wal.append(b"c", {"k": "v"}))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    fake.land_all()
    outcomes = await _outcomes([good, bad, also])
    assert outcomes[0] == PulsarMessageId(7, 0, 0) and outcomes[2] == PulsarMessageId(7, 0, 1)
    assert isinstance(outcomes[1], InvalidInputError)


async def test_another_producers_entry_between_ours_still_fences() -> None:
    wal, fake = await _channel()
    futures = await _append(wal, 2)
    fake.land()
    await _outcomes(futures)
    fake.next_entry += 1  # an entry that is not ours
    futures = await _append(wal, 2)
    fake.land()
    assert all(isinstance(o, ChannelFencedError) for o in await _outcomes(futures))
    assert wal.is_fenced
