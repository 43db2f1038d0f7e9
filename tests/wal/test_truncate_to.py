"""Truncating to a message id on the in-process backend: the contract's rules (inclusive,
``all`` after it, reads from it refused, after it allowed, the slowest checkpoint
clamps, bad ids refused), which tests/adaptors/pulsar/test_truncate_to.py checks on
the broker."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.memory import MemoryMessageId
from streamwal.adaptors.pulsar import PulsarMessageId
from streamwal.errors import InvalidInputError, TruncatedError
from streamwal.wal import DeliveryPolicy, MessageType, Scanner
from streamwal.wal.message_id import MessageId
from tests.wal.testkit import OpenOwner, insert


async def _inserts(scanner: Scanner, count: int) -> list[MessageId]:
    found: list[MessageId] = []
    try:
        while len(found) < count:
            msg = await asyncio.wait_for(scanner.__anext__(), 2.0)
            if msg.type is MessageType.INSERT:
                found.append(msg.message_id)
    finally:
        await scanner.close()
    return found


async def test_truncate_to_an_id(open_owner: OpenOwner) -> None:
    wal = await open_owner()
    results = [await wal.append(insert(f"m{i}".encode())) for i in range(8)]
    ids = [r.message_id for r in results]

    await wal.checkpoint("slow", ids[2], 1)
    used = await wal.truncate_to(ids[5])
    assert used is not None and ids[1] <= used < ids[2]  # ids[2] is kept for the consumer
    assert await _inserts(await wal.read(DeliveryPolicy.all()), 1) == [ids[2]]

    await wal.remove_checkpoint("slow")
    assert await wal.truncate_to(ids[5]) == ids[5]
    assert await wal.truncate_to(ids[4]) is None  # truncated already
    assert await _inserts(await wal.read(DeliveryPolicy.all()), 2) == ids[6:]
    with pytest.raises(TruncatedError):
        await wal.read(DeliveryPolicy.start_from(ids[5]))
    with pytest.raises(TruncatedError):
        await wal.read(DeliveryPolicy.start_after(ids[4]))
    assert await _inserts(await wal.read(DeliveryPolicy.start_after(ids[5])), 2) == ids[6:]
    # a time-tick read the write-ahead buffer serves skips the truncated part too
    by_time = await wal.read(DeliveryPolicy.start_from_time_tick(results[0].time_tick))
    assert by_time.source == "buffer"
    assert await _inserts(by_time, 2) == ids[6:]

    for bad in (MemoryMessageId(10_000), PulsarMessageId(1, 2)):
        with pytest.raises(InvalidInputError):
            await wal.truncate_to(bad)
    assert await _inserts(await wal.read(DeliveryPolicy.all()), 2) == ids[6:]
