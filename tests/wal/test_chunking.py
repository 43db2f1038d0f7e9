"""Chunked messages on the memory backend: a message over the backend's entry limit is
written as chunk records and read back whole on every path; an owner change between
chunks leaves nothing half delivered; malformed chunks end a read with a typed error."""

from __future__ import annotations

import asyncio
import os
import zlib
from collections.abc import Mapping

import pytest

from streamwal.adaptors.memory import MemoryLogStore
from streamwal.adaptors.memory.backend import MemoryMessageId
from streamwal.errors import ChannelFencedError, CorruptedChunkError, InvalidInputError
from streamwal.wal import (
    WAL,
    AppendResult,
    DeliveryPolicy,
    ImmutableMessage,
    MessageType,
    MutableMessage,
)
from streamwal.wal.backend import AppendCallback, BackendMessage
from streamwal.wal.chunking import (
    KEY_CHUNK_CRC,
    KEY_CHUNK_ID,
    KEY_CHUNK_INDEX,
    ChunkAssembler,
    ChunkingBackend,
    reassemble,
    split,
)
from streamwal.wal.message import decode
from streamwal.wal.message.frame import FORMAT_PROPERTY, decode_chunk_header, is_chunk
from streamwal.wal.scanner import Scanner
from tests.wal.testkit import OpenOwner, OpenReader, fast_config, wait_until

#: what the ``open_reader`` fixture (tests/wal/conftest.py) opens readers with

ENTRY = 4096  # the store's entry limit in these tests: a few KiB make many chunks


@pytest.fixture
def store() -> MemoryLogStore:
    return MemoryLogStore(max_entry_bytes=ENTRY)


def _insert(payload: bytes, **properties: str) -> MutableMessage:
    return MutableMessage(MessageType.INSERT, payload, properties=properties)


async def _take(scanner: Scanner, count: int) -> list[ImmutableMessage]:
    """The next ``count`` inserts."""
    got: list[ImmutableMessage] = []
    async with asyncio.timeout(5):
        async for msg in scanner:
            if msg.type is MessageType.INSERT:
                got.append(msg)
            if len(got) == count:
                break
    return got


def _is_chunk(entry: BackendMessage) -> bool:
    """A chunk record, in either log format (v2: a chunk header in the payload)."""
    if FORMAT_PROPERTY in entry.properties:
        return is_chunk(entry.payload)
    return KEY_CHUNK_ID in entry.properties


async def _chunks_under_way(
    wal: WAL, store: MemoryLogStore, channel: str, size: int, delay: float, chunks: int
) -> tuple[bytes, asyncio.Future[AppendResult]]:
    """A ``size``-byte append, each entry answered ``delay`` s late, once ``chunks`` of
    its chunk records are in the log: its payload, and the append under way."""
    store.faults.append_delay = delay
    big = os.urandom(size)
    pending = asyncio.ensure_future(wal.append(_insert(big)))
    await wait_until(lambda: sum(_is_chunk(e) for e in store.entries(channel)) >= chunks)
    return big, pending


async def _read_back(wal: WAL, *results: AppendResult) -> list[ImmutableMessage]:
    """The inserts a read of everything delivers, checked to be ``results``, in order."""
    got = await _take(await wal.read(DeliveryPolicy.all()), len(results))
    assert [m.message_id for m in got] == [r.message_id for r in results]
    return got


def _starts_message(entry: BackendMessage) -> bool:
    """The first chunk of a chunked message, in either log format."""
    if FORMAT_PROPERTY in entry.properties:
        return is_chunk(entry.payload) and decode_chunk_header(entry)[0].index == 0
    return entry.properties.get(KEY_CHUNK_INDEX) == "0"


def _payloads() -> list[bytes]:
    return [b"small-1", os.urandom(ENTRY * 3 + 17), b"small-2", os.urandom(ENTRY * 10)]


def test_split_then_reassemble_gives_the_message_back() -> None:
    payload = os.urandom(50_000)
    props = {"_t": "Insert", "_tt": "7", "user": "u"}
    chunks = split(payload, props, ENTRY, chunk_id="c1")
    assert chunks is not None and len(chunks) > 10
    assert all(len(p) + sum(len(k) + len(v) for k, v in pr.items()) <= ENTRY for p, pr in chunks)
    assert "_t" not in chunks[0][1] and all("_t" not in pr for _, pr in chunks)
    entries = [BackendMessage(MemoryMessageId(i), p, pr) for i, (p, pr) in enumerate(chunks)]
    (whole,) = reassemble("ch", entries)
    assert whole.payload == payload
    assert whole.message_id == MemoryMessageId(0)  # the first chunk's id
    assert dict(whole.properties) == props
    assert split(b"x" * 100, props, ENTRY) is None  # fits: not chunked


def test_properties_that_leave_no_room_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="properties"):
        split(b"x" * ENTRY, {"k": "v" * ENTRY}, ENTRY)


async def test_round_trips_on_every_read_path(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner, open_reader: OpenReader
) -> None:
    wal = await open_owner()
    tail = await wal.read(DeliveryPolicy.latest())  # the write-ahead buffer
    payloads = _payloads()
    results = [await wal.append(_insert(p, k="v")) for p in payloads]
    raw = store.entries(channel)
    assert len(raw) > 1 + len(payloads)  # chunk records in the log
    assert sum(_is_chunk(e) for e in raw) == len(raw) - 3  # tick, 2 small

    buffered = await _take(tail, len(payloads))
    assert tail.source == "buffer"
    caught_up = await _take(await wal.read(DeliveryPolicy.all()), len(payloads))
    readonly = await open_reader()
    from_backend = await _take(await readonly.read(), len(payloads))
    for got in (buffered, caught_up, from_backend):
        assert [m.payload for m in got] == payloads
        assert [m.message_id for m in got] == [r.message_id for r in results]
        assert [m.time_tick for m in got] == [r.time_tick for r in results]
        assert all(m.properties == {"k": "v"} for m in got)
    # positional reads at a chunked message's id: from it, after it
    big = results[1].message_id
    (first,) = await _take(await readonly.read(DeliveryPolicy.start_from(big)), 1)
    assert first.payload == payloads[1]
    after = await _take(await readonly.read(DeliveryPolicy.start_after(big)), 2)
    assert [m.payload for m in after] == payloads[2:]
    by_tick = DeliveryPolicy.start_from_time_tick(results[3].time_tick)
    (last,) = await _take(await readonly.read(by_tick), 1)
    assert last.payload == payloads[3]


async def test_append_many_and_the_largest_message(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config(max_message_bytes=ENTRY * 20))
    payloads = _payloads()
    results = await wal.append_many([_insert(p) for p in payloads])
    assert [r.time_tick for r in results] == sorted(r.time_tick for r in results)
    got = await _take(await wal.read(DeliveryPolicy.all()), len(payloads))
    assert [m.payload for m in got] == payloads
    with pytest.raises(InvalidInputError, match="max_message_bytes"):
        await wal.append(_insert(b"x" * (ENTRY * 20 + 1)))
    with pytest.raises(InvalidInputError, match="message 1 of the batch"):
        await wal.append_many([_insert(b"ok"), _insert(b"x" * (ENTRY * 20 + 1))])


async def test_a_takeover_between_chunks_leaves_no_half_message(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    old = await open_owner(node_id=1)
    # each chunk answered 10 ms later: room to take over
    big, pending = await _chunks_under_way(old, store, channel, ENTRY * 20, 0.01, chunks=3)
    new = await open_owner(node_id=2)
    store.faults.append_delay = 0
    with pytest.raises(ChannelFencedError):
        await pending
    raw = store.entries(channel)
    started = [e for e in raw if _starts_message(e)]
    assert len(started) == 1  # the old owner's message stopped part-way ...
    assert new.first_message_id > started[0].message_id
    after = await new.append(_insert(b"after the takeover"))
    again = await new.append(_insert(big))  # ... and a whole one follows
    got = await _read_back(new, after, again)
    assert got[1].payload == big


async def test_an_unfinished_sequence_at_a_failed_chunk_is_dropped(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner(config=fast_config())
    # chunk by chunk, slowly enough to fail one
    big, pending = await _chunks_under_way(wal, store, channel, ENTRY * 5, 0.005, chunks=1)
    store.faults.fail_appends = 1  # a later chunk fails: the append is retried whole
    result = await pending
    store.faults.append_delay = 0
    raw = store.entries(channel)
    assert sum(_starts_message(e) for e in raw) == 2
    small = await wal.append(_insert(b"small"))
    got = await _read_back(wal, result, small)
    assert got[0].payload == big


async def test_idempotent_and_transactional_chunked_messages_count_once(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    big = os.urandom(ENTRY * 4)
    first = await wal.append(_insert(big).with_producer(7, 0))
    entries = len(store.entries(channel))
    assert await wal.append(_insert(big).with_producer(7, 0)) == first  # the retry
    assert len(store.entries(channel)) == entries  # nothing written again

    txn = await wal.begin_txn()
    await wal.append(_insert(big).with_txn(txn))
    await wal.append(_insert(b"small in txn").with_txn(txn))
    rolled = await wal.begin_txn()
    await wal.append(_insert(os.urandom(ENTRY * 3)).with_txn(rolled))
    await wal.rollback_txn(rolled)
    await wal.commit_txn(txn)
    got = await _take(await wal.read(DeliveryPolicy.all()), 3)
    assert [m.payload for m in got] == [big, big, b"small in txn"]
    assert got[1].txn_id == txn


async def test_truncation_before_a_chunked_message_keeps_it_whole(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner
) -> None:
    wal = await open_owner()
    await wal.append(_insert(os.urandom(ENTRY * 3)))
    big = os.urandom(ENTRY * 3)
    kept = await wal.append(_insert(big))
    await wal.checkpoint("reader", kept.message_id, kept.time_tick)
    await asyncio.sleep(0.01)
    await wal.truncate(retention=0)
    assert (await wal.retention()).truncated_before == kept.message_id
    got = await _take(await wal.read(DeliveryPolicy.all()), 1)
    assert got[0].payload == big


def _chunks(payload: bytes, cid: str = "c") -> list[BackendMessage]:
    head = {"_t": "Insert", "_v": "1", "_tt": "5", "_src": "1", "_lc": "00" * 8}
    records = split(payload, head, ENTRY, cid)
    assert records is not None
    return [BackendMessage(MemoryMessageId(i), p, pr) for i, (p, pr) in enumerate(records)]


def _with(entry: BackendMessage, **changes: str | None) -> BackendMessage:
    props = dict(entry.properties)
    for key, value in changes.items():
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    return BackendMessage(entry.message_id, entry.payload, props)


@pytest.mark.parametrize(
    "corrupt",
    [
        "missing-middle",
        "bad-checksum",
        "bad-index",
        "no-count",
        "foreign-continuation",
        "truncated-payload",
    ],
)
def test_malformed_chunks_raise_a_typed_error(corrupt: str) -> None:
    entries = _chunks(os.urandom(ENTRY * 4))
    if corrupt == "missing-middle":
        del entries[2]
    elif corrupt == "bad-checksum":
        entries = [_with(e, **{KEY_CHUNK_CRC: f"{zlib.crc32(b'x'):08x}"}) for e in entries]
    elif corrupt == "bad-index":
        entries[1] = _with(entries[1], **{KEY_CHUNK_INDEX: "x1"})
    elif corrupt == "no-count":
        entries[1] = _with(entries[1], _cn=None)
    elif corrupt == "foreign-continuation":
        entries[2] = _with(entries[2], **{KEY_CHUNK_ID: "other"})
    elif corrupt == "truncated-payload":
        entries[-1] = BackendMessage(
            entries[-1].message_id, entries[-1].payload[:-1], entries[-1].properties
        )
    with pytest.raises(CorruptedChunkError):
        list(reassemble("ch", entries))


def test_a_continuation_without_its_first_chunk_mid_read_is_corruption() -> None:
    assembler = ChunkAssembler("ch")
    plain = BackendMessage(MemoryMessageId(0), b"p", {"_t": "Insert"})
    assert assembler.feed(plain) is plain
    with pytest.raises(CorruptedChunkError, match="no first chunk"):
        assembler.feed(_chunks(os.urandom(ENTRY * 2))[1])
    # at the start of a read the same chunk is the tail of a message before it: skipped
    leading = ChunkAssembler("ch")
    assert leading.feed(_chunks(os.urandom(ENTRY * 2))[1]) is None
    assert leading.orphans == 1


async def test_a_scanner_ends_with_the_typed_error(
    store: MemoryLogStore, channel: str, open_owner: OpenOwner, open_reader: OpenReader
) -> None:
    wal = await open_owner()
    await wal.append(_insert(b"before"))
    log = store.log(channel)
    for i, entry in enumerate(_chunks(os.urandom(ENTRY * 3))):
        if i != 1:  # chunk 1 is lost
            offset = MemoryMessageId(len(log.entries))
            log.entries.append(BackendMessage(offset, entry.payload, entry.properties))
            log.appended_ms.append(0)
    log.notify()
    readonly = await open_reader()
    scanner = await readonly.read()
    with pytest.raises(CorruptedChunkError):
        await _take(scanner, 3)


def test_log_messages_decode_chunks_only_after_reassembly(store: MemoryLogStore) -> None:
    entries = _chunks(os.urandom(ENTRY * 2))
    with pytest.raises(Exception):  # noqa: B017 - a chunk alone is no message
        decode(entries[0], MemoryMessageId.from_bytes)
    (whole,) = reassemble("ch", entries)
    assert decode(whole, MemoryMessageId.from_bytes).type is MessageType.INSERT


class _FloorBackend:
    """A backend whose entry limit changes but never falls below ``min_entry_bytes``;
    it counts how often the chunking layer asks for the limit."""

    channel = "floor"
    min_entry_bytes = 4096

    def __init__(self) -> None:
        self.limit = 8192
        self.asked = 0
        self.entries: list[bytes] = []

    @property
    def max_entry_bytes(self) -> int:
        self.asked += 1
        return self.limit

    def submit(self, payload: bytes, properties: Mapping[str, str], done: AppendCallback) -> None:
        self.entries.append(payload)
        done(MemoryMessageId(len(self.entries)), None)


def test_an_append_within_the_backends_floor_skips_the_live_limit() -> None:
    """The floor spares small appends the limit's lookup; anything larger is still
    measured against the limit of the moment, so a lowered limit still chunks."""
    inner = _FloorBackend()
    backend = ChunkingBackend(inner)  # type: ignore[arg-type]
    answers: list[tuple[object, BaseException | None]] = []

    def done(message_id: object, error: BaseException | None) -> None:
        answers.append((message_id, error))

    backend.submit(bytes(4000), {"k": "v"}, done)
    assert inner.asked == 0 and len(inner.entries) == 1
    backend.submit(bytes(6000), {}, done)  # above the floor, within the limit: whole
    assert inner.asked == 1 and len(inner.entries) == 2
    inner.limit = 5000  # the broker's limit went down
    backend.submit(bytes(6000), {}, done)
    assert inner.asked == 2 and len(inner.entries) == 4  # two chunks
    assert all(error is None for _, error in answers) and len(answers) == 3
