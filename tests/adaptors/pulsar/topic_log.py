"""What a topic holds, read with a plain client: the yardstick of what a test's
appends were acknowledged as."""

from __future__ import annotations

import asyncio

import pulsar

from streamwal.adaptors.pulsar import PulsarBackendWAL, PulsarMessageId
from streamwal.wal.backend import append_entry
from streamwal.wal.message_id import MessageId

__all__ = ["keep_appending", "key", "read_log", "read_log_writers"]


def read_log(service_url: str, topic: str) -> dict[tuple[int, int, int], bytes]:
    """Every message of the topic by (ledger, entry, batch index), with a plain reader."""
    return {at: data for at, (data, _) in read_log_writers(service_url, topic).items()}


def read_log_writers(service_url: str, topic: str) -> dict[tuple[int, int, int], tuple[bytes, str]]:
    """Every message of the topic and the producer that wrote it, as :func:`read_log`."""
    client = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        log: dict[tuple[int, int, int], tuple[bytes, str]] = {}
        while reader.has_message_available():
            message = reader.read_next(10_000)
            at = key(PulsarMessageId.from_pulsar(message.message_id()))
            log[at] = (message.data(), message.producer_name())
        return log
    finally:
        client.close()


def key(at: MessageId) -> tuple[int, int, int]:
    assert isinstance(at, PulsarMessageId)
    return (at.ledger, at.entry, max(at.batch_index, 0))


async def keep_appending(
    wal: PulsarBackendWAL,
    name: str,
    stop: asyncio.Event,
    acked: list[tuple[MessageId, bytes]],
    failed: list[BaseException],
) -> None:
    """Append ``name-0``, ``name-1``... until ``stop``; record each outcome."""
    seq = 0
    while not stop.is_set():
        payload = f"{name}-{seq}".encode()
        seq += 1
        try:
            acked.append((await append_entry(wal, payload, {}), payload))
        except Exception as exc:
            failed.append(exc)
