"""The conformance suite and Pulsar-specific checks on the real broker."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import AsyncIterator

import pulsar
import pytest

from streamwal.adaptors.pulsar import PulsarAccessMode, PulsarConfig, PulsarMessageId, PulsarOpener
from streamwal.adaptors.pulsar.segments import SEGMENT_BYTES, SEGMENT_MESSAGES
from streamwal.adaptors.testing import (
    BackendHarness,
    ConformanceSuite,
    append_many,
    read_all,
    writable,
)
from streamwal.errors import DecodeError, UnavailableError
from streamwal.wal.backend import AccessMode, DeliveryPolicy, append_entry
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration


@pytest.fixture
async def harness(stack: StackInfo) -> AsyncIterator[BackendHarness]:
    config = PulsarConfig(service_url=stack.pulsar_url)
    async with PulsarOpener(config) as node_a, PulsarOpener(config) as node_b:
        run = uuid.uuid4().hex[:8]
        counter = iter(range(1_000_000))
        yield BackendHarness(
            node_a=node_a,
            node_b=node_b,
            channel=lambda: f"conformance-{run}-{next(counter)}",
            max_message_size=config.max_message_size,
            foreign_id=PulsarMessageId(987_654_321, 3),
        )


class TestPulsarBackend(ConformanceSuite):
    pass


def test_message_id_bytes_and_text() -> None:
    mid = PulsarMessageId(12, 34, 5)
    assert PulsarMessageId.from_bytes(mid.to_bytes()) == mid
    assert len(mid.to_bytes()) == 20
    assert str(mid) == "12:34:5"
    assert PulsarMessageId.parse("12:34:5") == mid
    assert str(PulsarMessageId(12, 34)) == "12:34"
    assert PulsarMessageId(1, 9) < PulsarMessageId(2, 0) < PulsarMessageId(2, 0, 1)
    with pytest.raises(DecodeError):
        PulsarMessageId.from_bytes(b"short")
    with pytest.raises(DecodeError):
        PulsarMessageId.parse("a:b")


async def test_exclusivity_self_check_passes_on_the_real_broker(stack: StackInfo) -> None:
    async with PulsarOpener(PulsarConfig(service_url=stack.pulsar_url)) as opener:
        await opener.verify_exclusivity()
        assert opener._verified


async def test_a_second_exclusive_producer_is_refused_by_the_broker(
    stack: StackInfo, unique: str
) -> None:
    """What the fence rests on, observed with the raw client."""
    client = pulsar.Client(stack.pulsar_url, logger=None)
    topic = f"persistent://public/default/raw-exclusive-{unique}"
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    first.close()
    client.close()


async def test_exclusive_mode_waits_for_the_old_owner(stack: StackInfo, unique: str) -> None:
    url = stack.pulsar_url
    channel = f"exclusive-mode-{unique}"
    cfg = PulsarConfig(service_url=url, access_mode=PulsarAccessMode.EXCLUSIVE)
    async with PulsarOpener(cfg) as node_a, PulsarOpener(cfg) as node_b:
        a = await writable(node_a, channel)
        b = await node_b.open(channel, AccessMode.READ_WRITE)
        with pytest.raises(UnavailableError):
            await b.ensure_writable()  # retriable: the old owner is still there
        await append_many(a, "a", 3)
        await a.close()
        await b.ensure_writable()
        await append_many(b, "b", 3)
        await b.close()


async def test_unreachable_broker_is_a_bounded_unavailable_error(unique: str) -> None:
    cfg = PulsarConfig(service_url="pulsar://127.0.0.1:1", operation_timeout_s=1.0)
    async with PulsarOpener(cfg) as opener:
        wal = await opener.open(f"unreachable-{unique}", AccessMode.READ_WRITE)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(UnavailableError):
            await wal.ensure_writable()
        assert loop.time() - started < 10
        await wal.close()


async def test_start_after_inside_a_batch(stack: StackInfo, unique: str) -> None:
    """Batched ids (ledger, entry, batch index) are valid read positions."""
    async with PulsarOpener(PulsarConfig(service_url=stack.pulsar_url)) as opener:
        wal = await writable(opener, f"batched-{unique}")
        ids = await append_many(wal, "x", 50)
        batched = [i for i in ids if isinstance(i, PulsarMessageId) and i.batch_index >= 0]
        pivot = batched[len(batched) // 2] if batched else ids[25]
        k = ids.index(pivot)
        scanner = await wal.read(DeliveryPolicy.start_after(pivot))
        got = []
        async for entry in scanner:
            got.append(entry.message_id)
            if len(got) == len(ids) - k - 1:
                break
        await scanner.close()
        assert got == ids[k + 1 :]
        await wal.close()


async def test_a_burst_lands_as_batches_whose_ids_match_what_a_reader_sees(
    stack: StackInfo, unique: str
) -> None:
    """One burst longer than a segment, with a payload over the segment byte bound in
    the middle: every acknowledged id is the id a reader of the topic gets for that
    payload, and the messages went out in batches of many (a receipt per segment edge)."""
    async with PulsarOpener(PulsarConfig(service_url=stack.pulsar_url)) as opener:
        wal = await writable(opener, f"bursts-{unique}")
        count = 2 * SEGMENT_MESSAGES + 40
        payloads = [f"small-{i}".encode() for i in range(count)]
        payloads[SEGMENT_MESSAGES + 7] = b"B" * (SEGMENT_BYTES + 1)
        acked = await asyncio.gather(
            *(append_entry(wal, p, {"i": str(i)}) for i, p in enumerate(payloads))
        )
        entries = await read_all(opener, f"bursts-{unique}", count)
        assert [e.message_id for e in entries] == list(acked)
        assert [e.payload for e in entries] == payloads
        assert [e.properties["i"] for e in entries] == [str(i) for i in range(count)]
        per_entry = collections.Counter(
            (m.ledger, m.entry) for m in acked if isinstance(m, PulsarMessageId)
        )
        assert len(per_entry) < count // 4 and max(per_entry.values()) >= SEGMENT_MESSAGES // 2
        await wal.close()


async def test_a_segment_cut_by_stalls_is_placed_by_reading_it_back(
    stack: StackInfo, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Blocking the event loop between appends lets the producer's batching delay run
    out in the middle of one segment, more than once: the edges' receipts cannot place
    the middle, which is read back from the log; every id is still the one a reader
    of the topic sees."""
    channel = f"stalls-{unique}"
    caplog.set_level(logging.INFO, logger="streamwal.adaptors.pulsar.channel")
    async with PulsarOpener(PulsarConfig(service_url=stack.pulsar_url)) as opener:
        wal = await writable(opener, channel)
        appends = []
        for i in range(5):
            appends.append(append_entry(wal, f"stalled-{i}".encode(), {}))
            time.sleep(0.01)
        acked = await asyncio.wait_for(asyncio.gather(*appends), 30)
        assert "reading its middle back" in caplog.text
        assert len({(m.ledger, m.entry) for m in acked if isinstance(m, PulsarMessageId)}) >= 3
        entries = await read_all(opener, channel, 5)
        assert [e.message_id for e in entries] == list(acked)
        assert [e.payload for e in entries] == [f"stalled-{i}".encode() for i in range(5)]
        await wal.close()
