"""The writer clients an opener's channels share: how many, who gets which, and who
closes them (unit: fake clients; the broker's side is test_move_isolation)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable
from typing import Any

import pytest

from streamwal.adaptors.pulsar.channel import PulsarBackendWAL
from streamwal.adaptors.pulsar.clients import WriterClients
from streamwal.adaptors.pulsar.config import PulsarConfig
from streamwal.errors import ClosedError
from streamwal.wal.backend import AccessMode


class _Client:
    numbers = itertools.count()

    def __init__(self) -> None:
        self.number = next(self.numbers)
        self.closed = 0
        self.producers: list[_Producer] = []

    async def close(self) -> None:
        self.closed += 1

    async def create_producer(self, topic: str, **options: Any) -> _Producer:
        await asyncio.sleep(0.01)
        producer = _Producer()
        self.producers.append(producer)
        return producer


class _Producer:
    def __init__(self) -> None:
        self.closed = False

    def producer_name(self) -> str:
        return f"fake-{id(self)}"

    async def close(self) -> None:
        self.closed = True


async def test_zero_gives_every_channel_a_client_of_its_own() -> None:
    pool = WriterClients(_Client, 0, 1.0)
    a, b = pool.take(), pool.take()
    assert a is not b
    await pool.give_back(a)
    assert a.closed == 1 and b.closed == 0
    await pool.close()
    assert b.closed == 1


async def test_channels_share_the_least_used_client_and_the_last_one_closes_it() -> None:
    pool = WriterClients(_Client, 2, 1.0)
    taken = [pool.take() for _ in range(5)]
    first, second = taken[0], taken[1]
    assert {c.number for c in taken} == {first.number, second.number}
    assert sum(c is first for c in taken) == 3 and sum(c is second for c in taken) == 2
    for client in [c for c in taken if c is first]:
        await pool.give_back(client)
    assert first.closed == 1 and second.closed == 0  # two channels still use the second
    await pool.give_back(second)
    assert second.closed == 0
    await pool.give_back(second)
    assert second.closed == 1
    await pool.give_back(second)  # given back once too often: nothing happens
    assert second.closed == 1
    fresh = pool.take()  # every earlier one is closed: a new client
    assert fresh.number not in (first.number, second.number)
    await pool.close()
    assert fresh.closed == 1


async def _nothing() -> None:
    return None


async def _prepare(_channel: str, _topic: str, fence: Awaitable[None] | None) -> None:
    if fence is not None:
        await fence


def _channel(pool: WriterClients, opener_client: _Client) -> PulsarBackendWAL:
    return PulsarBackendWAL(
        opener_client,
        PulsarConfig(operation_timeout_s=1.0),
        "shared",
        AccessMode.READ_WRITE,
        _nothing,
        prepare_topic=_prepare,
        writer_client=pool.take(),
        give_back_writer_client=pool.give_back,
    )


async def test_a_channel_closed_while_it_takes_its_topic_over_keeps_no_producer() -> None:
    opener_client = _Client()
    pool = WriterClients(_Client, 1, 1.0)
    channel = _channel(pool, opener_client)
    neighbour = _channel(pool, opener_client)
    writer_client = channel._state.writer_client
    opening = asyncio.ensure_future(channel.ensure_writable())
    await asyncio.sleep(0.015)  # the fencer is made; the writer is being created
    await channel.close()
    with pytest.raises(ClosedError):
        await opening
    await asyncio.sleep(0.05)
    assert writer_client.producers and all(p.closed for p in writer_client.producers)
    assert not opener_client.producers  # nothing fell back to the opener's own client
    assert writer_client.closed == 0  # the neighbour still writes with it
    await neighbour.close()
    assert writer_client.closed == 1


async def test_a_second_close_waits_for_the_first_and_a_cancelled_close_finishes() -> None:
    opener_client = _Client()
    pool = WriterClients(_Client, 1, 1.0)
    channel = _channel(pool, opener_client)
    await channel.ensure_writable()
    writer_client = channel._state.writer_client
    first = asyncio.ensure_future(channel.close())
    await asyncio.sleep(0)
    first.cancel()  # a caller gives up on the close: the close itself goes on
    await channel.close()
    assert writer_client.closed == 1 and all(p.closed for p in writer_client.producers)
