"""The raw baseline every suite compares against: ``pulsar-client`` on its own.

One place decides how the raw side is set up, so the suites cannot drift apart: a
client that logs like the WAL's (natively, :data:`~node.bench.target.CLIENT_LOG`) and
a producer with the WAL's producer settings (``ExclusiveWithFencing``, batching and
its delay, the pending-message limit).
"""

from __future__ import annotations

from typing import Any

import pulsar
from pulsar import asyncio as pulsar_asyncio

from adaptors.pulsar import PulsarConfig
from adaptors.pulsar.opener import client_logger
from node.bench.target import CLIENT_LOG

__all__ = ["raw_client", "raw_producer"]


def raw_client(pulsar_url: str) -> Any:
    return pulsar_asyncio.Client(pulsar_url, logger=client_logger(CLIENT_LOG))


async def raw_producer(client: Any, topic: str, config: PulsarConfig) -> Any:
    return await client.create_producer(
        topic,
        access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
        batching_enabled=config.batching,
        batching_max_publish_delay_ms=config.batching_max_delay_ms,
        max_pending_messages=config.max_pending_messages,
        block_if_queue_full=False,
    )
