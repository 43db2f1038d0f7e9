"""The raw baseline every suite compares against: ``pulsar-client`` on its own.

One place decides how the raw side is set up, so the suites cannot drift apart: a
client that logs like the WAL's (natively, :data:`~streamwal_lab.bench.target.CLIENT_LOG`) and
a producer used the way ``pulsar-client`` is usually used for throughput: the WAL's
access mode (``ExclusiveWithFencing``) and pending-message limit, batching on with a
1 ms delay (the client's default is 10 ms; 1 ms makes the stronger baseline here) and
one send callback per message. The WAL's producer batches alike but asks for send
receipts on the edges of its segments of appends only (:mod:`streamwal.adaptors.pulsar.segments`):
that difference is part of what the suites measure.
"""

from __future__ import annotations

from typing import Any

import pulsar
from pulsar import asyncio as pulsar_asyncio

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.opener import client_logger
from streamwal_lab.bench.target import CLIENT_LOG

__all__ = [
    "RAW_BATCHING_DELAY_MS",
    "blocking_raw_client",
    "producer_settings",
    "raw_client",
    "raw_producer",
]

RAW_BATCHING_DELAY_MS = 1


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
