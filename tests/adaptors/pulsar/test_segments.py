"""Receipts on segment edges only: how a channel sends appends and answers each one
from its segment's edges (unit: a fake of the client's producer, no broker).

The fake keeps what the real client does that the channel relies on: messages go into
one open batch in send order; the batch is closed by the client on its own (its
batching delay: ``cut_before`` here), a batch lands as one entry, and only messages
sent with a callback hear of it, in batch order, with batch indexes (none for a batch
of one, as some clients send it unbatched).
"""

from __future__ import annotations

import asyncio
import functools
import random
import types
from collections.abc import Awaitable, Callable
from typing import Any

import _pulsar
import pytest
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar import readback
from streamwal.adaptors.pulsar.channel import PulsarBackendWAL
from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.adaptors.pulsar.message_id import PulsarMessageId
from streamwal.adaptors.pulsar.metrics import (
    READ_AGAIN,
    READ_AGAIN_AFTER_FENCE,
    READ_BACK,
    UNPLACED,
    segment_count,
)
from streamwal.adaptors.pulsar.segments import SEGMENT_BYTES, SEGMENT_MESSAGES, batch_size, size_of
from streamwal.backoff import Backoff
from streamwal.errors import (
    ChannelFencedError,
    InvalidInputError,
    UnavailableError,
    UnknownPositionError,
    WriteOutcome,
)
from streamwal.wal.backend import AccessMode, append_entry
from streamwal.wal.message_id import MessageId
from tests.adaptors.pulsar.fake_ids import FakeId

OK = _pulsar.Result.Ok
Callback = Callable[[Any, Any], None] | None


def test_size_counts_payload_and_properties_high() -> None:
    assert size_of(b"x" * 100, {}) > 100
    assert size_of(b"", {"key": "v" * 50}) > 53
    assert SEGMENT_MESSAGES * size_of(b"x" * 128, {}) < SEGMENT_BYTES


class FakeProducer:
    """The C extension's producer as the channel drives it."""

    def __init__(self) -> None:
        self.open: list[tuple[Any, Callback]] = []
        self.batches: list[list[tuple[Any, Callback]]] = []
        self.sent = 0
        self.cut_before: set[int] = set()  # the client closes its batch on its own here
        self.refuse: set[int] = set()  # send_async raises for these
        self.drop: set[int] = set()  # refused through the (absent) callback only
        self.next_entry = 0
        #: what landed, for readers
        self.log: list[tuple[FakeId, bytes, dict[str, str]]] = []
        self.closed = False

    def send_async(self, message: Any, callback: Callback) -> None:
        number, self.sent = self.sent, self.sent + 1
        if self.closed:  # refused through the callback only, as the client does
            if callback is not None:
                callback(_pulsar.Result.AlreadyClosed, FakeId(-1, -1, -1))
            return
        if number in self.refuse:
            raise RuntimeError("refused")
        if number in self.drop:
            if callback is not None:
                callback(_pulsar.Result.ProducerQueueIsFull, FakeId(-1, -1, -1))
            return
        if number in self.cut_before and self.open:
            self.close_batch()
        self.open.append((message, callback))

    def close_batch(self) -> None:
        self.batches.append(self.open)
        self.open = []

    def land(self, result: Any = OK, ledger: int = 7, *, unpositioned: bool = False) -> int:
        """The broker answers the oldest batch; returns the number of callbacks called.
        ``unpositioned``: it lands, but its receipts carry no position (``-1:-1``, as
        deduplication answers a copy it already holds)."""
        if not self.batches:
            self.close_batch()
        batch = self.batches.pop(0)
        entry = self.next_entry
        if result == OK:  # a batch that failed takes no entry
            self.next_entry += 1
        called = 0
        for i, (message, callback) in enumerate(batch):
            index = i if len(batch) > 1 else -1  # a batch of one may come without an index
            if result == OK:
                landed_id = FakeId(ledger, entry, index)
                self.log.append((landed_id, message.data(), message.properties()))
            if callback is not None:
                called += 1
                landed = (
                    FakeId(-1, -1, index)
                    if result != OK or unpositioned
                    else FakeId(ledger, entry, index, len(batch))
                )
                callback(result, landed)
        return called

    def land_all(self, result: Any = OK) -> None:
        if self.open:
            self.close_batch()
        while self.batches:
            self.land(result)


class FakeAsyncProducer:
    """The pulsar.asyncio producer around the fake: closing fails what is pending."""

    def __init__(self, producer: FakeProducer) -> None:
        self._producer = producer

    async def close(self) -> None:
        fake = self._producer
        fake.closed = True
        fake.land_all(_pulsar.Result.AlreadyClosed)


class FakeMessage:
    def __init__(self, message_id: FakeId, data: bytes, properties: dict[str, str]) -> None:
        self._message_id, self._data, self._properties = message_id, data, properties

    def message_id(self) -> FakeId:
        return self._message_id

    def data(self) -> bytes:
        return self._data

    def properties(self) -> dict[str, str]:
        return dict(self._properties)


class FakeReader:
    def __init__(self, messages: list[tuple[FakeId, bytes, dict[str, str]]]) -> None:
        self._messages = iter(messages)
        self.closed = False

    async def read_next(self) -> FakeMessage:
        return FakeMessage(*next(self._messages))

    async def has_message_available(self) -> bool:
        return self._left() > 0

    def _left(self) -> int:
        rest = list(self._messages)
        self._messages = iter(rest)
        return len(rest)

    async def close(self) -> None:
        self.closed = True


class FakeClient:
    """Readers over what the fake producer landed (inclusive starts only)."""

    def __init__(self, producer: FakeProducer) -> None:
        self.producer = producer
        self.readers: list[FakeReader] = []

    async def create_reader(
        self, topic: str, start: Any, start_message_id_inclusive: bool = False
    ) -> FakeReader:
        assert start_message_id_inclusive
        key = (start.ledger_id(), start.entry_id(), start.batch_index())
        log = self.producer.log
        at = next(i for i, (m, *_) in enumerate(log) if m._parts >= key)
        reader = FakeReader(log[at:])
        self.readers.append(reader)
        return reader


async def _channel(**config: Any) -> tuple[PulsarBackendWAL, FakeProducer]:
    async def nothing() -> None:
        return None

    async def no_preparation(channel: str, topic: str, fence: Awaitable[None] | None) -> None:
        if fence is not None:
            await fence

    fake = FakeProducer()
    wal = PulsarBackendWAL(
        FakeClient(fake),
        PulsarConfig(**config),
        "c",
        AccessMode.READ_WRITE,
        nothing,
        prepare_topic=no_preparation,
    )
    wal._state.producer = FakeAsyncProducer(fake)
    return wal, fake


async def _append(wal: PulsarBackendWAL, count: int) -> list[asyncio.Future[MessageId]]:
    futures: list[asyncio.Future[MessageId]] = [
        asyncio.ensure_future(append_entry(wal, f"p{i}".encode(), {"_t": "Insert"}))
        for i in range(count)
    ]
    await asyncio.sleep(0)  # the outbox goes out at the end of this iteration
    await asyncio.sleep(0)
    return futures


async def _outcomes(futures: list[asyncio.Future[MessageId]]) -> list[Any]:
    return list(await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5))


def _ids(entry: int, *indexes: int) -> list[PulsarMessageId]:
    return [PulsarMessageId(7, entry, i) for i in indexes]


async def test_a_burst_has_receipts_on_its_edges_only() -> None:
    wal, fake = await _channel()
    futures = await _append(wal, 5)
    assert [cb is not None for _, cb in fake.open] == [True, False, False, False, True]
    assert fake.land() == 2
    assert await _outcomes(futures) == _ids(0, 0, 1, 2, 3, 4)
    assert wal._state.in_flight == 0


async def test_appends_go_out_as_they_come_but_one_is_held_back() -> None:
    wal, fake = await _channel()
    futures = [append_entry(wal, b"x", {}) for _ in range(3)]
    assert len(fake.open) == 2  # the third waits: is it the last of the iteration?
    await asyncio.sleep(0)
    assert [cb is not None for _, cb in fake.open] == [True, False, True]
    fake.land()
    assert await asyncio.gather(*futures) == _ids(0, 0, 1, 2)


async def test_one_append_per_iteration_has_its_own_receipt() -> None:
    wal, fake = await _channel()
    for i in range(3):
        future = append_entry(wal, b"x", {})
        await asyncio.sleep(0)
        assert [cb is not None for _, cb in fake.open] == [True] * (i + 1)
    fake.close_batch()
    fake.land()
    assert await future == PulsarMessageId(7, 0, 2)


async def test_a_long_burst_is_cut_into_segments_that_share_a_batch() -> None:
    wal, fake = await _channel()
    futures = await _append(wal, 2 * SEGMENT_MESSAGES + 3)
    with_callback = [i for i, (_, cb) in enumerate(fake.open) if cb is not None]
    per = SEGMENT_MESSAGES
    assert with_callback == [0, per - 1, per, 2 * per - 1, 2 * per, 2 * per + 2]
    fake.land_all()
    assert await _outcomes(futures) == _ids(0, *range(2 * per + 3))


async def test_a_segment_may_start_inside_a_batch() -> None:
    wal, fake = await _channel()
    first = await _append(wal, 3)
    second = await _append(wal, 3)  # the client's batch is still open
    fake.land_all()
    assert await _outcomes(first) == _ids(0, 0, 1, 2)
    assert await _outcomes(second) == _ids(0, 3, 4, 5)


async def test_a_lone_append_has_its_own_receipt() -> None:
    wal, fake = await _channel()
    futures = await _append(wal, 1)
    assert [cb is not None for _, cb in fake.open] == [True]
    fake.land()
    assert await _outcomes(futures) == [PulsarMessageId(7, 0, -1)]


async def test_a_segment_cut_once_by_the_client_is_placed_exactly() -> None:
    wal, fake = await _channel()
    fake.cut_before = {2}  # the batching delay ran out while the segment was sent
    futures = await _append(wal, 4)
    fake.land_all()
    assert await _outcomes(futures) == _ids(0, 0, 1) + _ids(1, 0, 1)
    assert not wal.is_fenced


async def test_a_cut_leaving_an_edge_alone_in_its_batch() -> None:
    wal, fake = await _channel()
    fake.cut_before = {3, 4, 5}  # [0 1 2] [3] then [4] [5 6 7]
    last_alone = await _append(wal, 4)
    first_alone = await _append(wal, 4)
    fake.land_all()
    assert await _outcomes(last_alone) == _ids(0, 0, 1, 2) + _ids(1, -1)
    assert await _outcomes(first_alone) == _ids(2, -1) + _ids(3, 0, 1, 2)


async def test_a_segment_cut_twice_has_its_middle_read_back_from_the_log() -> None:
    wal, fake = await _channel()
    read_back = segment_count("c", READ_BACK)
    fake.cut_before = {1, 3}  # [0] [1 2] [3]: a stall of about the batching delay, twice
    futures = await _append(wal, 4)
    fake.land_all()
    assert await _outcomes(futures) == _ids(0, -1) + _ids(1, 0, 1) + _ids(2, -1)
    assert segment_count("c", READ_BACK) == read_back + 1
    assert not wal.is_fenced  # the gap between the edges was not taken for another producer
    assert all(reader.closed for reader in wal._state.client.readers)
    assert wal._state.in_flight == 0
    more = await _append(wal, 3)
    fake.land_all()
    assert await _outcomes(more) == _ids(3, 0, 1, 2)


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
    assert first == PulsarMessageId(7, 0, 0) and last == PulsarMessageId(7, 0, 2)
    assert wal._state.in_flight == 0


@pytest.mark.parametrize("same_payloads", [False, True], ids=["distinct", "identical"])
async def test_a_message_dropped_without_a_word_is_not_taken_for_landed(
    same_payloads: bool,
) -> None:
    """The client can refuse a message through its callback only; a middle message has
    none. The edges' batch indexes then do not span the segment, and reading the log
    back does not find the segment there either: nothing is guessed, and the owner,
    unable to show that nobody else wrote there, stops writing."""
    wal, fake = await _channel()
    unplaced = segment_count("c", UNPLACED)
    fake.drop = {2}
    payloads = [b"same" if same_payloads else f"p{i}".encode() for i in range(5)]
    futures: list[asyncio.Future[MessageId]] = [
        asyncio.ensure_future(append_entry(wal, payload, {})) for payload in payloads
    ]
    await asyncio.sleep(0)
    fake.land_all()
    outcomes = await _outcomes(futures)
    assert outcomes[0] == PulsarMessageId(7, 0, 0)
    assert all(isinstance(o, UnknownPositionError) for o in outcomes[1:])
    assert wal._state.in_flight == 0
    assert segment_count("c", UNPLACED) == unplaced + 1
    # what lies between its entries is not what this owner sent: it stops writing
    assert wal.is_fenced


async def test_appends_beyond_the_pending_limit_are_refused_not_queued() -> None:
    wal, fake = await _channel(max_pending_messages=5)
    futures = await _append(wal, 8)
    fake.land_all()
    outcomes = await _outcomes(futures)
    assert outcomes[:5] == _ids(0, 0, 1, 2, 3, 4)
    assert all(isinstance(o, UnavailableError) for o in outcomes[5:])
    assert "max_pending_messages" in str(outcomes[5])
    more = await _append(wal, 2)
    fake.land_all()
    assert await _outcomes(more) == _ids(1, 0, 1)


async def test_a_bad_property_fails_its_own_entry_only() -> None:
    wal, fake = await _channel()
    good = asyncio.ensure_future(append_entry(wal, b"a", {"k": "v"}))
    bad = asyncio.ensure_future(append_entry(wal, b"b", {"k": 5}))  # type: ignore[dict-item]
    also = asyncio.ensure_future(append_entry(wal, b"c", {"k": "v"}))
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


async def test_closing_as_a_read_back_starts_still_answers_its_middle() -> None:
    """close() may cancel a read-back before its first step (same loop iteration as
    the receipts that started it): a coroutine cancelled then never runs its body."""
    wal, fake = await _channel()
    fake.cut_before = {1, 3}
    futures = await _append(wal, 4)
    fake.land_all()  # the receipts are drained in the next iteration
    closing = asyncio.ensure_future(wal.close())  # runs right after that drain
    await closing
    outcomes = await _outcomes(futures)
    assert outcomes[0] == PulsarMessageId(7, 0, -1)
    assert all(isinstance(o, UnknownPositionError) for o in outcomes[1:])
    assert wal._state.in_flight == 0


async def test_closing_during_a_read_back_does_not_fence_a_healthy_channel() -> None:
    """The read-back is cancelled, so what lies between its edges stays unchecked: the
    receipts that waited for it cannot be acknowledged, but nobody else wrote there for
    all the channel knows. They are unknown, not taken for another producer's entry."""
    wal, fake = await _channel()
    fake.cut_before = {1, 3}  # segment A: [a0] [a1 a2] [a3 b0 b1 b2]
    first = await _append(wal, 4)
    second = await _append(wal, 3)
    fake.land_all()  # the receipts are drained in the next iteration
    await asyncio.ensure_future(wal.close())  # runs right after that drain
    assert all(f.done() for f in first + second)  # close() waited for the answers
    outcomes = await _outcomes(first)
    assert outcomes[0] == PulsarMessageId(7, 0, -1)
    assert all(isinstance(o, UnknownPositionError) for o in outcomes[1:])
    later = await _outcomes(second)
    assert all(type(o) is UnknownPositionError for o in later), later
    assert not wal.is_fenced and wal._state.in_flight == 0


def _record(into: list[tuple[Any, Any]], message_id: Any, error: Any) -> None:
    into.append((message_id, error))


def _answered_once_at_logged_ids(
    answers: dict[int, list[tuple[Any, Any]]], fake: FakeProducer, payloads: list[bytes]
) -> list[tuple[int, Any, Any]]:
    """Each append answered exactly once, and every id given is the log's id for that
    payload; the answers, for the checks particular to a test."""
    landed = {data: PulsarMessageId.from_pulsar(m) for m, data, _ in fake.log}
    out = []
    for i, got in answers.items():
        assert len(got) == 1, (i, got)
        message_id, error = got[0]
        if error is None:
            assert message_id == landed[payloads[i]], i
        out.append((i, message_id, error))
    return out


@pytest.mark.parametrize("seed", range(300))
async def test_random_cuts_refusals_and_failures_against_a_model(seed: int) -> None:
    """Whatever the client does to the sends (cuts anywhere, synchronous refusals,
    a failure of everything pending, a close with appends pending), every append is answered once,
    an id given is the one the log holds for that payload, nothing is left counted in
    flight, and a channel alone on its topic is never fenced."""
    rng = random.Random(seed)
    wal, fake = await _channel()
    total = rng.randrange(1, 120)
    fake.cut_before = {i for i in range(total) if rng.random() < rng.choice([0.05, 0.3, 0.7])}
    troubled = rng.random() < 0.5
    if troubled:
        fake.refuse = {i for i in range(total) if rng.random() < 0.05}
    answers: dict[int, list[tuple[Any, Any]]] = {i: [] for i in range(total)}
    payloads = [
        f"m{i}".encode() + (b"x" * SEGMENT_BYTES if rng.random() < 0.03 else b"")
        for i in range(total)
    ]
    sent = 0
    while sent < total:
        for _ in range(min(rng.randrange(1, 40), total - sent)):
            i = sent
            wal.submit(payloads[i], {}, functools.partial(_record, answers[i]))
            sent += 1
        await asyncio.sleep(0)
        while fake.batches and rng.random() < 0.5:
            if troubled and rng.random() < 0.1:  # the client fails everything pending
                fake.land_all(_pulsar.Result.Timeout)
            else:
                fake.land()
    close = troubled and rng.random() < 0.5
    if close:
        await wal.close()
    else:
        fake.land_all()
    for _ in range(3):
        await asyncio.sleep(0)
    while wal._readback.tasks:
        await asyncio.wait(list(wal._readback.tasks))
    await asyncio.sleep(0)
    for i, _, error in _answered_once_at_logged_ids(answers, fake, payloads):
        if error is not None and not troubled and not close:
            raise AssertionError((i, error))  # nothing went wrong: everything is placed
    assert wal._state.in_flight == 0
    # an edge refused by send_async itself resolves its segment out of log order and
    # can still trip the interleaving guard: only asserted without such refusals
    assert not wal.is_fenced or fake.refuse


async def test_a_foreign_entry_inside_a_cut_segment_fences_before_anything_after_it() -> None:
    """The interleaving guard's case inside a segment: the read-back finds another
    producer's message between the edges. Nothing from there on is acknowledged, not
    even a later segment whose receipts came while the read was running."""
    wal, fake = await _channel()
    fake.cut_before = {1, 3}  # segment A: [a0] [a1 a2] [a3 ... (B joins this batch)
    first = await _append(wal, 4)
    second = await _append(wal, 3)
    fake.land()  # [a0]
    fake.log.append((FakeId(7, fake.next_entry, -1), b"foreign", {}))  # another producer
    fake.next_entry += 1
    fake.land_all()  # [a1 a2], [a3 b0 b1 b2]
    outcomes = await _outcomes(first)
    assert outcomes[0] == PulsarMessageId(7, 0, -1)
    assert all(isinstance(o, UnknownPositionError) for o in outcomes[1:])
    assert all(isinstance(o, ChannelFencedError) for o in await _outcomes(second))
    assert wal.is_fenced and wal._state.in_flight == 0


async def test_a_middle_batch_that_failed_alone_does_not_shift_the_ids_after_it() -> None:
    """Edges in consecutive entries look like one cut, but the batch between them failed
    on its own (taking no entry): the first entry's batch size shows it is short."""
    wal, fake = await _channel()
    fake.cut_before = {2, 4}  # [a0 a1] [a2 a3] [a4 a5]
    futures = await _append(wal, 6)
    fake.land()
    fake.land(_pulsar.Result.ChecksumError)  # only middle messages: nobody hears of it
    fake.land_all()
    outcomes = await _outcomes(futures)
    assert outcomes[0] == PulsarMessageId(7, 0, 0)
    assert all(isinstance(o, UnknownPositionError) for o in outcomes[1:])
    landed = {m._parts for m, *_ in fake.log}
    assert (7, 0, 2) not in landed  # the id the one-cut shape would have handed out
    assert wal.is_fenced


def test_batch_size_is_read_from_the_serialized_id() -> None:
    assert batch_size(FakeId(1, 2, 0, 5)) == 5
    assert batch_size(FakeId(1, 2, -1)) is None
    # the real client's form: ledger 23481, entry 0, batch index 2, batch size 4
    real = types.SimpleNamespace(serialize=lambda: bytes.fromhex("08b9b701100020023004"))
    assert batch_size(real) == 4


class SlowClient(FakeClient):
    """Readers whose reads take a few loop iterations (later receipts come meanwhile)
    and may fail, as a real reader's can: half of the failures are the client's own
    (a read-back starts over after those), the others are not."""

    def __init__(self, producer: FakeProducer, rng: random.Random, fail: float) -> None:
        super().__init__(producer)
        self.rng, self.fail, self.failed, self.transient = rng, fail, 0, 0

    async def create_reader(
        self, topic: str, start: Any, start_message_id_inclusive: bool = False
    ) -> FakeReader:
        for _ in range(self.rng.randrange(4)):
            await asyncio.sleep(0)
        reader = await super().create_reader(topic, start, start_message_id_inclusive)
        inner = reader.read_next

        async def read_next() -> FakeMessage:
            for _ in range(self.rng.randrange(3)):
                await asyncio.sleep(0)
            if self.rng.random() < self.fail:
                if self.rng.random() < 0.5:
                    self.transient += 1
                    raise PulsarException(_pulsar.Result.ServiceUnitNotReady)
                self.failed += 1
                raise RuntimeError("read failed")
            return await inner()

        reader.read_next = read_next  # type: ignore[method-assign]
        return reader


class SlowClosingProducer(FakeAsyncProducer):
    """Closing lets the broker answer some batches first, then fails the rest, and the
    receipts are drained only after close() returned."""

    def __init__(self, producer: FakeProducer, rng: random.Random) -> None:
        super().__init__(producer)
        self.rng = rng

    async def close(self) -> None:
        fake = self._producer
        await asyncio.sleep(0)
        if fake.open:
            fake.close_batch()
        while fake.batches and self.rng.random() < 0.5:
            fake.land()
        await super().close()


@pytest.mark.parametrize("seed", range(400))
async def test_read_backs_foreign_entries_and_closes_against_a_model(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segments cut often (read-backs overlapping later segments), other producers'
    entries, silent drops, failing reads and a close at any point: every append is
    answered once, an id given is the log's for that payload, nothing after a foreign
    entry is acknowledged, and a channel alone on its topic is never fenced (a read the
    client failed is read again)."""
    monkeypatch.setattr(readback, "_AGAIN", Backoff(initial=0.001, maximum=0.004))
    again = segment_count("c", READ_AGAIN)
    rng = random.Random(seed)
    wal, fake = await _channel()
    client = SlowClient(fake, rng, fail=0.02 if rng.random() < 0.3 else 0.0)
    wal._state.client = client
    wal._state.producer = SlowClosingProducer(fake, rng)
    total = rng.randrange(1, 150)
    fake.cut_before = {i for i in range(total) if rng.random() < rng.choice([0.1, 0.3, 0.6])}
    foreign_rate = 0.05 if rng.random() < 0.3 else 0.0
    if rng.random() < 0.2:
        fake.drop = {i for i in range(total) if rng.random() < 0.03}
    close_at = rng.randrange(total + 1) if rng.random() < 0.5 else None
    answers: dict[int, list[tuple[Any, Any]]] = {i: [] for i in range(total)}
    payloads = [f"m{i}".encode() for i in range(total)]
    foreign: list[PulsarMessageId] = []
    sent = 0
    while sent < total:
        for _ in range(min(rng.randrange(1, 40), total - sent)):
            wal.submit(payloads[sent], {}, functools.partial(_record, answers[sent]))
            sent += 1
        if close_at is not None and sent >= close_at and not wal._state.closed:
            await asyncio.sleep(0)
            fake.land_all()  # receipts queued; read-backs they start are cancelled at once
            await wal.close()
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
        while fake.batches and rng.random() < 0.6:
            if fake.log and rng.random() < foreign_rate:  # between our entries
                foreign.append(PulsarMessageId(7, fake.next_entry, -1))
                fake.log.append((FakeId(7, fake.next_entry, -1), b"foreign", {}))
                fake.next_entry += 1
            fake.land()
    if not wal._state.closed:
        await asyncio.sleep(0)
        fake.land_all()
    for _ in range(10):
        await asyncio.sleep(0)
        while wal._readback.tasks:
            await asyncio.wait(list(wal._readback.tasks))
    for i, message_id, error in _answered_once_at_logged_ids(answers, fake, payloads):
        # (an edge dropped while the other landed resets the guard: not asserted then)
        if error is None and foreign and not fake.drop:
            assert message_id.sort_key() < foreign[0].sort_key(), i
    assert wal._state.in_flight == 0
    assert wal._readback._deferred is None
    healthy = not foreign and not fake.drop and not client.failed
    assert not (healthy and wal.is_fenced), wal._state.fenced
    if healthy and close_at is None:
        assert all(error is None for got in answers.values() for _, error in got)
        assert segment_count("c", READ_AGAIN) - again == client.transient


def test_a_serialized_id_this_parser_cannot_read_has_no_batch_size() -> None:
    truncated = types.SimpleNamespace(serialize=lambda: bytes.fromhex("08b9"))
    assert batch_size(truncated) is None
    unknown_wire_type = types.SimpleNamespace(serialize=lambda: bytes([0x0B]))
    assert batch_size(unknown_wire_type) is None


async def test_a_callback_that_raises_does_not_strand_receipts_behind_a_read_back() -> None:
    wal, fake = await _channel()
    fake.cut_before = {1, 3}  # segment A read back; B's receipts wait for it
    answers: list[tuple[Any, Any]] = []

    def bad(_message_id: Any, _error: Any) -> None:
        raise RuntimeError("a caller's bug")

    wal.submit(b"a0", {}, functools.partial(_record, answers))
    wal.submit(b"a1", {}, bad)  # a middle message: answered after the read-back
    wal.submit(b"a2", {}, functools.partial(_record, answers))
    wal.submit(b"a3", {}, functools.partial(_record, answers))
    await asyncio.sleep(0)
    later = await _append(wal, 3)
    fake.land_all()
    assert await _outcomes(later) == _ids(2, 1, 2, 3)
    assert len(answers) == 3 and wal._readback._deferred is None and wal._state.in_flight == 0


async def test_every_failed_append_says_whether_it_may_be_in_the_log() -> None:
    """Failed after the client had it (a timeout, a fence): may be in the log, never
    retried; refused before it left the client, or after the fence: not written."""
    wal, fake = await _channel()
    futures = await _append(wal, 3)
    fake.land(_pulsar.Result.Timeout)
    for timed_out in await _outcomes(futures):
        assert timed_out.outcome is WriteOutcome.UNKNOWN and not timed_out.retriable
    fake.refuse = {fake.sent}
    (refused,) = await _outcomes(await _append(wal, 1))
    assert refused.outcome is WriteOutcome.NOT_WRITTEN
    futures = await _append(wal, 2)
    fake.land(_pulsar.Result.ProducerFenced)
    for fenced in await _outcomes(futures):
        assert isinstance(fenced, ChannelFencedError)
        assert fenced.outcome is WriteOutcome.UNKNOWN
    (after,) = await _outcomes(await _append(wal, 1))
    assert isinstance(after, ChannelFencedError) and after.outcome is WriteOutcome.NOT_WRITTEN


async def test_appends_answered_without_a_position_are_placed_from_the_log() -> None:
    """After a reconnect the broker answers copies it already holds with ``-1:-1``: the
    appends are in the log right after the last placed one, and are answered with
    their ids there."""
    wal, fake = await _channel()
    first = await _append(wal, 2)
    fake.land()
    assert await _outcomes(first) == _ids(0, 0, 1)
    read_back = segment_count("c", READ_BACK)
    segment = await _append(wal, 3)
    fake.land(unpositioned=True)
    assert await _outcomes(segment) == _ids(1, 0, 1, 2)
    lone = asyncio.ensure_future(append_entry(wal, b"lone", {"_t": "Insert"}))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    fake.land(unpositioned=True)
    assert await _outcomes([lone]) == [PulsarMessageId(7, 2, -1)]
    assert segment_count("c", READ_BACK) == read_back + 2
    assert wal._state.in_flight == 0 and not wal.is_fenced
    more = await _append(wal, 2)  # the guard goes on from the placed ids
    fake.land()
    assert await _outcomes(more) == _ids(3, 0, 1)


async def test_the_same_bytes_with_other_properties_are_not_taken_for_the_append() -> None:
    wal, fake = await _channel()
    first = await _append(wal, 1)
    fake.land()
    await _outcomes(first)
    # the next entry holds the same bytes as the unpositioned append, not its properties
    fake.log.append((FakeId(7, fake.next_entry, -1), b"p0", {"_t": "Insert", "_tt": "1"}))
    fake.next_entry += 1
    again = await _append(wal, 1)
    fake.land(unpositioned=True)
    (outcome,) = await _outcomes(again)
    assert isinstance(outcome, UnknownPositionError)
    assert wal._state.in_flight == 0


async def test_after_an_unknown_outcome_an_unpositioned_append_is_not_placed() -> None:
    """An append whose send failed may still be in the log after the last placed one:
    the entries there are no longer known to be the next appends in order."""
    wal, fake = await _channel()
    first = await _append(wal, 1)
    fake.land()
    await _outcomes(first)
    lost = await _append(wal, 1)
    fake.land(_pulsar.Result.Timeout)
    (failed,) = await _outcomes(lost)
    assert failed.outcome is WriteOutcome.UNKNOWN
    fake.log.append((FakeId(7, fake.next_entry, -1), b"p0", {"_t": "Insert"}))  # it landed
    fake.next_entry += 1
    copy = await _append(wal, 1)  # the same bytes and properties as the lost one
    fake.land(unpositioned=True)
    (outcome,) = await _outcomes(copy)
    assert isinstance(outcome, UnknownPositionError)  # not the lost append's id


class FlakyClient(FakeClient):
    """The first ``hang`` reader creations never answer (a subscribe that reached a
    broker losing the topic), and the next ``fail`` readers fail their first read
    with a client error (``result``); later readers read the log."""

    def __init__(
        self,
        producer: FakeProducer,
        hang: int,
        fail: int = 0,
        result: _pulsar.Result = _pulsar.Result.ServiceUnitNotReady,
    ) -> None:
        super().__init__(producer)
        self.hang, self.fail, self.result, self.created = hang, fail, result, 0
        self.stuck: list[asyncio.Future[FakeReader]] = []

    async def create_reader(
        self, topic: str, start: Any, start_message_id_inclusive: bool = False
    ) -> FakeReader:
        self.created += 1
        if self.created <= self.hang:
            never: asyncio.Future[FakeReader] = asyncio.get_running_loop().create_future()
            self.stuck.append(never)
            return await never
        reader = await super().create_reader(topic, start, start_message_id_inclusive)
        if self.created <= self.hang + self.fail:

            async def failing() -> FakeMessage:
                raise PulsarException(self.result)

            reader.read_next = failing  # type: ignore[method-assign]
        return reader

    async def answer_late(self) -> list[FakeReader]:
        """The hung creations make their readers after all (the client went on)."""
        late = [FakeReader([]) for _ in self.stuck]
        for never, reader in zip(self.stuck, late, strict=True):
            never.set_result(reader)
        for _ in range(5):
            await asyncio.sleep(0)
        return late


@pytest.fixture
def short_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readback, "FIRST_ATTEMPT_S", 0.05)


@pytest.mark.usefixtures("short_attempts")
async def test_a_read_back_whose_reader_hangs_or_fails_starts_over_and_places_the_middle() -> None:
    wal, fake = await _channel()
    client = FlakyClient(fake, hang=2, fail=1)
    wal._state.client = client
    again = segment_count("c", READ_AGAIN)
    fake.cut_before = {1, 3}  # [0] [1 2] [3]: the middle is read back
    futures = await _append(wal, 4)
    fake.land_all()
    assert await _outcomes(futures) == _ids(0, -1) + _ids(1, 0, 1) + _ids(2, -1)
    assert client.created == 4 and segment_count("c", READ_AGAIN) == again + 3
    assert not wal.is_fenced and wal._state.in_flight == 0
    more = await _append(wal, 2)  # receipts flow again, the guard goes on
    fake.land_all()
    assert await _outcomes(more) == _ids(3, 0, 1)
    assert all(reader.closed for reader in client.readers)
    late = await client.answer_late()
    assert len(late) == 2 and all(reader.closed for reader in late)  # reaped


@pytest.mark.usefixtures("short_attempts")
async def test_unpositioned_appends_are_placed_by_a_read_that_starts_over() -> None:
    wal, fake = await _channel()
    first = await _append(wal, 1)
    fake.land()
    await _outcomes(first)
    client = FlakyClient(fake, hang=1, fail=1)
    wal._state.client = client
    segment = await _append(wal, 2)
    fake.land(unpositioned=True)
    assert await _outcomes(segment) == _ids(1, 0, 1)
    assert client.created == 3 and not wal.is_fenced
    assert all(reader.closed for reader in await client.answer_late())


class BehindClient(FakeClient):
    """Its first ``behind`` readers say the log has nothing more: readers behind it."""

    def __init__(self, producer: FakeProducer, behind: int) -> None:
        super().__init__(producer)
        self.behind = behind

    async def create_reader(
        self, topic: str, start: Any, start_message_id_inclusive: bool = False
    ) -> FakeReader:
        reader = await super().create_reader(topic, start, start_message_id_inclusive)
        if len(self.readers) <= self.behind:

            async def nothing_more() -> bool:
                return False

            reader.has_message_available = nothing_more  # type: ignore[method-assign]
        return reader


@pytest.mark.usefixtures("short_attempts")
@pytest.mark.parametrize("behind", [1, 1_000])
async def test_a_reader_that_sees_the_log_end_before_unpositioned_appends_is_not_believed(
    behind: int,
) -> None:
    """The broker answered them as copies of entries it holds: a reader that says the log
    ends first is behind, and a fresh one places them; readers that never see them
    leave them unknown within the send timeout, after reading again, not for ever."""
    wal, fake = await _channel(send_timeout_ms=400)
    first = await _append(wal, 1)
    fake.land()
    await _outcomes(first)
    client = BehindClient(fake, behind)
    wal._state.client = client
    again = segment_count("c", READ_AGAIN)
    segment = await _append(wal, 2)
    fake.land(unpositioned=True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcomes = await _outcomes(segment)
    took = loop.time() - started
    if behind == 1:
        assert outcomes == _ids(1, 0, 1)
        assert len(client.readers) == 2 and segment_count("c", READ_AGAIN) == again + 1
        assert not wal.is_fenced
    else:
        assert all(isinstance(o, UnknownPositionError) for o in outcomes), outcomes
        assert took < 2.0, took  # within the send timeout, with room for a step
        assert len(client.readers) > 2 and segment_count("c", READ_AGAIN) > again + 1
    assert wal._state.in_flight == 0
    assert all(reader.closed for reader in client.readers)


@pytest.mark.usefixtures("short_attempts")
async def test_a_read_back_that_never_gets_a_reader_ends_within_the_send_timeout() -> None:
    """Bounded: after about ``send_timeout_ms`` the middle is unknown and the owner
    stops writing, as when the read failed at once; nothing waits for ever."""
    wal, fake = await _channel(send_timeout_ms=400)
    client = FlakyClient(fake, hang=1_000)
    wal._state.client = client
    fake.cut_before = {1, 3}
    futures = await _append(wal, 4)
    fake.land_all()
    started = asyncio.get_running_loop().time()
    outcomes = await _outcomes(futures)
    took = asyncio.get_running_loop().time() - started
    assert outcomes[0] == PulsarMessageId(7, 0, -1)
    assert all(isinstance(o, UnknownPositionError) for o in outcomes[1:])
    assert 0.3 < took < 2.0, took  # the send timeout, not an attempt longer
    assert client.created >= 2  # it started over, with longer steps each time
    assert wal.is_fenced and wal._state.in_flight == 0
    assert all(reader.closed for reader in await client.answer_late())


async def test_a_read_the_broker_refuses_for_good_is_not_tried_again() -> None:
    wal, fake = await _channel()
    client = FlakyClient(fake, hang=0, fail=1_000, result=_pulsar.Result.AuthorizationError)
    wal._state.client = client
    again = segment_count("c", READ_AGAIN)
    fake.cut_before = {1, 3}
    futures = await _append(wal, 4)
    fake.land_all()
    outcomes = await _outcomes(futures)
    assert all(isinstance(o, UnknownPositionError) for o in outcomes[1:])
    assert client.created == 1 and segment_count("c", READ_AGAIN) == again
    assert wal.is_fenced


async def test_closing_stops_a_read_back_that_keeps_starting_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Also in the pause between two attempts."""
    monkeypatch.setattr(readback, "_AGAIN", Backoff(initial=60.0, maximum=60.0))
    wal, fake = await _channel(send_timeout_ms=0)  # no bound but the channel's life
    client = FlakyClient(fake, hang=0, fail=1_000)
    wal._state.client = client
    fake.cut_before = {1, 3}
    futures = await _append(wal, 4)
    fake.land_all()
    await asyncio.wait_for(
        _until(lambda: client.created == 1 and bool(client.readers[0].closed)), 5
    )
    await asyncio.sleep(0.01)  # in the 60 s pause now
    await asyncio.wait_for(wal.close(), 1)
    outcomes = await _outcomes(futures)
    assert all(isinstance(o, UnknownPositionError) for o in outcomes[1:])
    assert not wal.is_fenced and not wal._readback.tasks and client.created == 1


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.005)


class _TimesOut:
    """A read whose first ``failing`` attempts time out; then it answers ``"read"``."""

    def __init__(self, failing: int) -> None:
        self.failing, self.attempts = failing, 0

    async def __call__(self, step: float) -> str:
        self.attempts += 1
        if self.attempts <= self.failing:
            await asyncio.sleep(0.001)
            raise TimeoutError
        return "read"


@pytest.mark.usefixtures("short_attempts")
async def test_a_read_for_a_fence_starts_over_although_the_channel_is_fenced() -> None:
    """The fence watch's read after a fence (``once_fenced``) goes on where a read-back,
    moot once the channel is fenced, gives up."""
    wal, _ = await _channel()
    wal._state.fenced = ChannelFencedError("c", "a newer owner")
    again, after_fence = segment_count("c", READ_AGAIN), segment_count("c", READ_AGAIN_AFTER_FENCE)
    read = _TimesOut(failing=2)
    assert await wal._readback.retrying(read, once_fenced=True) == "read"
    assert read.attempts == 3
    moot = _TimesOut(failing=2)
    with pytest.raises(TimeoutError):
        await wal._readback.retrying(moot)
    assert moot.attempts == 1
    # counted apart from the read-backs' new attempts: they place no segment
    assert segment_count("c", READ_AGAIN_AFTER_FENCE) - after_fence == 2
    assert segment_count("c", READ_AGAIN) == again


@pytest.mark.usefixtures("short_attempts")
async def test_with_no_send_timeout_a_read_for_a_fence_ends_in_three_operation_timeouts() -> None:
    """Appends may wait for ever for receipts (``send_timeout_ms = 0``), but a fenced
    channel's answers do not wait for ever on a log that cannot be read."""
    wal, _ = await _channel(send_timeout_ms=0, operation_timeout_s=0.1)
    wal._state.fenced = ChannelFencedError("c", "a newer owner")
    read = _TimesOut(failing=1_000_000)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(wal._readback.retrying(read, once_fenced=True), 5)
    took = loop.time() - started
    # longer than one operation timeout, within three (an attempt that could not end
    # before the budget does is not started)
    assert 0.1 < took <= 0.35, took
    assert read.attempts >= 3


class _ForeignMessage(FakeMessage):
    def producer_name(self) -> str:
        return "new-owner"


class _GrowingReader:
    """A log that never ends: a new owner appends as fast as it is read."""

    def __init__(self) -> None:
        self.entry, self.closed = 100, False

    async def has_message_available(self) -> bool:
        await asyncio.sleep(0.001)
        return True

    async def read_next(self) -> FakeMessage:
        self.entry += 1
        return _ForeignMessage(FakeId(7, self.entry, -1), b"x", {})

    async def close(self) -> None:
        self.closed = True


class _GrowingLog:
    def __init__(self) -> None:
        self.readers: list[_GrowingReader] = []

    async def create_reader(self, topic: str, start: Any, **_: Any) -> _GrowingReader:
        self.readers.append(_GrowingReader())
        return self.readers[-1]


class _ClosedProducer:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


async def test_a_read_after_a_fence_chasing_a_new_owner_ends_unknown_not_repeated() -> None:
    """A log that keeps growing for the operation timeout is not read again from the
    start (each attempt would chase it as long): unknown, as before the attempts."""
    wal, _ = await _channel(operation_timeout_s=0.1)
    state = wal._state
    state.fenced = ChannelFencedError("c", "a newer owner")
    state.last_landed = PulsarMessageId(7, 100, -1)
    client = _GrowingLog()
    state.client = client
    producer = _ClosedProducer()
    loop = asyncio.get_running_loop()
    started = loop.time()
    found = await asyncio.wait_for(wal._watch._ours_after_close(producer, "old-owner"), 5)
    assert found is None and producer.closed
    assert loop.time() - started < 0.5
    assert len(client.readers) == 1 and client.readers[0].closed
    assert client.readers[0].entry > 110  # it was reading, not hung
