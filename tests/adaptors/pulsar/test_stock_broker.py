"""The WAL on a broker with Pulsar's own defaults: it holds its log by itself.

A private broker runs with Pulsar's default retention (none), deduplication (off) and
inactive-topic policy (``delete_when_no_subscriptions``), only checked faster (every
2 s, after 5 s without producers or readers). Each test gets a namespace of its own,
so the policies one sets are not seen by another.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

import pulsar
import pytest

from streamwal.adaptors.pulsar import PolicyAction, PulsarMessageId, PulsarOpener
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import UnsafeBrokerPolicyError
from streamwal.tso import InProcessTSO
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import read_topic, verify_channel
from streamwal.wal.initializing import open_read_only, open_wal
from streamwal.wal.message import MessageType, MutableMessage, decode_entry
from streamwal_lab.chaos.services import PrivatePulsar
from streamwal_lab.stack.pulsar import STOCK_INACTIVE_CHECK
from tests.adaptors.pulsar.stock import StockNamespace, stock_config

pytestmark = pytest.mark.integration

#: long enough for the broker's inactive-topic check to have run twice past the window
_PAST_INACTIVITY_S = (
    STOCK_INACTIVE_CHECK["brokerDeleteInactiveTopicsMaxInactiveDurationSeconds"]
    + 3 * STOCK_INACTIVE_CHECK["brokerDeleteInactiveTopicsFrequencySeconds"]
)


async def _append(
    opener: PulsarOpener, tso: InProcessTSO, channel: str, n: int, node: int = 1
) -> list[Ack]:
    wal = await open_wal(opener, channel, tso.allocator(), node)
    acks = []
    try:
        for i in range(n):
            payload = f"{channel}-{node}-{i}".encode()
            result = await wal.append(MutableMessage(MessageType.INSERT, payload))
            acks.append(Ack(result.message_id.to_bytes(), result.time_tick, digest(payload)))
    finally:
        await wal.close()
    return acks


async def _topics(admin: PulsarAdmin, namespace: str) -> set[str]:
    return set(await admin.get(f"persistent/public/{namespace}") or [])


async def test_an_ownerless_channel_keeps_its_log_and_its_topic(
    stock: PrivatePulsar, stock_ns: StockNamespace
) -> None:
    ns = stock_ns.name
    config = stock_ns.config()
    admin = stock_ns.admin
    channel = "ownerless"
    control = config.topic("control-without-wal")
    async with stock_ns.in_process_tso() as tso, PulsarOpener(config) as opener:
        acks = await _append(opener, tso, channel, 50)
        # the control: a plain producer's topic, written and left the same way
        producer = await opener.client.create_producer(control)
        await producer.send(b"control")
        await producer.close()
    topic = config.topic(channel)
    assert {topic, control} <= await _topics(admin, ns)

    await asyncio.sleep(_PAST_INACTIVITY_S)

    topics = await _topics(admin, ns)
    assert control not in topics, "the broker did not delete an inactive topic: test is moot"
    assert topic in topics
    subscriptions = await admin.get(f"{PulsarAdmin.topic_path(topic)}/subscriptions")
    assert subscriptions == [config.cursor_subscription]
    entries = await read_topic(stock.url, topic)
    decoded = [decode_entry(e, PulsarMessageId.from_bytes) for e in entries]
    inserts = [m.payload for ms in decoded for m in ms if m.type == MessageType.INSERT]
    assert len(inserts) == 50
    report = await verify_channel(stock.url, channel, acks=acks, namespace=ns)
    assert report.ok, report.summary()
    # a periodic time tick may share an entry with an insert: the checker counts messages
    messages = sum(len(ms) for ms in decoded)
    assert (report.decoded, report.acks_checked, report.foreign) == (messages, 50, [])

    # a read-only open reads it whole; a second owner opens on top of it
    async with stock_ns.in_process_tso() as tso, PulsarOpener(config) as opener:
        reader = await open_read_only(opener, channel)
        scanner = await reader.read()
        inserts = []
        async for message in scanner:
            if message.type is MessageType.INSERT:
                inserts.append(message.payload)
            if len(inserts) == 50:
                break
        await scanner.close()
        await reader.close()
        assert inserts == [f"{channel}-1-{i}".encode() for i in range(50)]
        more = await _append(opener, tso, channel, 5, node=2)
    report = await verify_channel(stock.url, channel, acks=[*acks, *more], namespace=ns)
    assert report.ok, report.summary()


@pytest.mark.parametrize(
    ("policy", "path", "body"),
    [
        ("message-ttl", "messageTTL", 3600),
        (
            "backlog-eviction",
            "backlogQuota?backlogQuotaType=destination_storage",
            {"limitSize": 10 * 1024 * 1024, "limitTime": -1, "policy": "consumer_backlog_eviction"},
        ),
    ],
)
async def test_a_policy_that_would_drop_the_backlog_is_refused_or_warned(
    stock: PrivatePulsar,
    stock_ns: StockNamespace,
    caplog: pytest.LogCaptureFixture,
    policy: str,
    path: str,
    body: object,
) -> None:
    ns = stock_ns.name
    admin = stock_ns.admin
    await admin.post(f"namespaces/public/{ns}/{path}", body)
    async with stock_ns.in_process_tso() as tso:
        async with PulsarOpener(stock_ns.config()) as opener:
            with pytest.raises(UnsafeBrokerPolicyError) as refused:
                await open_wal(opener, "refused", tso.allocator(), 1)
        assert refused.value.policies == (policy,)
        assert f"public/{ns}" in str(refused.value)
        assert "on_unsafe_policy: warn" in str(refused.value)
        # nothing was written: no time tick without an owner that may write
        entries = await read_topic(stock.url, stock_ns.config().topic("refused"))
        assert entries == []

        caplog.set_level(logging.WARNING, logger="streamwal.adaptors.pulsar.policies")
        warn = stock_ns.config(on_unsafe_policy=PolicyAction.WARN)
        async with PulsarOpener(warn) as opener:
            acks = await _append(opener, tso, "warned", 3)
        assert len(acks) == 3
        assert any(policy in r.getMessage() for r in caplog.records), caplog.text


async def test_a_deleted_cursor_without_retention_is_refused(
    stock: PrivatePulsar, stock_ns: StockNamespace
) -> None:
    ns = stock_ns.name
    config = stock_ns.config()
    admin = stock_ns.admin
    async with stock_ns.in_process_tso() as tso:
        async with PulsarOpener(config) as opener:
            await _append(opener, tso, "orphan", 3)
        topic = PulsarAdmin.topic_path(config.topic("orphan"))
        await admin.delete(f"{topic}/subscription/{config.cursor_subscription}")
        async with PulsarOpener(config) as opener:
            with pytest.raises(UnsafeBrokerPolicyError) as refused:
                await open_wal(opener, "orphan", tso.allocator(), 2)
        assert refused.value.policies == ("cursor-missing",)
        # with unbounded retention a deleted cursor loses nothing: the open goes on
        await admin.post(
            f"namespaces/public/{ns}/retention",
            {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
        )
        async with PulsarOpener(config) as opener:
            assert len(await _append(opener, tso, "orphan", 1)) == 1


async def test_the_deduplication_probe(
    stock: PrivatePulsar, stock_ns: StockNamespace, namespace: Callable[..., object]
) -> None:
    """Off on a stock broker: the probe reports it; enabled on the namespace: it passes."""
    plain = await namespace(deduplication=False)  # type: ignore[misc]
    admin = stock_ns.admin
    async with stock_ns.in_process_tso() as tso:
        async with PulsarOpener(stock_config(stock, plain)) as opener:
            with pytest.raises(UnsafeBrokerPolicyError) as refused:
                await open_wal(opener, "no-dedup", tso.allocator(), 1)
        assert refused.value.policies == ("deduplication",)
        assert f"set-deduplication public/{plain} --enable" in str(refused.value)
        # the probe's topics are gone again
        assert not any("probe" in t for t in await _topics(admin, plain))

        await admin.post(f"namespaces/public/{plain}/deduplication", True)
        async with PulsarOpener(stock_config(stock, plain)) as opener:
            await opener.verify_deduplication()
            assert len(await _append(opener, tso, "dedup", 2)) == 2
        assert not any("probe" in t for t in await _topics(admin, plain))


async def test_the_probe_reads_a_resent_sequence_id(stock: PrivatePulsar) -> None:
    """The probe's own facts: without deduplication the broker writes both copies."""
    from streamwal.adaptors.pulsar.deduplication import deduplication_enforced

    client = pulsar.asyncio.Client(stock.url)
    try:
        topic = f"persistent://public/default/dedup-raw-{uuid.uuid4().hex[:8]}"
        assert not await deduplication_enforced(client, topic, 10)
    finally:
        await client.close()
