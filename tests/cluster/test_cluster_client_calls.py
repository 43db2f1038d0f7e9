"""``ClusterClient`` is the one client a user needs: batches, streams, transactions and
reads, each following the channel across a move (unit: two real servicers over one
in-process log store, with a routing service naming the current owner)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from streamwal import DeliveryPolicy
from streamwal.adaptors.memory import MemoryLogStore, MemoryMessageId
from streamwal.cluster import ClusterClient
from streamwal.cluster.client import WireMessageId
from streamwal.errors import TransactionError
from streamwal.node.client import Consumed, NodeClient
from streamwal.wal.message import decode_entry
from tests.cluster.static_routing import StaticRouting
from tests.node.memory_node import CounterSource, assign_on, memory_node

CHANNEL = "calls"


@dataclass
class _Nodes:
    addresses: list[str]
    routing: StaticRouting
    store: MemoryLogStore

    async def move_to(self, index: int) -> None:
        await assign_on(self.addresses[index], CHANNEL)
        self.routing.owner = self.addresses[index]

    def payloads(self) -> list[bytes]:
        messages = [
            m
            for raw in self.store.entries(CHANNEL)
            for m in decode_entry(raw, MemoryMessageId.from_bytes)
        ]
        return [m.payload for m in messages if m.payload and m.txn_id is None]


@pytest.fixture
async def nodes() -> AsyncIterator[_Nodes]:
    store = MemoryLogStore()
    routing = StaticRouting()
    counter = CounterSource()  # one timestamp source: time ticks increase across owners

    async with contextlib.AsyncExitStack() as running:
        served = [memory_node(n, store, counter, also=routing.add_to) for n in (1, 2)]
        addresses = [(await running.enter_async_context(node))[0] for node in served]
        made = _Nodes(addresses, routing, store)
        await made.move_to(0)
        yield made


async def _read(client: ClusterClient, until: bytes, **kw: Any) -> list[Consumed]:
    got: list[Consumed] = []
    stop = asyncio.Event()
    async for message in client.consume(CHANNEL, stop=stop, **kw):
        if message.type != "insert":
            continue  # the WAL's own messages: time ticks, transaction markers
        got.append(message)
        if message.payload == until:
            stop.set()
    return got


async def test_batches_streams_and_transactions_through_one_client(nodes: _Nodes) -> None:
    async with ClusterClient(nodes=nodes.addresses, tracing=False) as client:
        single = await client.produce(CHANNEL, b"one")
        batch = await client.produce_batch(CHANNEL, [b"two", b"three"])
        streamed = [a async for a in client.produce_stream(CHANNEL, [b"four", b"five"])]
        async with await client.begin_txn(CHANNEL, "v1") as txn:
            await txn.produce(b"six")
        with pytest.raises(TransactionError):
            async with await client.begin_txn(CHANNEL, "v1") as txn:
                await txn.produce(b"never")
                raise TransactionError(txn.txn_id, "the caller gave up")
        got = await _read(client, b"six")
        # a read from a position a client holds
        after = await _read(
            client, b"six", policy=DeliveryPolicy.start_after(WireMessageId(single.message_id))
        )
    assert [m.payload for m in got] == [b"one", b"two", b"three", b"four", b"five", b"six"]
    assert [m.payload for m in after] == [b"two", b"three", b"four", b"five", b"six"]
    numbers = [(a.producer_id, a.sequence) for a in [single, *batch, *streamed]]
    assert numbers == [(single.producer_id, s) for s in range(5)]  # every append numbered
    assert b"never" not in [m.payload for m in got]


async def test_a_read_follows_the_channel_across_a_move(nodes: _Nodes) -> None:
    async with ClusterClient(nodes=nodes.addresses, tracing=False, retry_for_s=10) as client:
        await client.produce(CHANNEL, b"a")
        await client.produce(CHANNEL, b"b")
        reader = asyncio.create_task(_read(client, b"d"))
        await asyncio.sleep(0.2)
        await nodes.move_to(1)  # node 1 is fenced and drops the channel; its read ends
        await client.produce(CHANNEL, b"c")
        await client.produce(CHANNEL, b"d")
        got = await asyncio.wait_for(reader, 20)
        assert client.moves_followed > 0
    assert [m.payload for m in got] == [b"a", b"b", b"c", b"d"]  # nothing lost or repeated


async def test_a_numbered_batch_whose_answer_was_lost_lands_once(nodes: _Nodes) -> None:
    async with ClusterClient(nodes=nodes.addresses, tracing=False, retry_for_s=10) as client:
        await client.produce(CHANNEL, b"a")
        nodes.store.faults.lose_answers = 1  # the batch's first message: unknown
        acked = await client.produce_batch(CHANNEL, [b"b", b"c", b"d"])
        await client.produce(CHANNEL, b"e")
    assert nodes.payloads() == [b"a", b"b", b"c", b"d", b"e"]
    assert len({a.message_id for a in acked}) == 3


async def test_a_numbered_batch_retried_after_a_move_lands_once(nodes: _Nodes) -> None:
    async with NodeClient(nodes.addresses[0], tracing=False) as first:
        acked = await first.produce_batch(CHANNEL, [b"x", b"y"])
        numbers = (acked[0].producer_id or 0, acked[0].sequence or 0)
        await nodes.move_to(1)
        async with NodeClient(nodes.addresses[1], tracing=False) as second:
            again = await second.produce_batch(CHANNEL, [b"x", b"y"], numbers=numbers)
    assert [a.message_id for a in again] == [a.message_id for a in acked]
    assert nodes.payloads() == [b"x", b"y"]
