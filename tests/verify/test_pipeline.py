"""The reading process of ``streamwal verify``, on the real broker: it sends the facts
an in-process read would give, in log order, a chunked message whole; a read that
fails raises in the caller; and a check cancelled mid-read (Ctrl-C) leaves no
process behind."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time

import pulsar
import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId
from streamwal.adaptors.pulsar.opener import client_logger
from streamwal.errors import UnavailableError
from streamwal.verify.cli import iter_topic, verify_channel
from streamwal.verify.history import Facts, entry_facts
from streamwal.verify.pipeline import BATCH, RAW_MAX, ReadingProcess, ReadOrder
from streamwal.wal.chunking import MIN_ENTRY_BYTES, reassemble, split
from streamwal.wal.message import MessageType, MutableMessage, encode
from streamwal_lab.bench.verify import write_wal_log
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration


def children() -> set[int]:
    """This process's live child processes (a reading process, while one runs)."""
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as text:
                found.update(int(p) for p in text.read().split())
        except OSError:
            continue
    return found


def read_facts(order: ReadOrder) -> tuple[list[Facts], object]:
    process = ReadingProcess()
    with process:
        process.start()
        facts = list(process.read(order))
    return facts, process._process


async def test_the_reading_process_sends_what_an_in_process_read_gives(
    stack: StackInfo, channel: str
) -> None:
    url = stack.pulsar_url
    topic = PulsarConfig(service_url=url).topic(channel)
    entries = await asyncio.to_thread(write_wal_log, url, topic, 2 * BATCH + 17)
    before = children()

    def here() -> list[Facts]:
        return [
            facts
            for raw in reassemble(channel, iter_topic(url, topic))
            for facts in entry_facts(raw, PulsarMessageId.from_bytes)
        ]

    sent, left = await asyncio.to_thread(read_facts, ReadOrder(url, topic, channel))
    assert len(sent) == entries and sent == await asyncio.to_thread(here)
    assert left is None and children() <= before  # closed: the child is gone
    # from an id, inclusive: the same facts from there on
    start = sent[BATCH + 3]
    assert isinstance(start, tuple)
    order = ReadOrder(url, topic, channel, start=start[0], inclusive=True)
    later, _ = await asyncio.to_thread(read_facts, order)
    assert later == sent[BATCH + 3 :]


async def test_small_entries_decoded_by_the_caller_agree_with_larger_decoded_by_the_child(
    stack: StackInfo, channel: str
) -> None:
    """Entries up to ``RAW_MAX`` bytes go to the caller as they were read and larger
    ones as facts, in the same batches: the facts are those of an in-process read, in
    log order."""
    url = stack.pulsar_url
    topic = PulsarConfig(service_url=url).topic(channel)
    # two ownerships: small messages, then larger than RAW_MAX, in one batch's reach
    await asyncio.to_thread(write_wal_log, url, topic, 300, 64)
    await asyncio.to_thread(write_wal_log, url, topic, 300, RAW_MAX + 1, 2)
    sent, _ = await asyncio.to_thread(read_facts, ReadOrder(url, topic, channel))
    raws = await asyncio.to_thread(lambda: list(iter_topic(url, topic)))
    here = [
        facts
        for raw in reassemble(channel, raws)
        for facts in entry_facts(raw, PulsarMessageId.from_bytes)
    ]
    assert len(sent) == 602 and sent == here
    assert {f[5] for f in sent} == {1, 2}  # both owners' entries, each path


def write_chunked(url: str, topic: str, payload: bytes) -> None:
    """One insert of ``payload`` as chunk records (how the WAL writes one over the
    broker's entry limit) after what the topic holds, then one plain insert; both
    confirm the topic's first entry, as :func:`write_wal_log`'s do."""
    client = pulsar.Client(url, logger=client_logger())
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        first = PulsarMessageId.from_pulsar(reader.read_next(10_000).message_id())
        reader.close()
        producer = client.create_producer(topic, batching_enabled=False)
        tick = time.time_ns() // 1_000_000 << 18
        for i, body in enumerate((payload, b"after")):
            msg = MutableMessage(MessageType.INSERT, body).stamped(tick + i, first, 1)
            data, props = encode(msg)
            for chunk, chunk_props in split(data, props, MIN_ENTRY_BYTES) or [(data, props)]:
                producer.send(chunk, chunk_props)
        producer.close()
    finally:
        client.close()


async def test_a_chunked_message_is_sent_whole(stack: StackInfo, channel: str) -> None:
    url = stack.pulsar_url
    topic = PulsarConfig(service_url=url).topic(channel)
    await asyncio.to_thread(write_wal_log, url, topic, 10)
    large = os.urandom(3 * MIN_ENTRY_BYTES)
    await asyncio.to_thread(write_chunked, url, topic, large)
    sent, _ = await asyncio.to_thread(read_facts, ReadOrder(url, topic, channel))
    raws = await asyncio.to_thread(lambda: list(iter_topic(url, topic)))
    assert len(raws) > len(sent) == 13  # the chunks are several entries, sent as one
    here = [
        facts
        for raw in reassemble(channel, raws)
        for facts in entry_facts(raw, PulsarMessageId.from_bytes)
    ]
    assert sent == here
    assert sent[11][1] == "" and sent[11][3] == hashlib.sha256(large).digest()
    assert sent[12][3] == hashlib.sha256(b"after").digest()


async def test_a_read_that_fails_raises_its_error_in_the_caller(stack: StackInfo) -> None:
    order = ReadOrder(stack.pulsar_url, "persistent://no-such-tenant/ns/topic", "topic")
    before = children()
    with pytest.raises(UnavailableError, match="TopicNotFound"):
        await asyncio.to_thread(read_facts, order)
    assert children() <= before


async def test_a_check_cancelled_mid_read_leaves_no_process_behind(
    stack: StackInfo, channel: str
) -> None:
    url = stack.pulsar_url
    topic = PulsarConfig(service_url=url).topic(channel)
    await asyncio.to_thread(write_wal_log, url, topic, 100_000)
    before = children()
    check = asyncio.create_task(verify_channel(url, channel, admin_url=stack.pulsar_admin_url))
    await asyncio.sleep(0.5)
    assert not check.done()
    assert children() - before  # the reading process runs
    check.cancel()
    with pytest.raises(asyncio.CancelledError):
        await check
    for _ in range(100):  # the reading thread stops at its next look
        if not children() - before:
            break
        await asyncio.sleep(0.05)
    assert not children() - before
