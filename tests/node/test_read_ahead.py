"""The read-ahead of ConsumeBatch: frames bounded by count and bytes, what is ready
only, the scanner's error after the messages before it, and a bounded buffer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from streamwal.errors import UnavailableError
from streamwal.node.read_ahead import ReadAhead


@dataclass
class _Msg:
    payload: bytes


class _Scanner:
    """Yields ``sizes`` as messages, waiting for ``gate`` before ``pause_at``."""

    def __init__(self, sizes: list[int], error: Exception | None = None) -> None:
        self.sizes = sizes
        self.error = error
        self.read = 0
        self.closed = False
        self.gate = asyncio.Event()
        self.pause_at: int | None = None
        self._iterator: AsyncIterator[_Msg] | None = None

    async def _messages(self) -> AsyncIterator[_Msg]:
        for i, size in enumerate(self.sizes):
            if i == self.pause_at:
                await self.gate.wait()
            self.read += 1
            yield _Msg(b"x" * size)
        if self.error is not None:
            raise self.error
        await asyncio.Event().wait()  # a log has no end

    def __aiter__(self) -> AsyncIterator[_Msg]:
        return self._messages()

    async def next_batch(self, limit: int) -> list[_Msg]:
        """One message at a time, as the async iterator hands them out."""
        if self._iterator is None:
            self._iterator = self._messages()
        return [await anext(self._iterator)]

    async def close(self) -> None:
        self.closed = True


def _ahead(scanner: _Scanner, limit: int = 100) -> ReadAhead:
    ahead = ReadAhead(scanner, limit)  # type: ignore[arg-type]
    ahead.start()
    return ahead


def _sizes(msgs: list[Any]) -> list[int]:
    return [len(m.payload) for m in msgs]


async def test_frames_take_what_is_ready_within_count_and_bytes() -> None:
    scanner = _Scanner([10] * 5 + [500] + [10] * 2)
    ahead = _ahead(scanner)
    await asyncio.sleep(0.01)
    assert _sizes(await ahead.take(3, 1000)) == [10, 10, 10]  # count
    assert _sizes(await ahead.take(10, 100)) == [10, 10]  # 500 would pass the bytes
    assert _sizes(await ahead.take(10, 100)) == [500]  # larger than the bound: alone
    assert _sizes(await ahead.take(10, 100)) == [10, 10]
    await ahead.close()
    assert scanner.closed


async def test_a_frame_does_not_wait_to_fill_up() -> None:
    scanner = _Scanner([10] * 6)
    scanner.pause_at = 2
    ahead = _ahead(scanner)
    assert _sizes(await ahead.take(10, 1000)) == [10, 10]
    waiting = asyncio.ensure_future(ahead.take(10, 1000))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    scanner.gate.set()
    assert len(await asyncio.wait_for(waiting, 1)) >= 1
    await ahead.close()


async def test_the_error_comes_after_the_messages_before_it() -> None:
    ahead = _ahead(_Scanner([10] * 3, error=UnavailableError("gone")))
    await asyncio.sleep(0.01)
    assert len(await ahead.take(10, 1000)) == 3
    with pytest.raises(UnavailableError):
        await ahead.take(10, 1000)
    await ahead.close()


async def test_reading_ahead_stops_at_the_limit() -> None:
    scanner = _Scanner([10] * 50)
    ahead = _ahead(scanner, limit=8)
    await asyncio.sleep(0.01)
    assert scanner.read <= 9  # the limit, plus the one the scanner handed over
    assert len(await ahead.take(4, 1000)) == 4
    await asyncio.sleep(0.01)
    assert scanner.read <= 13
    await ahead.close()


class _BatchScanner(_Scanner):
    """Hands out as many messages as asked at once, as a scanner over a full buffer."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__(sizes)
        self.asked: list[int] = []

    async def next_batch(self, limit: int) -> list[_Msg]:
        self.asked.append(limit)
        if self.read >= len(self.sizes):
            await asyncio.Event().wait()  # a log has no end
        batch = [_Msg(b"x" * size) for size in self.sizes[self.read : self.read + limit]]
        self.read += len(batch)
        return batch


async def test_batches_from_the_scanner_keep_to_the_limit_and_the_order() -> None:
    scanner = _BatchScanner(list(range(1, 51)))
    ahead = _ahead(scanner, limit=8)
    await asyncio.sleep(0.01)
    assert scanner.read == 8 and scanner.asked == [8]
    taken = [await ahead.take(3, 1000) for _ in range(2)]
    await asyncio.sleep(0.01)
    assert scanner.read <= 14
    while sum(len(t) for t in taken) < 50:
        taken.append(await asyncio.wait_for(ahead.take(5, 1000), 1))
    assert [n for t in taken for n in _sizes(t)] == list(range(1, 51))
    assert all(0 < asked <= 8 for asked in scanner.asked)
    await ahead.close()
