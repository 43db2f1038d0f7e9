"""Batch appends on real Pulsar and a real etcd-backed TSO: each batch lands back to
back in its order, every receipt matches the log, and a fenced owner's batch says
which messages landed (those the fence caught in flight may be unknown)."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId, PulsarOpener
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.errors import BatchAppendError, ChannelFencedError, WriteOutcome
from streamwal.tso import InProcessTSO
from streamwal.verify.acks import Ack, digest
from streamwal.verify.cli import read_topic
from streamwal.verify.history import check_history
from streamwal.wal import AppendResult, MessageType, MutableMessage, open_wal
from streamwal.wal.message import decode_entry
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration


def _batch(prefix: str, count: int, size: int = 128) -> list[MutableMessage]:
    return [
        MutableMessage(MessageType.INSERT, f"{prefix}{i:04d}".encode().ljust(size, b"."))
        for i in range(count)
    ]


async def test_batches_land_contiguous_and_a_fenced_batch_names_what_landed(
    stack: StackInfo, unique: str, tso: InProcessTSO
) -> None:
    channel = f"wal-batch-{unique}"
    pulsar = PulsarConfig(service_url=stack.pulsar_url)
    acks: list[Ack] = []
    try:
        async with (
            PulsarOpener(pulsar) as first_opener,
            PulsarOpener(pulsar) as second_opener,
        ):
            wal = await open_wal(first_opener, channel, tso.allocator(), 1)
            batches = [_batch(f"b{b}-", 100) for b in range(4)]
            answered = await asyncio.gather(*(wal.append_many(batch) for batch in batches))
            for batch, results in zip(batches, answered, strict=True):
                for msg, result in zip(batch, results, strict=True):
                    acks.append(
                        Ack(result.message_id.to_bytes(), result.time_tick, digest(msg.payload))
                    )
                ticks = [r.time_tick for r in results]
                assert ticks == sorted(ticks)

            # a second owner fences the first while its batches are in flight
            partial: list[BatchAppendError] = []
            not_written: list[bytes] = []

            async def keep_appending(worker: int) -> None:
                for round_ in range(10_000):
                    batch = _batch(f"f{worker}-{round_}-", 50)
                    try:
                        results = await wal.append_many(batch)
                    except ChannelFencedError:
                        return  # refused before anything was handed over
                    except BatchAppendError as exc:
                        partial.append(exc)
                        for i, error in exc.failed.items():
                            # fenced, or caught in flight by the fence: unknown
                            assert isinstance(error, ChannelFencedError) or (
                                error.outcome is WriteOutcome.UNKNOWN
                            ), error
                            if error.outcome is WriteOutcome.NOT_WRITTEN:
                                not_written.append(batch[i].payload)
                        for i in exc.landed:
                            result = exc.results[i]
                            assert isinstance(result, AppendResult)
                            acks.append(
                                Ack(
                                    result.message_id.to_bytes(),
                                    result.time_tick,
                                    digest(batch[i].payload),
                                )
                            )
                        return
                    for msg, result in zip(batch, results, strict=True):
                        acks.append(
                            Ack(result.message_id.to_bytes(), result.time_tick, digest(msg.payload))
                        )

            appenders = [asyncio.ensure_future(keep_appending(w)) for w in range(4)]
            await asyncio.sleep(0.2)
            new_owner = await open_wal(second_opener, channel, tso.allocator(), 2)
            await asyncio.wait_for(asyncio.gather(*appenders), 60)
            assert partial, "no batch was caught by the fence"
            await wal.close()
            await new_owner.close()

        raw = await read_topic(stack.pulsar_url, pulsar.topic(channel))
        report = check_history(raw, PulsarMessageId.from_bytes, acks)
        assert report.ok, report.summary()
        assert [node for node, _ in report.owners] == [1, 2]
        payloads = [m.payload for e in raw for m in decode_entry(e, PulsarMessageId.from_bytes)]
        assert not set(not_written) & set(payloads)  # "not written" is never in the log
        for b, batch in enumerate(batches):
            start = payloads.index(batch[0].payload)
            assert payloads[start : start + 100] == [m.payload for m in batch], f"batch {b}"
    finally:
        admin = PulsarAdmin(stack.pulsar_admin_url)
        await admin.delete(f"{PulsarAdmin.topic_path(pulsar.topic(channel))}?force=true")
