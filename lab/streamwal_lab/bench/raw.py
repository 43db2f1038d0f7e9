"""The raw baseline every suite compares against: ``pulsar-client`` on its own.

One place decides how the raw side is set up, so the suites cannot drift apart: a
client that logs like the WAL's (natively, :data:`~streamwal_lab.bench.target.CLIENT_LOG`) and
a producer used the way ``pulsar-client`` is usually used for throughput: the WAL's
access mode (``ExclusiveWithFencing``) and pending-message limit, batching on with a
1 ms delay (the client's default is 10 ms; 1 ms makes the stronger baseline here) and
one send callback per message. The WAL's producer batches alike but asks for send
receipts on the edges of its segments of appends only (:mod:`streamwal.adaptors.pulsar.segments`):
that difference is part of what the suites measure.

The read suites' baseline is the same producer's channel read back by the simplest
reader loop (:func:`fill_raw`, :func:`read_raw`): Pulsar batches what the producer sent
and its client splits each batch into messages again, so the raw reader counts
messages of the size the WAL's readers read, not the entries of the WAL's own channel
(a WAL that packs its appends writes one entry for many messages).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pulsar
from pulsar import asyncio as pulsar_asyncio

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.opener import client_logger
from streamwal_lab.bench.target import CLIENT_LOG

__all__ = [
    "RAW_BATCHING_DELAY_MS",
    "blocking_raw_client",
    "fill_raw",
    "producer_settings",
    "raw_client",
    "raw_producer",
    "read_raw",
]

RAW_BATCHING_DELAY_MS = 1
_FILL_WINDOW = 1000  # sends in flight while a raw channel is filled
_READ_TIMEOUT_S = 300.0  # a raw read that never ends (its topic deleted under it) fails


def raw_client(pulsar_url: str) -> Any:
    return pulsar_asyncio.Client(pulsar_url, logger=client_logger(CLIENT_LOG))


def blocking_raw_client(pulsar_url: str) -> Any:
    """The blocking client, for a ``send_async`` loop on a thread of its own."""
    return pulsar.Client(pulsar_url, logger=client_logger(CLIENT_LOG))


def producer_settings(config: PulsarConfig, *, block_if_queue_full: bool = False) -> dict[str, Any]:
    """``create_producer``'s settings for a raw producer (either client's)."""
    return {
        "access_mode": pulsar.ProducerAccessMode.ExclusiveWithFencing,
        "batching_enabled": config.batching,
        "batching_max_publish_delay_ms": RAW_BATCHING_DELAY_MS,
        "max_pending_messages": config.max_pending_messages,
        "block_if_queue_full": block_if_queue_full,
    }


async def raw_producer(client: Any, topic: str, config: PulsarConfig) -> Any:
    return await client.create_producer(topic, **producer_settings(config))


async def fill_raw(
    client: Any, topic: str, config: PulsarConfig, messages: int, payload: bytes
) -> None:
    """``messages`` sends of ``payload`` to ``topic`` through :func:`raw_producer`, a
    window of them in flight at a time: the channel a raw reader reads back."""
    producer = await raw_producer(client, topic, config)
    try:
        for start in range(0, messages, _FILL_WINDOW):
            count = min(_FILL_WINDOW, messages - start)
            await asyncio.gather(*(producer.send(payload) for _ in range(count)))
    finally:
        await producer.close()


async def read_raw(client: Any, topic: str, messages: int) -> int:
    """``messages`` messages of ``topic`` from its earliest, by the simplest reader
    loop of the asyncio client (one ``read_next`` each, no decoding); the count read.
    ``TimeoutError`` if they do not come (one bound for the read, none per message)."""
    reader = await client.create_reader(topic, pulsar.MessageId.earliest)
    read = 0
    try:
        async with asyncio.timeout(_READ_TIMEOUT_S):
            while read < messages:
                await reader.read_next()
                read += 1
        return read
    finally:
        await reader.close()
