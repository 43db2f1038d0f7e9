"""Log formats v1 and v2 on the real stack (docs/wire-format.md): a pack of three
messages in one Pulsar entry, sent by a plain Pulsar producer, read through the WAL
with ids ``ledger:entry:index`` (catch-up, start from and after an id inside it) and
checked by ``streamwal verify``'s checker; a channel begun in v1 and continued in v2
read whole; an entry of a newer format ends a read instead of being skipped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pulsar
import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId, PulsarOpener
from streamwal.errors import UnsupportedLogFormatError
from streamwal.tso import InProcessTSO
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import read_topic
from streamwal.verify.history import check_history
from streamwal.wal import DeliveryPolicy, ImmutableMessage, MessageType, MutableMessage
from streamwal.wal.initializing import open_read_only, open_wal
from streamwal.wal.message.frame import encode_pack
from streamwal.wal.scanner import Scanner
from streamwal_lab.stack import StackInfo
from tests.wal.testkit import take_and_close

pytestmark = pytest.mark.integration

PACK = [b"pack-0", b"pack-1", b"pack-2"]


@pytest.fixture
async def opener(stack: StackInfo) -> AsyncIterator[PulsarOpener]:
    async with PulsarOpener(PulsarConfig(service_url=stack.pulsar_url)) as opened:
        yield opened


async def _take(scanner: Scanner, count: int) -> list[ImmutableMessage]:
    return await take_and_close(scanner, count, timeout=30)  # a real broker: slower


def _send_raw(
    service_url: str, topic: str, entries: list[tuple[bytes, dict[str, str]]]
) -> list[Any]:
    """Each entry as one Pulsar message of its own (no Pulsar batching), in order."""
    client = pulsar.Client(service_url, logger=None)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(payload, properties=props) for payload, props in entries]
        producer.close()
        return ids
    finally:
        client.close()


async def test_a_pack_of_three_from_a_plain_producer_is_read_by_index(
    stack: StackInfo, tso: InProcessTSO, opener: PulsarOpener, unique: str
) -> None:
    channel = f"formats-pack-{unique}"
    topic = opener.config.topic(channel)
    wal = await open_wal(opener, channel, tso.allocator(), 1, term=5)
    before = await wal.append(MutableMessage("Insert", b"before"))
    first_id = wal.first_message_id
    await wal.close()
    base = (await tso.allocator().allocate()) + 1
    stamped = [
        (MutableMessage("Insert", p, properties={"_i": str(i)}), base + i)
        for i, p in enumerate(PACK)
    ]
    # the same owner (node 1, term 5) going on: a new term would need an owner's
    # first time tick before it (the checker's term rules)
    pack = encode_pack(stamped, before.message_id, 1, 5)
    tail = encode_pack([(MutableMessage("Insert", b"tail"), base + 10)], before.message_id, 1, 5)
    sent = await asyncio.to_thread(
        _send_raw,
        stack.pulsar_url,
        topic,
        [(pack, {"swf": "2"}), (tail, {"swf": "2"})],
    )
    entry = PulsarMessageId.from_pulsar(sent[0])
    assert entry.batch_index < 0  # a whole entry: the pack's index is ours
    ids = [PulsarMessageId(entry.ledger, entry.entry, i) for i in range(3)]
    reader = await open_read_only(opener, channel)
    try:
        got = await _take(await reader.read(), 6)
        assert [m.message_id for m in got[:2]] == [first_id, before.message_id]
        assert [m.payload for m in got[2:]] == [*PACK, b"tail"]
        assert [m.message_id for m in got[2:5]] == ids
        assert [(m.term, m.source, dict(m.properties)) for m in got[2:5]] == [
            (5, 1, {"_i": str(i)}) for i in range(3)
        ]
        assert got[0].term == 5 and got[0].is_wal_record
        for i, mid in enumerate(ids):
            (start,) = await _take(await reader.read(DeliveryPolicy.start_from(mid)), 1)
            assert (start.message_id, start.payload) == (mid, PACK[i])
            (after,) = await _take(await reader.read(DeliveryPolicy.start_after(mid)), 1)
            assert after.payload == [*PACK, b"tail"][i + 1]
        # the byte form of an id inside the pack is Pulsar's (ledger, entry, index)
        assert PulsarMessageId.from_bytes(ids[2].to_bytes()) == ids[2]
    finally:
        await reader.close()
    raw = await read_topic(stack.pulsar_url, topic)
    acks = [Ack(before.message_id.to_bytes(), before.time_tick, digest(b"before"))]
    acks += [Ack(mid.to_bytes(), base + i, digest(PACK[i])) for i, mid in enumerate(ids)]
    report = check_history(raw, PulsarMessageId.from_bytes, acks, [])
    assert report.ok, report.violations
    assert report.messages == 6 and report.decoded == 6


async def test_a_channel_written_in_v1_is_read_after_a_v2_owner_continues_it(
    stack: StackInfo, tso: InProcessTSO, opener: PulsarOpener, unique: str
) -> None:
    channel = f"formats-v1-{unique}"
    topic = opener.config.topic(channel)
    old = await open_wal(opener, channel, tso.allocator(), 1, log_format="v1")
    v1 = await old.append(MutableMessage(MessageType.INSERT, b"v1", properties={"k": "v"}))
    await old.close()
    new = await open_wal(opener, channel, tso.allocator(), 2, term=3)
    v2 = await new.append(MutableMessage("Milvus", b"v2", properties={"_t": "2", "": ""}))
    try:
        got = [m for m in await _take(await new.read(), 4) if not m.is_wal_record]
    finally:
        await new.close()
    assert [(m.message_id, m.type, m.payload, dict(m.properties), m.term) for m in got] == [
        (v1.message_id, MessageType.INSERT, b"v1", {"k": "v"}, 0),
        (v2.message_id, "Milvus", b"v2", {"_t": "2", "": ""}, 3),
    ]
    raw = await read_topic(stack.pulsar_url, topic)
    assert [e.properties.get("swf") for e in raw] == [None, None, "2", "2"]
    assert raw[1].properties["_t"] == "Insert"  # format v1, as a reader before v2 reads it
    acks = [
        Ack(v1.message_id.to_bytes(), v1.time_tick, digest(b"v1")),
        Ack(v2.message_id.to_bytes(), v2.time_tick, digest(b"v2")),
    ]
    report = check_history(raw, PulsarMessageId.from_bytes, acks, [])
    assert report.ok and report.decoded == 4, report


async def test_an_entry_of_a_newer_format_is_an_error_not_a_skip(
    stack: StackInfo, tso: InProcessTSO, opener: PulsarOpener, unique: str
) -> None:
    channel = f"formats-newer-{unique}"
    topic = opener.config.topic(channel)
    wal = await open_wal(opener, channel, tso.allocator(), 1)
    await wal.close()
    await asyncio.to_thread(_send_raw, stack.pulsar_url, topic, [(b"SWF\x03", {"swf": "3"})])
    reader = await open_read_only(opener, channel)
    try:
        scanner = await reader.read()
        with pytest.raises(UnsupportedLogFormatError):
            await _take(scanner, 2)
        assert scanner.skipped == 0
    finally:
        await reader.close()
    raw = await read_topic(stack.pulsar_url, topic)
    with pytest.raises(UnsupportedLogFormatError):
        check_history(raw, PulsarMessageId.from_bytes, [], [])
