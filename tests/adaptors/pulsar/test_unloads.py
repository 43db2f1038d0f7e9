"""A topic unloaded under appenders costs them nothing (the real broker).

An unload closes the topic at the broker; the client reconnects and sends what was
pending again, and the broker's deduplication answers the copies it already holds
without a position (``-1:-1``). Those appends are in the log: the WAL finds them there
instead of answering "unknown position".
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.adaptors.testing import writable
from streamwal.wal.backend import append_entry
from streamwal.wal.message_id import MessageId
from streamwal_lab.stack import StackInfo
from tests.adaptors.pulsar.topic_log import key, read_log

pytestmark = pytest.mark.integration

APPENDERS = 8
UNLOADS = 10


async def test_ten_unloads_under_eight_appenders_fail_no_append(
    stack: StackInfo, unique: str
) -> None:
    channel = f"unloads-{unique}"
    config = PulsarConfig(service_url=stack.pulsar_url)
    topic = config.topic(channel)
    admin = PulsarAdmin(stack.pulsar_admin_url)
    acked: list[tuple[MessageId, bytes]] = []
    failed: list[BaseException] = []
    stop = asyncio.Event()
    async with PulsarOpener(config) as opener:
        wal = await writable(opener, channel)

        async def append(writer: int) -> None:
            seq = 0
            while not stop.is_set():
                payload = f"{writer}-{seq}".encode()
                try:
                    acked.append((await append_entry(wal, payload, {"w": str(writer)}), payload))
                except Exception as exc:
                    failed.append(exc)
                seq += 1

        writers = [asyncio.create_task(append(w)) for w in range(APPENDERS)]
        try:
            for _ in range(UNLOADS):
                await asyncio.sleep(0.8)
                before = len(acked)
                await admin.put(f"{PulsarAdmin.topic_path(topic)}/unload")
                await asyncio.sleep(0.2)
                assert len(acked) >= before  # appends go on across the unload
            await asyncio.sleep(0.5)
        finally:
            stop.set()
            await asyncio.gather(*writers)
        with contextlib.suppress(Exception):
            await wal.close()
    assert not failed, f"{len(failed)} failed appends, first: {failed[0]!r}"
    log = await asyncio.to_thread(read_log, stack.pulsar_url, topic)
    misplaced = [(at, payload) for at, payload in acked if log.get(key(at)) != payload]
    assert not misplaced, f"{len(misplaced)} acknowledged appends not at their id: {misplaced[:3]}"
    assert len(log) == len(acked) == len(set(log.values()))  # each once, nothing else
    assert len({at for at, _ in acked}) == len(acked)
