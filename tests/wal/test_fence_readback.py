"""Settling appends a fence caught in flight by reading the log (unit: a log in memory)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from streamwal.adaptors.memory.backend import MemoryMessageId
from streamwal.errors import WriteOutcome
from streamwal.wal.backend import BackendMessage, DeliveryPolicy
from streamwal.wal.interceptors.timetick.fence_readback import FenceReadback
from streamwal.wal.message_id import MessageId

OURS, THEIRS = 1, 2


def entry(offset: int, source: int, time_tick: int, first: bool = False) -> BackendMessage:
    props = {"_t": "TimeTick" if first else "Insert", "_v": "1", "_tt": str(time_tick)}
    props["_src"] = str(source)
    if not first:
        props["_lc"] = MemoryMessageId(0).to_bytes().hex()
    return BackendMessage(MemoryMessageId(offset), b"p", props)


class _Log:
    """A backend whose reads yield ``entries`` after the asked id, then wait."""

    def __init__(self, entries: list[BackendMessage]) -> None:
        self.entries = entries
        self.reads = 0

    async def read(self, policy: DeliveryPolicy) -> Any:
        self.reads += 1
        assert policy.kind == DeliveryPolicy.START_AFTER and policy.message_id is not None
        after: MessageId = policy.message_id
        return _Scanner([e for e in self.entries if after < e.message_id])


class _Scanner:
    def __init__(self, entries: list[BackendMessage]) -> None:
        self._entries = iter(entries)
        self.closed = False

    def __aiter__(self) -> AsyncIterator[BackendMessage]:
        return self

    async def __anext__(self) -> BackendMessage:
        for item in self._entries:
            return item
        await asyncio.Event().wait()  # a log has no end
        raise AssertionError

    async def close(self) -> None:
        self.closed = True


async def test_in_flight_appends_are_found_or_known_absent_once_the_new_owner_wrote() -> None:
    log = _Log(
        [
            entry(1, OURS, 101),
            entry(2, OURS, 102),  # landed before the fence
            entry(3, THEIRS, 200, first=True),  # the new owner's first time tick
            entry(4, OURS, 103),  # not ours to find: past the takeover
        ]
    )
    readback = FenceReadback("c", log, OURS)  # type: ignore[arg-type]
    after = MemoryMessageId(1)
    answers = await asyncio.gather(*(readback.settle(tt, after) for tt in (102, 103, 104)))
    assert answers == [MemoryMessageId(2), WriteOutcome.NOT_WRITTEN, WriteOutcome.NOT_WRITTEN]
    assert log.reads == 1  # one read for every append the fence caught
    assert (
        await readback.settle(101, MemoryMessageId(0)) is WriteOutcome.UNKNOWN
    )  # read began later
    await readback.close()


async def test_without_the_new_owners_first_time_tick_what_is_missing_stays_unknown() -> None:
    log = _Log([entry(1, OURS, 101), entry(2, THEIRS, 300)])
    readback = FenceReadback("c", log, OURS)  # type: ignore[arg-type]
    assert await readback.settle(101, MemoryMessageId(0)) == MemoryMessageId(1)
    assert await readback.settle(102, MemoryMessageId(0)) is WriteOutcome.UNKNOWN
