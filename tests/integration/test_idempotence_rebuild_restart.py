"""A restarted owner whose log tail holds only its own first time tick rebuilds its
idempotence windows without a warning (issue 28, item 6): nothing before that tick
is in the window, so there is nothing to read, and reading from the tick itself
(exclusive of it) is no error."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.tso import InProcessTSO
from streamwal.wal.config import WALConfig
from streamwal.wal.initializing import open_wal
from streamwal.wal.message import MessageType, MutableMessage
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration


async def test_a_restart_rebuilds_from_its_own_first_time_tick_without_a_warning(
    stack: StackInfo,
    tso: InProcessTSO,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel = f"rebuild-{unique}"
    config = WALConfig(idempotence_rebuild_window=1.0)
    async with PulsarOpener(PulsarConfig(service_url=stack.pulsar_url)) as opener:
        wal = await open_wal(opener, channel, tso.allocator(), 1, config)
        message = MutableMessage(MessageType.INSERT, b"x", producer_id=7, sequence=0)
        await wal.append(message)
        await wal.close()
    await asyncio.sleep(2.0)  # everything written so far is older than the window
    caplog.set_level(logging.INFO, logger="streamwal")
    async with PulsarOpener(PulsarConfig(service_url=stack.pulsar_url)) as opener:
        wal = await open_wal(opener, channel, tso.allocator(), 2, config)
        await wal.append(MutableMessage(MessageType.INSERT, b"y", producer_id=8, sequence=0))
        await wal.close()
    warnings = [r.getMessage() for r in caplog.records if "stopped early" in r.getMessage()]
    assert warnings == []
