"""Log format v2 on the memory backend (docs/wire-format.md): the WAL's own frame, the
caller's type and properties verbatim, WAL records marked, terms, packs of several
messages addressed by index, v1 logs still read, a newer format never skipped."""

from __future__ import annotations

import struct

import pytest

from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId, MemoryOpener
from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.errors import (
    CorruptedChunkError,
    DecodeError,
    InvalidInputError,
    UnsupportedLogFormatError,
)
from streamwal.wal import (
    DeliveryPolicy,
    ImmutableMessage,
    MessageType,
    MutableMessage,
)
from streamwal.wal.backend import AccessMode, BackendMessage, append_entry
from streamwal.wal.chunking import reassemble, split
from streamwal.wal.message import decode, decode_entry
from streamwal.wal.message.codec import encode
from streamwal.wal.message.frame import (
    FLAG_HAS_PRODUCER,
    FLAG_HAS_TXN,
    FLAG_WAL_RECORD,
    MESSAGE_HEADER,
    PACK_HEADER,
    encode_pack,
)
from tests.doc_snippets import python_block
from tests.wal.testkit import OpenOwner, OpenReader, fast_config, log_messages, take_and_close

#: what the ``open_reader`` fixture (tests/wal/conftest.py) opens readers with

MILVUS_PROPERTIES = {"_t": "1", "_v": "2", "_tt": "449", "_vc": "by-dev-rootcoord-dml_0", "": ""}


def test_the_frame_is_the_documented_layout() -> None:
    msg = MutableMessage(
        "Insert", b"row", vchannel="v1", properties={"_k": ""}, version=3
    ).with_producer(7, 8)
    payload, properties = encode(msg.stamped(123, MemoryMessageId(5), 42), term=9)
    assert properties == {"swf": "2"}
    magic, version, kind, flags, lc_len, count, source, term = PACK_HEADER.unpack_from(payload)
    assert (magic, version, kind, flags, count, source, term) == (b"SWF", 2, 1, 1, 1, 42, 9)
    offset = PACK_HEADER.size
    assert payload[offset : offset + lc_len] == struct.pack(">Q", 5)  # the id's byte form
    offset += lc_len
    fields = MESSAGE_HEADER.unpack_from(payload, offset)
    assert fields == (FLAG_HAS_PRODUCER, 0, 0, 3, 123, 7, 8, 0, 6, 2, 1, 3)
    offset += MESSAGE_HEADER.size
    assert payload[offset:] == b"Insert" + b"v1" + struct.pack("<II", 2, 0) + b"_k" + b"row"


def test_wal_records_and_txn_roles_are_flagged() -> None:
    tick = MutableMessage(MessageType.TIME_TICK).stamped(1, None, 1)
    payload, _ = encode(tick)
    flags, role = MESSAGE_HEADER.unpack_from(payload, PACK_HEADER.size)[:2]
    assert (flags, role) == (FLAG_WAL_RECORD, 0)
    member = MutableMessage("TimeTick").with_txn(77).stamped(2, MemoryMessageId(0), 1)
    payload, _ = encode(member)
    lc_len = PACK_HEADER.unpack_from(payload)[4]
    flags, role = MESSAGE_HEADER.unpack_from(payload, PACK_HEADER.size + lc_len)[:2]
    assert (flags, role) == (FLAG_HAS_TXN, 2)  # a caller's "TimeTick" inside a transaction
    raw = BackendMessage(MemoryMessageId(3), payload, {"swf": "2"})
    decoded = decode(raw, MemoryMessageId.from_bytes)
    assert decoded.type == "TimeTick" and not decoded.is_wal_record and decoded.txn_id == 77


async def test_caller_types_and_properties_come_back_verbatim(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    wal = await open_owner(term=7)
    kinds = ["TimeTick", "BeginTxn", "", "CreateCollection", "999"]
    results = [
        await wal.append(MutableMessage(k, k.encode(), properties=MILVUS_PROPERTIES)) for k in kinds
    ]
    for scanner, count in ((await wal.read(), 6), (await wal.read(appended_only=True), 5)):
        got = [m for m in await take_and_close(scanner, count) if not m.is_wal_record]
        assert [m.type for m in got] == kinds
        assert [m.message_id for m in got] == [r.message_id for r in results]
        assert all(m.properties == MILVUS_PROPERTIES and m.term == 7 for m in got)
    logged = log_messages(store, channel)
    assert logged[0].type is MessageType.TIME_TICK and logged[0].is_wal_record
    assert logged[0].term == 7
    assert [m.type for m in logged[1:]] == kinds and not any(m.is_wal_record for m in logged[1:])
    with pytest.raises(InvalidInputError, match="written by the WAL"):
        await wal.append(MutableMessage(MessageType.TIME_TICK))


async def test_appended_only_leaves_out_the_wal_records(open_owner: OpenOwner) -> None:
    wal = await open_owner()
    await wal.append(MutableMessage("a", b"1"))
    txn = await wal.begin_txn("v")
    await wal.append(MutableMessage("b", b"2", vchannel="v").with_txn(txn))
    await wal.commit_txn(txn)
    await wal.append(MutableMessage("c", b"3"))
    everything = await take_and_close(await wal.read(), 6)
    assert any(m.is_wal_record for m in everything)
    only = await take_and_close(await wal.read(appended_only=True), 3)
    assert [(m.type, m.payload) for m in only] == [("a", b"1"), ("b", b"2"), ("c", b"3")]
    assert only[1].txn_id == txn


async def test_properties_and_names_over_the_limits_are_refused(open_owner: OpenOwner) -> None:
    wal = await open_owner()
    with pytest.raises(InvalidInputError, match="properties"):
        await wal.append(MutableMessage("x", properties={"k": "v" * (1024 * 1024)}))
    with pytest.raises(InvalidInputError, match="type"):
        await wal.append(MutableMessage("t" * 70_000))
    assert (await wal.append(MutableMessage("x", b"ok"))).time_tick > wal.first_time_tick


async def _write_pack(
    store: MemoryLogStore, channel: str, after: ImmutableMessage, payloads: list[bytes]
) -> None:
    """A 3-message pack entry written straight to the log (as a packing writer would)."""
    backend = await MemoryOpener(store).open(channel, AccessMode.READ_WRITE)
    try:
        await backend.ensure_writable()
        msgs = [
            (MutableMessage("Insert", p, properties={"_i": str(i)}), after.time_tick + 1 + i)
            for i, p in enumerate(payloads)
        ]
        await append_entry(backend, encode_pack(msgs, after.message_id, 9, 4), {"swf": "2"})
        tail = MutableMessage("Insert", b"after the pack")
        await append_entry(
            backend,
            encode_pack([(tail, after.time_tick + 10)], after.message_id, 9, 4),
            {"swf": "2"},
        )
    finally:
        await backend.close()


async def test_a_pack_of_three_is_read_and_addressed_by_index(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str, open_reader: OpenReader
) -> None:
    wal = await open_owner()
    before = await wal.append(MutableMessage("Insert", b"before"))
    await wal.close()
    last = log_messages(store, channel)[-1]
    payloads = [b"p0", b"p1", b"p2"]
    await _write_pack(store, channel, last, payloads)
    entry = store.entries(channel)[-2]
    packed = decode_entry(entry, MemoryMessageId.from_bytes)
    ids = [m.message_id for m in packed]
    assert ids == [entry.message_id.in_pack(i) for i in range(3)]
    assert ids == sorted(ids) and entry.message_id < ids[0]
    assert all(m.term == 4 and m.source == 9 for m in packed)
    with pytest.raises(DecodeError, match="pack of 3"):
        decode(entry, MemoryMessageId.from_bytes)
    for i in range(3):  # ids survive their byte form
        assert MemoryMessageId.from_bytes(ids[i].to_bytes()) == ids[i]

    reader = await open_reader()
    got = await take_and_close(await reader.read(), 6)
    assert [m.payload for m in got[2:]] == [*payloads, b"after the pack"]
    assert [m.message_id for m in got[2:5]] == ids
    assert got[1].message_id == before.message_id
    for i in range(3):
        start = await take_and_close(await reader.read(DeliveryPolicy.start_from(ids[i])), 1)
        assert start[0].message_id == ids[i]
        after = await take_and_close(await reader.read(DeliveryPolicy.start_after(ids[i])), 1)
        assert after[0].payload == [*payloads, b"after the pack"][i + 1]
    by_tick = DeliveryPolicy.start_from_time_tick(packed[1].time_tick)
    from_tick = await take_and_close(await reader.read(by_tick), 2)
    assert [m.payload for m in from_tick] == [b"p1", b"p2"]


async def test_a_v1_log_is_read_and_a_v2_owner_continues_it(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str
) -> None:
    old = await open_owner(node_id=1, config=fast_config(log_format="v1"))
    await old.append(MutableMessage(MessageType.INSERT, b"v1", properties={"k": "v"}))
    with pytest.raises(InvalidInputError, match="format v1"):
        await old.append(MutableMessage("Milvus", b"x"))
    with pytest.raises(InvalidInputError, match="format v1"):
        await old.append(MutableMessage(MessageType.INSERT, b"x", properties={"_t": "1"}))
    assert all("swf" not in e.properties for e in store.entries(channel))
    new = await open_owner(node_id=2, term=3)
    await new.append(MutableMessage("Milvus", b"v2", properties={"_t": "1"}))
    got = [m for m in await take_and_close(await new.read(), 4) if not m.is_wal_record]
    assert [(m.type, m.payload, dict(m.properties), m.term) for m in got] == [
        (MessageType.INSERT, b"v1", {"k": "v"}, 0),
        ("Milvus", b"v2", {"_t": "1"}, 3),
    ]
    assert got[0].type is MessageType.INSERT  # the same constant a caller compares with
    assert [e.properties.get("swf") for e in store.entries(channel)] == [None, None, "2", "2"]


async def test_an_entry_of_a_newer_format_ends_the_read(
    open_owner: OpenOwner, store: MemoryLogStore, channel: str, open_reader: OpenReader
) -> None:
    wal = await open_owner()
    await wal.append(MutableMessage("a"))
    await wal.close()
    backend = await MemoryOpener(store).open(channel, AccessMode.READ_WRITE)
    await backend.ensure_writable()
    await append_entry(backend, b"SWF\x03", {"swf": "3"})
    await backend.close()
    reader = await open_reader()
    scanner = await reader.read()
    with pytest.raises(UnsupportedLogFormatError, match="newer log format"):
        await take_and_close(scanner, 3)
    assert scanner.skipped == 0


def test_a_v2_pack_over_the_entry_limit_is_chunked_in_its_frame() -> None:
    msg = MutableMessage("Insert", bytes(range(256)) * 200, properties={"_ck": "user's"})
    payload, props = encode(msg.stamped(5, MemoryMessageId(1), 1))
    chunks = split(payload, props, 4096, chunk_id="ab" * 16)
    assert chunks is not None and len(chunks) > 10
    assert all(pr == {"swf": "2"} and len(p) <= 4096 for p, pr in chunks)
    entries = [BackendMessage(MemoryMessageId(i), p, pr) for i, (p, pr) in enumerate(chunks)]
    (whole,) = reassemble("ch", entries)
    decoded = decode(whole, MemoryMessageId.from_bytes)
    assert decoded.payload == msg.payload and decoded.properties == {"_ck": "user's"}
    assert decoded.message_id == MemoryMessageId(0)


def test_a_damaged_v2_chunk_is_corruption_not_a_skip() -> None:
    msg = MutableMessage("Insert", bytes(range(256)) * 64)
    payload, props = encode(msg.stamped(5, MemoryMessageId(1), 1))
    chunks = split(payload, props, 4096)
    assert chunks is not None
    entries = [BackendMessage(MemoryMessageId(i), p, pr) for i, (p, pr) in enumerate(chunks)]
    damaged = bytearray(entries[1].payload)
    damaged[-1] ^= 0xFF  # the part, not the header: the pack's checksum no longer matches
    entries[1] = BackendMessage(entries[1].message_id, bytes(damaged), entries[1].properties)
    with pytest.raises(CorruptedChunkError, match="checksum"):
        list(reassemble("ch", entries))
    entries[1] = BackendMessage(entries[1].message_id, b"SWF\x02\x02" + b"\x00" * 3, props)
    with pytest.raises(CorruptedChunkError, match="malformed chunk header"):
        list(reassemble("ch", entries))


def test_the_document_s_plain_decoder_agrees_with_the_codec() -> None:
    """docs/wire-format.md's decoder (pulsar-client only) on a pack of three and a v1
    entry: the same fields as the codec's."""
    code = python_block("docs/wire-format.md", "## Decoding with pulsar-client only")
    code = code.split("\nclient = pulsar.Client(")[0]
    namespace: dict[str, object] = {}
    exec(code, namespace)
    plain = namespace["decode_entry"]
    msgs = [
        (MutableMessage("Insert", b"a", properties={"_k": ""}).with_producer(1, 2), 10),
        (MutableMessage("", b"b", vchannel="v").with_txn(9), 11),
        (MutableMessage(MessageType.COMMIT_TXN, b"1", vchannel="v").with_txn(9), 12),
    ]
    entry = BackendMessage(
        PulsarMessageId(3, 4), encode_pack(msgs, PulsarMessageId(3, 1), 7, 5), {"swf": "2"}
    )
    v1_payload, v1_props = encode(
        MutableMessage("Delete", b"d").stamped(13, PulsarMessageId(3, 1), 7), log_format=1
    )
    v1 = BackendMessage(PulsarMessageId(3, 5), v1_payload, v1_props)
    for raw in (entry, v1):
        ours = decode_entry(raw, PulsarMessageId.from_bytes)
        theirs = plain(raw.message_id.to_bytes(), dict(raw.properties), raw.payload)  # type: ignore[operator]
        assert [
            (
                t["message_id"], t["type"], t["wal_record"], t["time_tick"], t["source"],
                t["term"], t["vchannel"], t["last_confirmed"], t["producer_id"],
                t["sequence"], t["txn_id"], t["payload"], t["properties"],
            )
            for t in theirs
        ] == [
            (
                m.message_id.to_bytes(), str(m.type), m.is_wal_record, m.time_tick, m.source,
                m.term, m.vchannel, m.last_confirmed.to_bytes(), m.producer_id,
                m.sequence, m.txn_id, m.payload, dict(m.properties),
            )
            for m in ours
        ]  # fmt: skip
