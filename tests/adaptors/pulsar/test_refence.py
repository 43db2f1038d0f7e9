"""An earlier owner's writer that reattaches during a topic move is fenced again.

The model of a topic's exclusive producers from the abandoned-creation tests, with
the broker's race of a topic moving between brokers: the old owner's writer, being
added to the freshly loaded topic when the fence arrives, is not evicted by it and
stays attached after it. The new owner's writer is then refused until a second fence
evicts that producer; an owner that keeps coming back is reported as a takeover.
"""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from streamwal.errors import ChannelFencedError
from tests.adaptors.pulsar.test_abandoned_creation import _FENCING, _channel, _Producer, _Topic


class _MovingTopic(_Topic):
    """After each of the first ``reattaching`` fences, the old owner's writer is back."""

    def __init__(self, reattaching: int) -> None:
        super().__init__(delays=[])
        self.reattaching = reattaching
        self.fences = 0

    async def create_producer(self, topic: str, *, access_mode: Any, **options: Any) -> _Producer:
        producer = await super().create_producer(topic, access_mode=access_mode, **options)
        if access_mode == _FENCING:
            self.fences += 1
            if self.fences <= self.reattaching:
                self.producers.add(_Producer(self, pulsar.ProducerAccessMode.Exclusive, -1))
        return producer


async def test_a_writer_reattached_after_the_fence_is_fenced_again() -> None:
    topic = _MovingTopic(reattaching=1)
    channel = _channel(topic)
    await channel.ensure_writable()
    writer = channel._state.producer
    assert topic.fences == 2  # the fence, and the one after the old writer came back
    assert writer is not None and topic.producers == {writer}
    assert writer.mode == pulsar.ProducerAccessMode.Exclusive


async def test_an_owner_that_keeps_coming_back_ends_the_open_as_taken_over() -> None:
    topic = _MovingTopic(reattaching=10)
    channel = _channel(topic)
    with pytest.raises(ChannelFencedError, match="taken over during the open"):
        await channel.ensure_writable()
    assert topic.fences == 3  # the fence and at most two more
    assert channel._state.producer is None
