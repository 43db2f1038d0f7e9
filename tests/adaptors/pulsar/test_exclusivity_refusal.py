"""A broker that accepts two exclusive producers is refused (unit, no broker)."""

from __future__ import annotations

import asyncio
from typing import Any

import pulsar
import pytest
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar import PulsarConfig, PulsarOpener, verify_exclusive_access
from streamwal.errors import ExclusivityNotEnforcedError
from streamwal.wal.initializing import open_wal
from tests.wal.testkit import BatchAllocator, CounterTSO

_LAX_URL = "pulsar://lax:6650"


class _Producer:
    async def send(self, payload: bytes, **_: Any) -> None:
        return None

    async def close(self) -> None:
        return None


class _LaxBroker:
    """Plays a broker (or proxy, or mock) that ignores access modes."""

    def __init__(self) -> None:
        self.created = 0
        self.topics: list[str] = []

    async def create_producer(self, topic: str, **_: Any) -> _Producer:
        self.created += 1
        self.topics.append(topic)
        return _Producer()

    async def close(self) -> None:
        return None


class _CountingOpener(PulsarOpener):
    """A Pulsar opener on the lax broker that counts the write attempts' checks."""

    def __init__(self, broker: _LaxBroker) -> None:
        super().__init__(PulsarConfig(service_url=_LAX_URL))
        self._client = broker  # what start() would create, minus the connection
        self.checks = 0

    async def verify_exclusivity(self) -> None:
        self.checks += 1
        await super().verify_exclusivity()


async def test_a_broker_accepting_two_exclusive_producers_is_refused() -> None:
    broker = _LaxBroker()
    with pytest.raises(ExclusivityNotEnforcedError, match="pulsar://lax:6650"):
        await verify_exclusive_access(broker, "persistent://public/default/", _LAX_URL)
    assert broker.created == 2


class _FencedProducer(_Producer):
    def __init__(self) -> None:
        self.fenced = False

    async def send(self, payload: bytes, **_: Any) -> None:
        if self.fenced:
            raise PulsarException(pulsar.Result.ProducerFenced)


class _MisledOnce(_LaxBroker):
    """Lax on its first probe topic only, strict after: a real broker whose probe
    topic was deleted and auto-created again in the middle of the probe looks so."""

    def __init__(self) -> None:
        super().__init__()
        self._producers: dict[str, list[_FencedProducer]] = {}

    async def create_producer(self, topic: str, **options: Any) -> _Producer:
        if not self.topics or topic == self.topics[0]:
            return await super().create_producer(topic, **options)
        self.created += 1
        self.topics.append(topic)
        present = self._producers.setdefault(topic, [])
        if options["access_mode"] == pulsar.ProducerAccessMode.ExclusiveWithFencing:
            for producer in present:
                producer.fenced = True
            present.clear()
        elif present:
            raise PulsarException(pulsar.Result.ProducerFenced)
        producer = _FencedProducer()
        present.append(producer)
        return producer


async def test_one_misleading_probe_is_not_a_refusal() -> None:
    broker = _MisledOnce()
    opener = _CountingOpener(broker)
    await opener.verify_exclusivity()  # the second probe finds exclusivity enforced
    assert opener._verified
    assert len(set(broker.topics)) == 2
    await opener.verify_exclusivity()
    assert len(set(broker.topics)) == 2  # a pass is remembered too
    await opener.close()


async def test_the_opener_remembers_a_refusal_and_does_not_probe_again() -> None:
    broker = _LaxBroker()
    opener = _CountingOpener(broker)
    for _ in range(3):
        with pytest.raises(ExclusivityNotEnforcedError, match="pulsar://lax:6650"):
            await opener.verify_exclusivity()
    # confirmed once on a second probe topic (two producers each), then not again
    assert broker.created == 4
    assert len(set(broker.topics)) == 2
    await opener.close()


async def test_open_wal_on_a_lax_broker_fails_at_the_first_attempt() -> None:
    """The default first-time-tick backoff is unbounded: a retriable refusal would
    keep the open going for ever; it must end at once, before any writer exists."""
    broker = _LaxBroker()
    opener = _CountingOpener(broker)
    allocator = BatchAllocator(CounterTSO())
    with pytest.raises(ExclusivityNotEnforcedError, match="pulsar://lax:6650"):
        await asyncio.wait_for(open_wal(opener, "lax-channel", allocator, 1), 5)
    assert opener.checks == 1  # exactly one attempt
    assert allocator.syncs == 0 and allocator.allocated == []  # no time tick was taken
    channel_topic = opener.config.topic("lax-channel")
    assert channel_topic not in broker.topics  # neither a fencer nor a writing producer
    assert all("streamwal-exclusivity-probe-" in topic for topic in broker.topics)
    assert not opener._channels  # the failed open closed its backend: no WAL is left
    await opener.close()
