"""The probe that the broker really drops a resent message: deduplication, verified.

The WAL needs broker deduplication: a producer that reconnects resends everything it
had in flight, and without deduplication an entry the broker had already persisted
is written again, behind later entries (a time tick that goes back in the log). It is
off on a stock broker, and a namespace or topic policy can turn it on or off, so it is
checked, not assumed: a named producer sends the same sequence id twice on a fresh
topic of the channel's namespace, and the broker must drop the second.
"""

from __future__ import annotations

import logging
from typing import Any

import pulsar

from streamwal.timeouts import within

__all__ = ["deduplication_enforced"]

_log = logging.getLogger(__name__)

_PAYLOAD = b"streamwal-deduplication-probe"


async def deduplication_enforced(client: Any, topic: str, timeout: float) -> bool:
    """True when the broker dropped a resent sequence id on ``topic`` (a fresh topic).

    A dropped send is answered with no position (``-1:-1``); the topic is then read
    back, and must hold the message once.
    """
    name = topic.rsplit("/", 1)[-1]
    producer = await within(
        client.create_producer(topic, producer_name=name, batching_enabled=False), timeout
    )
    try:
        await within(producer.send(_PAYLOAD, sequence_id=1), timeout)
        second = await within(producer.send(_PAYLOAD, sequence_id=1), timeout)
    finally:
        try:
            await within(producer.close(), timeout)
        except Exception:  # the probe's answer is in already
            pass
    dropped = second.ledger_id() < 0 or second.entry_id() < 0
    copies = await _copies(client, topic, timeout)
    _log.info(
        "deduplication probe on %s: second send %s, %d copies in the log",
        topic,
        "dropped" if dropped else f"written at {second}",
        copies,
    )
    return dropped and copies == 1


async def _copies(client: Any, topic: str, timeout: float) -> int:
    reader = await within(client.create_reader(topic, pulsar.MessageId.earliest), timeout)
    try:
        found = 0
        while await within(reader.has_message_available(), timeout):
            message = await within(reader.read_next(), timeout)
            found += message.data() == _PAYLOAD
        return found
    finally:
        try:
            await within(reader.close(), timeout)
        except Exception:
            pass
