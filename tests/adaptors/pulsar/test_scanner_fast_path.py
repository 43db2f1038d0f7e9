"""A read the reader can answer at once takes no task and no probe; one it cannot
answer waits as before, in order."""

from __future__ import annotations

from typing import Any

from streamwal.adaptors.pulsar.scanner import PulsarScanner
from tests.adaptors.pulsar.fake_ids import FakeId


class _Message:
    def __init__(self, entry: int) -> None:
        self._id = FakeId(1, entry)

    def message_id(self) -> FakeId:
        return self._id

    def data(self) -> bytes:
        return b"%d" % self._id.entry_id()

    def properties(self) -> dict[str, str]:
        return {}


class _Timeout(Exception):
    """What the C extension raises for a read with nothing received yet."""


class _Native:
    def __init__(self, received: list[int]) -> None:
        self.received = received
        self.timeouts: list[int] = []

    def read_next(self, timeout_ms: int) -> _Message:
        self.timeouts.append(timeout_ms)
        if not self.received:
            raise _Timeout()
        return _Message(self.received.pop(0))


class _Reader:
    def __init__(self, received: list[int], later: list[int]) -> None:
        self._reader = _Native(received)
        self.later = later
        self.waited = 0

    async def read_next(self) -> Any:
        self.waited += 1
        return _Message(self.later.pop(0))

    async def close(self) -> None:
        pass


async def test_received_messages_are_read_without_waiting_then_the_read_waits() -> None:
    reader = _Reader(received=[1, 2, 3], later=[4])
    scanner = PulsarScanner(reader, "c")
    entries = [await scanner.__anext__() for _ in range(4)]
    assert [e.payload for e in entries] == [b"1", b"2", b"3", b"4"]
    assert reader.waited == 1  # only the fourth, which had not arrived
    assert reader._reader.timeouts == [0, 0, 0, 0]  # never a blocking read
