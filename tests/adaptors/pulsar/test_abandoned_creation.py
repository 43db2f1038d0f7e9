"""A producer creation the opener gave up on must not evict the writer of its next try.

The broker here is a small model of a topic's exclusive producers (a fencing creation
evicts every producer; an ``Exclusive`` one is refused while one exists), so the order
of a late creation and the next try is set exactly. On the real broker this order came
from a restart (``streamwal chaos broker-restart``): a first-time-tick attempt timed
out on the fence, the client created that fencer once the broker was back, after the
next attempt's writer, and the open ended as fenced by its own node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pulsar
import pytest
from pulsar.asyncio import PulsarException

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.channel import PulsarBackendWAL
from streamwal.errors import UnavailableError
from streamwal.wal.backend import AccessMode

_FENCING = pulsar.ProducerAccessMode.ExclusiveWithFencing


class _Producer:
    def __init__(self, topic: _Topic, mode: Any, number: int) -> None:
        self.topic = topic
        self.mode = mode
        self.number = number
        self.evicted = False
        self.closed = False

    def producer_name(self) -> str:
        return f"fake-{self.number}"

    async def close(self) -> None:
        self.closed = True
        self.topic.producers.discard(self)


class _Topic:
    """One topic's exclusive producers, and a delay per creation in call order."""

    def __init__(self, delays: list[float]) -> None:
        self.producers: set[_Producer] = set()
        self.delays = delays
        self.created: list[_Producer] = []
        self.started = 0

    async def create_producer(self, topic: str, *, access_mode: Any, **_: Any) -> _Producer:
        number = self.started
        self.started += 1
        await asyncio.sleep(self.delays[number] if number < len(self.delays) else 0.0)
        if access_mode == _FENCING:
            for producer in list(self.producers):
                producer.evicted = True
            self.producers.clear()
        elif self.producers:
            raise PulsarException(pulsar.Result.ProducerBusy)
        producer = _Producer(self, access_mode, number)
        self.producers.add(producer)
        self.created.append(producer)
        return producer


async def _nothing() -> None:
    return None


async def _prepare(_channel: str, _topic: str, fence: Awaitable[None] | None) -> None:
    if fence is not None:
        await fence


def _channel(topic: _Topic) -> PulsarBackendWAL:
    config = PulsarConfig(service_url="pulsar://127.0.0.1:1", operation_timeout_s=0.2)
    return PulsarBackendWAL(
        topic, config, "late-fencer", AccessMode.READ_WRITE, _nothing, prepare_topic=_prepare
    )


async def test_a_late_fencer_is_closed_before_the_next_try_fences() -> None:
    # the first fencer answers after the opener gave up on it (0.2 s + 1 s), and before
    # the next try's bound on waiting for it
    topic = _Topic(delays=[1.8])
    channel = _channel(topic)
    with pytest.raises(UnavailableError, match="did not answer the fence"):
        await channel.ensure_writable()
    await channel.ensure_writable()  # the next try of the first time tick
    await asyncio.sleep(1.0)  # well after the first fencer was created
    late, fencer, writer = topic.created
    assert late.number == 0 and late.mode == _FENCING and late.closed
    assert fencer.mode == _FENCING and fencer.closed
    assert writer.mode == pulsar.ProducerAccessMode.Exclusive
    assert not writer.evicted and topic.producers == {writer}
    assert channel._state.producer is writer


async def test_a_creation_still_unanswered_holds_the_next_try_back() -> None:
    topic = _Topic(delays=[30.0])
    channel = _channel(topic)
    with pytest.raises(UnavailableError, match="did not answer the fence"):
        await channel.ensure_writable()
    # 2 operation timeouts + 1 s: nothing new is sent to the broker meanwhile
    with pytest.raises(UnavailableError, match="still unanswered"):
        await channel.ensure_writable()
    assert topic.started == 1 and not topic.producers


async def _cancelled_open(topic: _Topic) -> PulsarBackendWAL:
    """A channel whose open was cancelled 0.1 s in, while its fence was unanswered."""
    channel = _channel(topic)
    opening = asyncio.create_task(channel.ensure_writable())
    await asyncio.sleep(0.1)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    return channel


async def test_a_cancelled_open_leaves_no_producer_on_the_topic() -> None:
    topic = _Topic(delays=[0.3])
    await _cancelled_open(topic)
    await asyncio.sleep(0.5)
    (late,) = topic.created
    assert late.closed and not topic.producers


async def test_closing_a_channel_waits_for_what_a_cancelled_open_made() -> None:
    # a cluster's new owner fences once the old owner's close returned: nothing of the
    # old owner's may be made or closed on the topic after that (docs/reliability.md)
    topic = _Topic(delays=[0.3])
    channel = await _cancelled_open(topic)
    await channel.close()
    (late,) = topic.created
    assert late.closed and not topic.producers
