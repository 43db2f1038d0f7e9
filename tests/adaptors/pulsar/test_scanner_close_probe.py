"""A read whose reader is closed under it ends typed even when the client's close
misses the pending receive (a race in the native client)."""

from __future__ import annotations

import asyncio
from typing import Any

import pulsar
import pytest
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar import scanner as scanner_module
from streamwal.adaptors.pulsar.scanner import PulsarScanner
from streamwal.errors import ClosedError


class _Native:
    def __init__(self) -> None:
        self.connected = True

    def is_connected(self) -> bool:
        return self.connected


class _StuckReader:
    """A reader whose pending read never completes, as after the race."""

    def __init__(self, probe: Any) -> None:
        self._reader = _Native()
        self._probe = probe
        self.probes = 0

    async def read_next(self) -> Any:
        await asyncio.Event().wait()

    async def has_message_available(self) -> bool:
        self.probes += 1
        return bool(await self._probe())

    async def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def _fast_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scanner_module, "CLOSE_PROBE_S", 0.05)


async def test_a_closed_reader_ends_the_pending_read_with_closed_error() -> None:
    async def closed() -> bool:
        raise PulsarException(pulsar.Result.AlreadyClosed)

    reader = _StuckReader(closed)
    reader._reader.connected = False
    with pytest.raises(ClosedError):
        await asyncio.wait_for(PulsarScanner(reader, "c").__anext__(), 2)


async def test_a_reconnecting_reader_keeps_its_read() -> None:
    """Disconnected but not closed (the probe does not answer): the read waits on."""

    async def reconnecting() -> bool:
        await asyncio.Event().wait()
        return False

    reader = _StuckReader(reconnecting)
    reader._reader.connected = False
    pending = asyncio.ensure_future(PulsarScanner(reader, "c").__anext__())
    await asyncio.sleep(0.4)
    assert not pending.done()
    assert reader.probes >= 2
    pending.cancel()


async def test_a_connected_reader_is_not_probed() -> None:
    async def never() -> bool:
        raise AssertionError("probed")

    reader = _StuckReader(never)
    pending = asyncio.ensure_future(PulsarScanner(reader, "c").__anext__())
    await asyncio.sleep(0.3)
    assert not pending.done() and reader.probes == 0
    pending.cancel()
