"""The self-check that the broker really enforces exclusive producers.

The whole takeover story rests on the broker refusing a second exclusive producer
and closing a fenced one. A broker that does not (an old version, a proxy that
fakes the protocol, a mock) would let two owners write, so before any WAL is opened
for writing the opener probes a scratch topic and refuses such a broker.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Container
from typing import Any

import pulsar
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar.errors import FENCING_RESULTS, translate
from streamwal.errors import ExclusivityNotEnforcedError

__all__ = ["probe_topic", "verify_exclusive_access"]

_log = logging.getLogger(__name__)

_REFUSALS = FENCING_RESULTS | {pulsar.Result.ProducerBusy}


def probe_topic(topic_prefix: str, what: str) -> str:
    """A fresh topic name for one probe of the broker (``what``: exclusivity, deduplication)."""
    return f"{topic_prefix}streamwal-{what}-probe-{uuid.uuid4().hex[:12]}"


async def verify_exclusive_access(
    client: Any, topic_prefix: str, broker: str, *, topic: str | None = None
) -> None:
    """Raise :class:`ExclusivityNotEnforcedError` unless the broker enforces exclusivity.

    ``topic``: the fresh topic to probe (default: a new name under ``topic_prefix``),
    given by a caller that deletes it afterwards.

    ``client`` is a ``pulsar.asyncio.Client``. Three facts are checked on a fresh
    topic: a second ``Exclusive`` producer is refused; an ``ExclusiveWithFencing``
    producer is accepted; and the first producer's next send then fails as fenced.
    """
    topic = topic or probe_topic(topic_prefix, "exclusivity")
    first = await client.create_producer(
        topic, access_mode=pulsar.ProducerAccessMode.Exclusive, batching_enabled=False
    )
    producers = [first]
    try:
        await first.send(b"probe")

        async def second() -> None:
            exclusive = pulsar.ProducerAccessMode.Exclusive
            producers.append(await client.create_producer(topic, access_mode=exclusive))

        if not await _refused(second(), _REFUSALS, topic):
            raise ExclusivityNotEnforcedError(
                f"broker {broker} accepted two exclusive producers on {topic}; "
                "streamwal will not open a WAL on it"
            )
        fencer = await client.create_producer(
            topic,
            access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
            batching_enabled=False,
        )
        producers.append(fencer)
        if not await _refused(first.send(b"after-fence"), FENCING_RESULTS, topic):
            raise ExclusivityNotEnforcedError(
                f"broker {broker} let a fenced producer write on {topic}; "
                "streamwal will not open a WAL on it"
            )
        _log.info("broker %s enforces exclusive producers (probe topic %s)", broker, topic)
    finally:
        for producer in producers:
            try:
                await producer.close()
            except Exception:  # closing a fenced producer may fail; nothing to do
                pass


async def _refused(attempt: Awaitable[object], refusals: Container[Any], topic: str) -> bool:
    """Whether the broker refused ``attempt`` as one that enforces exclusivity must (a
    result in ``refusals``); any other failure is the probe's own, typed as every
    broker error is."""
    try:
        await attempt
    except PulsarException as exc:
        if exc.error() not in refusals:
            raise translate(exc, channel=topic, what="exclusivity probe") from exc
        return True
    return False
