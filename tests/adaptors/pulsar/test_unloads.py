"""A topic unloaded under appenders costs them nothing (the real broker).

An unload closes the topic at the broker; the client reconnects and sends what was
pending again, and the broker's deduplication answers the copies it already holds
without a position (``-1:-1``). Those appends are in the log: the WAL finds them there
instead of answering "unknown position".
"""

from __future__ import annotations

import asyncio
import contextlib

import pulsar
import pytest

from streamwal.adaptors.pulsar import PulsarConfig, PulsarMessageId, PulsarOpener
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.adaptors.testing import writable
from streamwal.wal.message_id import MessageId
from streamwal_lab.stack import StackInfo

pytestmark = pytest.mark.integration

APPENDERS = 8
UNLOADS = 10


def _read_log(service_url: str, topic: str) -> dict[tuple[int, int, int], bytes]:
    """Every message of the topic by (ledger, entry, batch index), with a plain reader."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        log: dict[tuple[int, int, int], bytes] = {}
        while reader.has_message_available():
            message = reader.read_next(10_000)
            log[_key(PulsarMessageId.from_pulsar(message.message_id()))] = message.data()
        return log
    finally:
        client.close()


def _key(at: MessageId) -> tuple[int, int, int]:
    assert isinstance(at, PulsarMessageId)
    return (at.ledger, at.entry, max(at.batch_index, 0))


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
                    acked.append((await wal.append(payload, {"w": str(writer)}), payload))
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
    log = await asyncio.to_thread(_read_log, stack.pulsar_url, topic)
    misplaced = [(at, payload) for at, payload in acked if log.get(_key(at)) != payload]
    assert not misplaced, f"{len(misplaced)} acknowledged appends not at their id: {misplaced[:3]}"
    assert len(log) == len(acked) == len(set(log.values()))  # each once, nothing else
    assert len({at for at, _ in acked}) == len(acked)
