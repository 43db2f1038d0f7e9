"""Packed entries on real Pulsar and a real etcd-backed TSO: a batch is one entry (the
producer does not batch), each message is addressed inside it, every read path gives
them back one by one, truncating to a message inside a pack keeps the pack's later
messages, and a new owner answers a retried idempotent batch from the packs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId, PulsarOpener
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import TruncatedError
from streamwal.tso import InProcessTSO
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import read_topic
from streamwal.verify.history import check_history
from streamwal.wal import WAL, DeliveryPolicy, MessageType, MutableMessage, open_wal
from streamwal.wal.message import decode_entry
from streamwal_lab.stack import StackInfo
from tests.wal.testkit import read_payloads

pytestmark = pytest.mark.integration


def _batch(prefix: str, count: int) -> list[MutableMessage]:
    return [
        MutableMessage(MessageType.INSERT, f"{prefix}{i:03d}".encode().ljust(128, b"."))
        for i in range(count)
    ]


async def _payloads(wal: WAL, policy: DeliveryPolicy, count: int) -> list[bytes]:
    return await read_payloads(wal, policy, count, timeout=30)  # a real broker: slower


@pytest.fixture
async def setting(
    stack: StackInfo, unique: str, tso: InProcessTSO
) -> AsyncIterator[tuple[str, PulsarConfig, InProcessTSO]]:
    pulsar = PulsarConfig(service_url=stack.pulsar_url)
    channel = f"wal-packs-{unique}"
    try:
        yield channel, pulsar, tso
    finally:
        topic = PulsarAdmin.topic_path(pulsar.topic(channel))
        await PulsarAdmin(stack.pulsar_admin_url).delete(f"{topic}?force=true")


async def test_a_batch_is_one_entry_and_every_read_unpacks_it(
    stack: StackInfo, setting: tuple[str, PulsarConfig, InProcessTSO]
) -> None:
    channel, pulsar, tso = setting
    batch = [m.with_producer(11, i) for i, m in enumerate(_batch("p", 40))]
    expected = [m.payload for m in batch]
    async with PulsarOpener(pulsar) as opener, PulsarOpener(pulsar) as second:
        wal = await open_wal(opener, channel, tso.allocator(), 1)
        tail = await wal.read(DeliveryPolicy.latest(), appended_only=True)
        results = await wal.append_many(batch)
        ids = [r.message_id for r in results]
        assert isinstance(ids[0], PulsarMessageId)
        assert len({(i.ledger, i.entry) for i in ids}) == 1  # type: ignore[attr-defined]
        assert [i.batch_index for i in ids] == list(range(40))  # type: ignore[attr-defined]
        tailed = [(await asyncio.wait_for(tail.__anext__(), 30)).payload for _ in range(40)]
        await tail.close()
        assert tailed == expected
        assert await _payloads(wal, DeliveryPolicy.all(), 40) == expected
        assert await _payloads(wal, DeliveryPolicy.start_from(ids[10]), 30) == expected[10:]
        assert await _payloads(wal, DeliveryPolicy.start_after(ids[10]), 29) == expected[11:]
        tick = results[20].time_tick
        assert await _payloads(wal, DeliveryPolicy.start_from_time_tick(tick), 20) == expected[20:]

        # a new owner rebuilds the idempotence windows from the pack: a retry is answered
        successor = await open_wal(second, channel, tso.allocator(), 2)
        again = await successor.append_many(batch[30:])
        assert again == results[30:]
        assert await _payloads(successor, DeliveryPolicy.start_after(ids[35]), 4) == expected[36:]
        await wal.close()
        await successor.close()

    raw = await read_topic(stack.pulsar_url, pulsar.topic(channel))
    messages = [m for e in raw for m in decode_entry(e, PulsarMessageId.from_bytes)]
    assert [m.payload for m in messages if m.type == MessageType.INSERT] == expected  # once
    acks = [
        Ack(r.message_id.to_bytes(), r.time_tick, digest(p))
        for r, p in zip(results, expected, strict=True)
    ]
    report = check_history(raw, PulsarMessageId.from_bytes, acks)
    assert report.ok, report.summary()
    assert report.acks_checked == 40


async def test_truncating_to_a_message_inside_a_pack_keeps_the_rest_of_it(
    setting: tuple[str, PulsarConfig, InProcessTSO],
) -> None:
    channel, pulsar, tso = setting
    async with PulsarOpener(pulsar) as opener:
        wal = await open_wal(opener, channel, tso.allocator(), 1)
        before = await wal.append(MutableMessage(MessageType.INSERT, b"before"))
        results = await wal.append_many(_batch("t", 6))
        inside = results[2].message_id
        assert await wal.truncate_to(inside) == inside
        with pytest.raises(TruncatedError):
            await wal.read(DeliveryPolicy.start_from(before.message_id))
        assert await _payloads(wal, DeliveryPolicy.start_after(inside), 3) == [
            m.payload for m in _batch("t", 6)[3:]
        ]
        # ``all`` starts right after the truncation id, inside the kept entry
        assert await _payloads(wal, DeliveryPolicy.all(), 3) == [
            m.payload for m in _batch("t", 6)[3:]
        ]
        await wal.close()
