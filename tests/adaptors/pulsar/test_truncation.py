"""Checkpoints, truncation and the backlog quota on a broker with Pulsar's defaults.

On the stock broker (no retention), what no cursor holds is deleted: truncating moves
the WAL's own cursor, and the broker then really drops ledgers.
"""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.pulsar import PulsarOpener
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import QuotaExceededError, TruncatedError
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import verify_channel
from streamwal.wal.backend import DeliveryPolicy
from streamwal.wal.config import WALConfig
from streamwal.wal.initializing import open_read_only, open_wal
from streamwal.wal.message import MessageType, MutableMessage
from streamwal.wal.message_id import MessageId
from streamwal.wal.wal import WAL
from streamwal_lab.chaos.services import PrivatePulsar
from tests.adaptors.pulsar.stock import StockNamespace

pytestmark = pytest.mark.integration

_PAYLOAD = 10 * 1024


class _Sent:
    """What a test needs of an acknowledged append."""

    def __init__(self, message_id: MessageId, time_tick: int, payload: bytes) -> None:
        self.message_id = message_id
        self.time_tick = time_tick
        self.payload = payload

    def ack(self) -> Ack:
        return Ack(self.message_id.to_bytes(), self.time_tick, digest(self.payload))


async def _fill(wal: WAL, tag: str, count: int, size: int = _PAYLOAD) -> list[_Sent]:
    """``count`` inserts of ``size`` bytes each, appended together, in order."""
    payloads = [f"{tag}-{i:05d}-".encode().ljust(size) for i in range(count)]
    results = await asyncio.gather(
        *(wal.append(MutableMessage(MessageType.INSERT, p)) for p in payloads)
    )
    return [_Sent(r.message_id, r.time_tick, p) for r, p in zip(results, payloads, strict=True)]


async def _stats(admin: PulsarAdmin, topic: str) -> tuple[int, list[int]]:
    path = PulsarAdmin.topic_path(topic)
    stats, internal = await asyncio.gather(
        admin.get(f"{path}/stats"), admin.get(f"{path}/internalStats")
    )
    return int(stats["storageSize"]), [int(ledger["ledgerId"]) for ledger in internal["ledgers"]]


async def test_checkpoint_truncate_deletes_ledgers_and_reads_before_get_truncated_error(
    stock: PrivatePulsar, stock_ns: StockNamespace
) -> None:
    ns = stock_ns.name
    config = stock_ns.config()
    admin = stock_ns.admin
    channel = "bounded"
    topic = config.topic(channel)
    async with stock_ns.in_process_tso() as tso:
        async with PulsarOpener(config) as opener:
            wal = await open_wal(opener, channel, tso.allocator(), 1)
            old = await _fill(wal, "old", 300)  # about 3 MB in the first ledger
            await wal.close()
        # a new ledger on the next load: the first one can then be deleted whole
        await admin.put(f"{PulsarAdmin.topic_path(topic)}/unload")
        async with PulsarOpener(config) as opener:
            wal = await open_wal(opener, channel, tso.allocator(), 2)
            new = await _fill(wal, "new", 300)
            size_before, ledgers_before = await _stats(admin, topic)
            assert len(ledgers_before) >= 2 and size_before > 5 * 1024 * 1024

            keep = new[100]
            await wal.checkpoint("flusher", keep.message_id, keep.time_tick)
            point = await wal.truncate(retention=0)
            assert point == keep.message_id  # the slowest (only) consumer holds it

            # the broker drops every ledger that no cursor holds any more (deduplication's
            # cursor included: it moves at its next snapshot, every 5 s on this broker)
            for _ in range(150):
                size_after, ledgers_after = await _stats(admin, topic)
                if ledgers_after[0] != ledgers_before[0]:
                    break
                await asyncio.sleep(0.2)
            internal = await admin.get(f"{PulsarAdmin.topic_path(topic)}/internalStats")
            cursors = {k: v["markDeletePosition"] for k, v in internal["cursors"].items()}
            assert ledgers_before[0] not in ledgers_after, (cursors, internal["ledgers"])
            assert size_after < size_before - 2 * 1024 * 1024, (size_before, size_after)

            with pytest.raises(TruncatedError) as refused:
                await wal.read(DeliveryPolicy.start_from(old[0].message_id))
            assert refused.value.earliest == keep.message_id
            with pytest.raises(TruncatedError):
                await wal.checkpoint("late", old[5].message_id, old[5].time_tick)

            # resuming after the checkpoint reads on from the next message, exactly
            scanner = await wal.read(DeliveryPolicy.after_checkpoint("flusher"))
            first = await anext(aiter(scanner))
            while first.type is not MessageType.INSERT:
                first = await anext(aiter(scanner))
            assert first.message_id == new[101].message_id
            await scanner.close()
            await wal.close()

    report = await verify_channel(
        stock.url,
        channel,
        acks=[m.ack() for m in old + new],
        namespace=ns,
        admin_url=stock.admin_url,
    )
    assert report.ok, report.summary()
    assert report.acks_truncated == 400 and report.acks_checked == 200
    assert report.truncated_before == str(keep.message_id)


async def test_a_slow_consumer_and_the_window_hold_truncation_back_across_owners(
    stock_ns: StockNamespace,
) -> None:
    config = stock_ns.config()
    async with stock_ns.in_process_tso() as tso:
        async with PulsarOpener(config) as opener:
            wal = await open_wal(opener, "held", tso.allocator(), 1)
            # one by one: each its own entry, so backlogs (counted in entries) differ
            sent = [s for i in range(40) for s in await _fill(wal, f"m{i}", 1, size=100)]
            await wal.checkpoint("fast", sent[35].message_id, sent[35].time_tick)
            await wal.checkpoint("slow", sent[10].message_id, sent[10].time_tick)
            # an hour's window keeps everything: nothing to truncate
            assert await wal.truncate(retention=3600) is None
            await wal.close()
        # a new owner on another opener sees the checkpoints and truncates by them
        async with PulsarOpener(config) as opener:
            wal = await open_wal(opener, "held", tso.allocator(), 2)
            state = await wal.retention()
            assert [c.checkpoint.consumer for c in state.consumers] == ["fast", "slow"]
            slow = state.checkpoint_of("slow")
            assert slow is not None and slow.message_id == sent[10].message_id
            assert slow.time_tick == sent[10].time_tick
            backlog = {c.checkpoint.consumer: c.backlog_messages or 0 for c in state.consumers}
            assert backlog["slow"] > backlog["fast"] > 0

            assert await wal.truncate(retention=0) == sent[10].message_id
            await wal.checkpoint("slow", sent[30].message_id, sent[30].time_tick)
            assert await wal.truncate(retention=0) == sent[30].message_id
            await wal.remove_checkpoint("slow")
            assert await wal.truncate(retention=0) == sent[35].message_id
            await wal.close()
        # a reader of another node sees the same truncation point
        async with PulsarOpener(config) as opener:
            reader = await open_read_only(opener, "held")
            state = await reader.retention()
            assert state.truncated_before == sent[35].message_id
            with pytest.raises(TruncatedError):
                await reader.read(DeliveryPolicy.start_after(sent[34].message_id))
            await reader.close()


async def test_a_backlog_quota_names_itself_and_what_holds_the_backlog(
    stock: PrivatePulsar, stock_ns: StockNamespace
) -> None:
    ns = stock_ns.name
    admin = PulsarAdmin(stock.admin_url)
    quota = {"limitSize": 256 * 1024, "limitTime": -1, "policy": "producer_exception"}
    await admin.post(
        f"namespaces/public/{ns}/backlogQuota?backlogQuotaType=destination_storage", quota
    )
    config = stock_ns.config()
    async with stock_ns.in_process_tso() as tso:
        async with PulsarOpener(config) as opener:
            wal = await open_wal(opener, "quota", tso.allocator(), 1)
            # past the quota: the WAL's own cursor holds it all, and the broker's check
            # (every 5 s on this broker) then stops the producer
            failure: QuotaExceededError | None = None
            for i in range(600):
                try:
                    await wal.append(
                        MutableMessage(MessageType.INSERT, f"q{i}".encode().ljust(_PAYLOAD))
                    )
                except QuotaExceededError as exc:
                    failure = exc
                    break
                if i > 40:
                    await asyncio.sleep(0.05)
            await wal.close()
        assert failure is not None, "the quota never stopped the producer"
        assert "destination_storage (262144 bytes" in str(failure)
        assert "'streamwal-wal'" in str(failure) and "wal.retention" in str(failure)

        async with PulsarOpener(config) as opener:
            with pytest.raises(QuotaExceededError) as refused:
                await open_wal(opener, "quota", tso.allocator(), 2)
        assert "producer_exception" in str(refused.value)
        assert "'streamwal-wal'" in str(refused.value)

        # with a retention window, the open truncates its way out of the quota
        async with PulsarOpener(config) as opener:
            wal = await open_wal(
                opener, "quota", tso.allocator(), 3, WALConfig(retention=0, truncate_interval=1)
            )
            state = await wal.retention()
            assert state.truncated_before is not None
            await wal.append(MutableMessage(MessageType.INSERT, b"after the quota"))
            await wal.close()
