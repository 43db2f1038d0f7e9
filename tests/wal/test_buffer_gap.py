"""An append of unknown outcome that did land is delivered to readers tailing the
write-ahead buffer too: the buffer marks a gap there and sends them to the backend."""

from __future__ import annotations

import asyncio

import pytest

from streamwal.adaptors.memory import MemoryLogStore
from streamwal.errors import EvictedError, OutcomeUnknownError
from streamwal.wal import DeliveryPolicy, MessageType, MutableMessage
from tests.wal.testkit import OpenOwner


def _insert(payload: bytes) -> MutableMessage:
    return MutableMessage(MessageType.INSERT, payload)


async def test_a_tailing_reader_sees_an_append_whose_answer_was_lost(
    open_owner: OpenOwner, store: MemoryLogStore
) -> None:
    wal = await open_owner()
    scanner = await wal.read(DeliveryPolicy.latest())
    assert scanner.source == "buffer"
    await wal.append(_insert(b"before"))
    store.faults.lose_answers = 1
    with pytest.raises(OutcomeUnknownError):
        await wal.append(_insert(b"lost answer"))
    await wal.append(_insert(b"after"))
    got = [(await asyncio.wait_for(anext(scanner), 2)).payload for _ in range(3)]
    assert got == [b"before", b"lost answer", b"after"]
    await scanner.close()


async def test_a_cursor_past_the_gap_is_sent_to_the_backend(open_owner: OpenOwner) -> None:
    wal = await open_owner()
    buffer = wal.buffer
    cursor = buffer.read_latest()
    first = await wal.append(_insert(b"a"))
    assert (await cursor.next()).time_tick == first.time_tick
    buffer.mark_gap(first.time_tick + 1)
    await wal.append(_insert(b"b"))
    with pytest.raises(EvictedError):
        await cursor.next()
    with pytest.raises(EvictedError):
        buffer.read_after(first.time_tick)
